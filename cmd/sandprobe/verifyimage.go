package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/docker"
)

// dockerFlags are the Docker backend's flags, shared by verify-image and
// `run --backend docker`.
type dockerFlags struct {
	image, runtime, runtimeClass, host, binary string
	env                                        stringList
	entrypointTimeout                          time.Duration
}

func (d *dockerFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&d.image, "image", "", "docker: the image to verify (default: spec.image.ref); it must be on the engine, it is never pulled")
	fs.StringVar(&d.runtime, "runtime", "", "docker: the engine's runtime to run it under (runc, runsc, kata; default: the engine's default)")
	fs.StringVar(&d.runtimeClass, "runtime-class", "", "docker: the runtime class the policy knows this runtime as (default: the runtime's name); kube: which of spec.runtime.classNames the probe pod runs under (default: the first)")
	fs.StringVar(&d.host, "docker-host", "", "docker: the engine's address (default $DOCKER_HOST or the local socket)")
	fs.StringVar(&d.binary, "probe-binary", "", "docker: the static probe binary to mount into the container (default: sandprobe-probe beside this executable, else this executable)")
	fs.Var(&d.env, "env", "docker: KEY=VALUE added to the container's environment, as the pod sets it (repeatable)")
	fs.DurationVar(&d.entrypointTimeout, "entrypoint-timeout", probes.DefaultImageCommandTimeout, "docker: how long the image's own entrypoint runs under the constraints (check image.entrypoint); 0 leaves it out")
}

// backend builds the Docker backend; progress goes to stderr on a terminal.
func (d *dockerFlags) backend(a *app, p *policy.Policy, network string, logger *slog.Logger) (*docker.Backend, func(), error) {
	image := d.image
	if image == "" {
		image = p.Spec.Image.Ref
	}
	if image == "" {
		return nil, nil, fmt.Errorf("--image is required (or set spec.image.ref)")
	}
	for _, kv := range d.env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, nil, fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
	}
	cli, err := docker.NewClient(d.host)
	if err != nil {
		return nil, nil, err
	}
	pr := newProgress(a.stderr, isTerminal(a.stderr), logger)
	be := &docker.Backend{
		Client: cli, Image: image, Runtime: d.runtime, RuntimeClass: d.runtimeClass, Binary: d.binary,
		Env: d.env, Network: network, EntrypointTimeout: d.entrypointTimeout, Logger: logger, Progress: pr.show,
	}
	return be, func() { pr.done(); cli.Close() }, nil
}

func (a *app) cmdVerifyImage(fs *pflag.FlagSet) runFunc {
	var (
		policyPath string
		deadline   time.Duration
		df         dockerFlags
		out        outputs
		lf         logFlags
	)
	fs.StringVar(&policyPath, "policy", "", "the SandboxPolicy file")
	fs.DurationVar(&deadline, "deadline", 0, "bound on the whole container run (default: spec.probe.deadline, 2m)")
	group(fs, groupDocker, func() { df.register(fs) })
	out.register(fs)
	lf.register(fs)
	return func(ctx context.Context, _ []string) int {
		if err := out.check(); err != nil {
			fmt.Fprintf(a.stderr, "sandprobe verify-image: %v\n", err)
			return report.ExitBadInput
		}
		logger, err := lf.logger(a.stderr)
		if err != nil {
			fmt.Fprintf(a.stderr, "sandprobe verify-image: %v\n", err)
			return report.ExitBadInput
		}
		p, raw, ok := a.loadPolicy(policyPath)
		if !ok {
			return report.ExitBadInput
		}
		// verify-image sends no traffic: the container gets no network, and the
		// checks that need one are left out.
		be, closeBackend, err := df.backend(a, p, "none", logger)
		if err != nil {
			fmt.Fprintf(a.stderr, "sandprobe verify-image: %v\n", err)
			return report.ExitBadInput
		}
		spec := runner.ProbeSpec{Policy: p, PolicyBytes: raw, Nonce: runner.NewNonce(), Deadline: deadline, NoNetwork: true}
		run, _ := probeCycle(be, "docker").Run(ctx, spec) // docker has no preflight
		closeBackend()
		run.Notes = append(run.Notes, fmt.Sprintf("image %s, runtime %s, no network", be.Image, orDefault(df.runtime, "(the engine's default)")))
		if err := out.write(ctx, a, run, lf.verbose); err != nil {
			fmt.Fprintf(a.stderr, "sandprobe verify-image: %v\n", err)
			return report.ExitCouldNotRun
		}
		return run.ExitCode()
	}
}

// progress shows what a long wait is waiting for: one line, rewritten in
// place on a terminal; debug logs otherwise, so CI logs stay clean.
type progress struct {
	mu       sync.Mutex
	w        io.Writer
	terminal bool
	logger   *slog.Logger
	shown    bool
}

func newProgress(w io.Writer, terminal bool, logger *slog.Logger) *progress {
	return &progress{w: w, terminal: terminal, logger: logger}
}

func (p *progress) show(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case msg == "": // the backend is done waiting
		p.clear()
	case !p.terminal:
		p.logger.Debug(msg)
	default:
		fmt.Fprintf(p.w, "\r\033[K%s…", msg)
		p.shown = true
	}
}

func (p *progress) clear() {
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}

func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
func (s *stringList) Type() string       { return "stringArray" }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
