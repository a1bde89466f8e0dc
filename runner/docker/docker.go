// Package docker runs the probe inside a container image on a Docker engine,
// under the policy's exact constraints: read-only root, the declared uid:gid,
// every capability dropped, no_new_privs, the seccomp profile, a tmpfs for
// each writable path, an empty workspace, the memory and pid limits, no
// network, and the declared runtime (runc, runsc, kata). The static sandprobe
// binary and the policy are bind-mounted read-only, so the image itself is
// never changed. The container is always removed, whatever happened.
//
// It backs `sandprobe verify-image` (the image pipeline's question: does this
// image still work under the sandbox's constraints?) and `run --backend docker`.
package docker

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/sourcegraph/conc"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// Where the probe and its policy appear inside the container.
const (
	ProbePath  = "/run/sandprobe/sandprobe"
	PolicyPath = "/run/sandprobe/policy.yaml"
)

// Labels mark probe containers, so a leftover one (a killed runner) is easy to find.
const (
	LabelProbe = "sandprobe.dev/probe"
	LabelNonce = "sandprobe.dev/nonce"
)

// Client is the part of the Docker Engine API the backend uses.
type Client interface {
	ImageInspect(ctx context.Context, image string, opts ...client.ImageInspectOption) (client.ImageInspectResult, error)
	Info(ctx context.Context, opts client.InfoOptions) (client.SystemInfoResult, error)
	ContainerCreate(ctx context.Context, opts client.ContainerCreateOptions) (client.ContainerCreateResult, error)
	ContainerStatPath(ctx context.Context, id string, opts client.ContainerStatPathOptions) (client.ContainerStatPathResult, error)
	ContainerStart(ctx context.Context, id string, opts client.ContainerStartOptions) (client.ContainerStartResult, error)
	ContainerWait(ctx context.Context, id string, opts client.ContainerWaitOptions) client.ContainerWaitResult
	ContainerInspect(ctx context.Context, id string, opts client.ContainerInspectOptions) (client.ContainerInspectResult, error)
	ContainerLogs(ctx context.Context, id string, opts client.ContainerLogsOptions) (client.ContainerLogsResult, error)
	ContainerRemove(ctx context.Context, id string, opts client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
	ContainerList(ctx context.Context, opts client.ContainerListOptions) (client.ContainerListResult, error)
	NetworkInspect(ctx context.Context, id string, opts client.NetworkInspectOptions) (client.NetworkInspectResult, error)
	Events(ctx context.Context, opts client.EventsListOptions) client.EventsResult
}

// NewClient connects to the engine that host names (a DOCKER_HOST-style URL;
// "" means $DOCKER_HOST or the default socket). The API version is
// negotiated, so an older engine (Debian's 20.10 speaks 1.41) works.
func NewClient(host string) (*client.Client, error) {
	opts := []client.Opt{client.FromEnv}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	c, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	return c, nil
}

// Backend runs the probe in a container of one image.
type Backend struct {
	Client Client
	Image  string
	// Runtime is the engine's runtime name (runc, runsc, kata); "" is the engine's default.
	Runtime string
	// RuntimeClass is what the probe is told it runs under, matched against
	// spec.runtime.classNames; "" means the runtime's name. It lets a policy
	// written for Kubernetes (class "gvisor") be verified on Docker (runtime "runsc").
	RuntimeClass string
	// Binary is the static probe binary on the engine's host, bind-mounted
	// at ProbePath; "" is sandprobe-probe beside this executable, else this
	// executable (runner.ProbeBeside).
	Binary string
	// Env is added to the image's environment (the pod's env: HOME=/tmp …).
	Env []string
	// Network is the container's network; "" is "none". Checks that send
	// traffic need a network the policy's egress rules govern.
	Network string
	// Join names a running container, the live sandbox: the probe runs in
	// its network namespace (--network container:NAME) with its image
	// (unless Image is set), runtime, user, environment, privileges and
	// mounts, so it sees the network where the sandbox stands. Network is
	// then not used.
	Join string
	// ControlNetwork is where the control container dials every deny from:
	// a network no sandbox rule governs. "" is the proxy container's other
	// network (its egress side), found on the sandbox's network.
	ControlNetwork string
	// EntrypointTimeout, when positive, hands the image's own entrypoint and
	// command to the probe (check image.entrypoint) with this grace period.
	EntrypointTimeout time.Duration
	// Command replaces `sandprobe probe …` in the container (tests use it for
	// probes that crash, hang or lie).
	Command []string
	// Adjust, when set, edits the container's configuration just before it
	// is created: tests build the misconfigured containers the checks must
	// catch with it (a mounted socket, the host's PID namespace, privileges).
	Adjust func(*container.Config, *container.HostConfig)
	// Progress, when set, hears what the backend is waiting for.
	Progress func(msg string)
	Logger   *slog.Logger
	// SweepAfter is how long past its deadline an earlier run's probe
	// container is left alone (default DefaultSweepAfter); Now is the clock.
	SweepAfter time.Duration
	Now        func() time.Time
}

// Target names the image, or the joined sandbox container, in reports.
func (b *Backend) Target() string {
	if b.Join != "" {
		return "container/" + b.Join
	}
	return "image/" + b.Image
}

const (
	maxStdout = 4 << 20
	maxStderr = 64 << 10
)

// progress tells the caller what the backend waits for; "" means it is done.
func (b *Backend) progress(format string, args ...any) {
	if b.Progress != nil {
		b.Progress(fmt.Sprintf(format, args...))
	}
}

func (b *Backend) log() *slog.Logger {
	if b.Logger != nil {
		return b.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// attempt is one Run: its contexts and deadline, for naming what went wrong.
type attempt struct {
	target   string
	ctx      context.Context // the caller's: cancelled on ctrl-C
	runCtx   context.Context // ctx bounded by the deadline
	deadline time.Duration
	gvisor   bool // the runtime is gVisor's runsc
	nonce    string
}

func (a *attempt) cannot(reason, format string, args ...any) error {
	return &runner.CouldNotRun{Target: a.target, Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// stopped says why an engine call failed when the caller interrupted it or
// the deadline passed; nil when neither happened.
func (a *attempt) stopped(doing string) error {
	switch {
	case a.ctx.Err() != nil:
		return fmt.Errorf("%s: %w", doing, a.ctx.Err())
	case a.runCtx.Err() != nil:
		return a.cannot(runner.ReasonDeadline, "%s: not done within %s", doing, a.deadline)
	}
	return nil
}

// engineFacts is what the backend learns about the image and the engine first.
type engineFacts struct {
	imageCmd   []string // the image's ENTRYPOINT + CMD
	runtime    string   // the runtime the container will use
	hostKernel string   // the engine host's kernel release
	gvisor     bool     // that runtime is gVisor's runsc (by its name or its binary)
}

// Run inspects the image, runs the probe in a constrained container (and,
// on a network, a control container beside it), collects its result from
// the logs, judges its denies against the control and removes the
// containers.
func (b *Backend) Run(ctx context.Context, spec runner.ProbeSpec) ([]report.ProbeResult, error) {
	deadline := spec.Deadline
	if deadline <= 0 {
		deadline = spec.Policy.Spec.Probe.Deadline.Duration
	}
	runCtx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	defer b.progress("") // done waiting: the caller may clear its progress line
	a := &attempt{target: b.Target(), ctx: ctx, runCtx: runCtx, deadline: deadline, nonce: spec.Nonce}

	// What killed runners left behind goes first; a failure to list shows
	// again, as a real error, when the container is created.
	if n, err := b.Sweep(ctx); err != nil {
		b.log().Warn("could not sweep leftover probe containers", "err", err)
	} else if n > 0 {
		b.log().Info("swept leftover probe containers", "removed", n)
	}
	var sb *joined
	if b.Join != "" {
		var err error
		if sb, err = b.joinSandbox(a); err != nil {
			return nil, err
		}
	}
	l, err := b.prepare(a, spec, sb)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(l.policyDir)
	var place controlPlace
	if !spec.NoNetwork {
		if place, err = b.placeControl(a, spec.Policy, sb); err != nil {
			return nil, err
		}
	}
	var (
		res, ctl report.ProbeResult
		ctlErr   error
		wg       conc.WaitGroup
	)
	if place.network != "" && len(b.Command) == 0 {
		wg.Go(func() { ctl, ctlErr = b.runControl(a, spec, l, place.network) })
	}
	res, err = b.runProbe(a, spec, l)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	if !spec.NoNetwork {
		c := control(place, ctl, ctlErr)
		b.followUp(a, spec, sb, &res, c)
		runner.ApplyControl(&res, c)
	}
	return []report.ProbeResult{res}, nil
}

// followUp has the probe dial, in a second container, the addresses the
// control resolved for the must-fail names the sandbox's resolver stopped
// (runner.DNSOnlyFollowUp): a DNS-only block is no network deny.
func (b *Backend) followUp(a *attempt, spec runner.ProbeSpec, sb *joined, res *report.ProbeResult, c *runner.Control) {
	if len(b.Command) > 0 {
		return
	}
	fu, ok, err := runner.DNSOnlyFollowUp(spec, []report.ProbeResult{*res}, c)
	if err != nil || !ok {
		return // the DNS-only verdicts stay inconclusive
	}
	var again report.ProbeResult
	l, err := b.prepare(a, fu.Spec, sb)
	if err == nil {
		defer os.RemoveAll(l.policyDir)
		again, err = b.runProbe(a, fu.Spec, l)
	}
	runner.MergeFollowUp(res, again, err, fu, c.Vantage)
}

// launch is what the probe and the control container share.
type launch struct {
	image, class, bin, policyDir string
	facts                        engineFacts
	cfg                          *container.Config
	host                         *container.HostConfig
}

// prepare learns the image and the engine and builds the probe's container
// configuration: the policy's, or the joined sandbox's twin.
func (b *Backend) prepare(a *attempt, spec runner.ProbeSpec, sb *joined) (*launch, error) {
	l := &launch{image: b.Image}
	if l.image == "" && sb != nil {
		l.image = sb.c.Config.Image
	}
	runtime := b.Runtime
	if runtime == "" && sb != nil {
		runtime = sb.c.HostConfig.Runtime
	}
	var err error
	if l.facts, err = b.inspect(a, l.image, runtime); err != nil {
		return nil, err
	}
	l.class = b.RuntimeClass
	if l.class == "" {
		l.class = l.facts.runtime
	}
	a.gvisor = l.facts.gvisor || spec.Policy.Spec.Runtime.IsolationFor(l.class) == policy.IsolationGVisor
	if l.bin, err = b.binary(); err != nil {
		return nil, a.cannot(runner.ReasonLaunch, "%v", err)
	}
	if l.policyDir, err = os.MkdirTemp("", "sandprobe-verify-"); err != nil {
		return nil, fmt.Errorf("create policy directory: %w", err)
	}
	policyFile := filepath.Join(l.policyDir, "policy.yaml")
	if err := os.WriteFile(policyFile, spec.PolicyBytes, 0o644); err != nil {
		os.RemoveAll(l.policyDir)
		return nil, fmt.Errorf("write policy %s: %w", policyFile, err)
	}
	argv := b.Command
	if len(argv) == 0 {
		argv = ProbeCommand(spec, l.class, l.facts.imageCmd, b.EntrypointTimeout)
	}
	l.cfg, l.host = ContainerConfig(spec.Policy, l.image, l.facts.runtime, b.Network, b.Env)
	if sb != nil {
		joinConfig(sb, spec.Policy, l.cfg, l.host)
		l.host.Runtime = l.facts.runtime
		if b.Image != "" {
			l.cfg.Image = b.Image
		}
	}
	l.cfg.Entrypoint, l.cfg.Cmd = argv[:1], argv[1:]
	l.cfg.Labels = b.labels(a, "verify-image")
	l.host.Binds = []string{l.bin + ":" + ProbePath + ":ro", policyFile + ":" + PolicyPath + ":ro"}
	if b.Adjust != nil {
		b.Adjust(l.cfg, l.host)
	}
	return l, nil
}

func (b *Backend) labels(a *attempt, role string) map[string]string {
	return map[string]string{LabelProbe: role, LabelNonce: a.nonce, LabelDeadline: a.deadline.String()}
}

// runProbe runs the probe's container to its end and collects its result.
func (b *Backend) runProbe(a *attempt, spec runner.ProbeSpec, l *launch) (report.ProbeResult, error) {
	var res report.ProbeResult
	b.progress("creating the container (runtime %s)", l.facts.runtime)
	created, err := b.Client.ContainerCreate(a.runCtx, client.ContainerCreateOptions{Config: l.cfg, HostConfig: l.host, Name: "sandprobe-verify-" + shortNonce(spec.Nonce)})
	if err != nil {
		if e := a.stopped("create container"); e != nil {
			return res, e
		}
		return res, a.cannot(runner.ReasonLaunch, "create container from %s: %v", l.cfg.Image, err)
	}
	id := created.ID
	// Removal must happen even when ctx is cancelled (ctrl-C) or the
	// deadline passed, so it gets a fresh context of its own.
	defer b.remove(context.WithoutCancel(a.ctx), id)
	b.log().Debug("container created", "container", shortID(id), "image", l.cfg.Image, "runtime", l.facts.runtime, "argv", l.cfg.Cmd, "warnings", created.Warnings)

	// The image's own modes of the writable paths, before any tmpfs covers
	// them: under runc a tmpfs takes the mode of the directory it covers.
	imageModes := b.writableModes(a.runCtx, id, spec.Policy.Spec.Filesystem.Writable)

	if err := b.startAndWait(a, id, l.facts.runtime); err != nil {
		return res, err
	}
	if res, err = b.collect(a, id, spec.Nonce); err != nil {
		return res, err
	}
	runner.CrossCheckKernel(spec.Policy, l.class, l.facts.hostKernel, nil, &res)
	explainWritable(res.Findings, imageModes)
	return res, nil
}

// inspect reads the image's config and the engine's runtimes and kernel.
func (b *Backend) inspect(a *attempt, image, runtime string) (engineFacts, error) {
	var facts engineFacts
	b.progress("inspecting image %s", image)
	img, err := b.Client.ImageInspect(a.runCtx, image)
	if err != nil {
		if e := a.stopped("inspect image " + image); e != nil {
			return facts, e
		}
		if cerrdefs.IsNotFound(err) {
			return facts, a.cannot(runner.ReasonImageMissing, "image %s is not on the Docker engine (verify-image never pulls): %v", image, err)
		}
		return facts, a.cannot(runner.ReasonLaunch, "inspect image %s: %v", image, err)
	}
	if b.EntrypointTimeout > 0 && img.Config != nil {
		facts.imageCmd = append(append(facts.imageCmd, img.Config.Entrypoint...), img.Config.Cmd...)
	}
	info, err := b.Client.Info(a.runCtx, client.InfoOptions{})
	if err != nil {
		if e := a.stopped("docker info"); e != nil {
			return facts, e
		}
		return facts, a.cannot(runner.ReasonLaunch, "docker info: %v", err)
	}
	facts.hostKernel = info.Info.KernelVersion
	facts.runtime = runtime
	if facts.runtime == "" {
		facts.runtime = info.Info.DefaultRuntime
	}
	rt, ok := info.Info.Runtimes[facts.runtime]
	if !ok && len(info.Info.Runtimes) > 0 {
		have := slices.Sorted(maps.Keys(info.Info.Runtimes))
		return facts, a.cannot(runner.ReasonLaunch, "runtime %q is not registered with the Docker engine (it has: %s)", facts.runtime, strings.Join(have, ", "))
	}
	facts.gvisor = strings.Contains(facts.runtime, "runsc") || filepath.Base(rt.Path) == "runsc"
	return facts, nil
}

// startAndWait starts the container and waits for it to exit.
func (b *Backend) startAndWait(a *attempt, id, rt string) error {
	// Subscribe before starting, so a probe that exits at once is not missed.
	wait := b.Client.ContainerWait(a.runCtx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	start := time.Now()
	if _, err := b.Client.ContainerStart(a.runCtx, id, client.ContainerStartOptions{}); err != nil {
		if e := a.stopped("start container"); e != nil {
			return e
		}
		return a.cannot(runner.ReasonLaunch, "start container %s under runtime %s: %v", shortID(id), rt, err)
	}
	err := b.waitExit(a.runCtx, id, rt, wait, start)
	switch {
	case err == nil:
		b.log().Debug("probe container exited", "container", shortID(id), "took", time.Since(start))
		return nil
	case a.ctx.Err() == nil && a.runCtx.Err() != nil:
		return a.cannot(runner.ReasonDeadline, "the probe did not finish within %s and was killed%s", a.deadline, b.stderrTail(a.ctx, id))
	}
	if e := a.stopped("wait for container " + shortID(id)); e != nil {
		return e
	}
	return a.cannot(runner.ReasonCrashed, "wait for container %s: %v", shortID(id), err)
}

// collect reads the exited container's state and logs and turns them into a
// trusted result or the reason there is none.
func (b *Backend) collect(a *attempt, id, nonce string) (report.ProbeResult, error) {
	b.progress("collecting the result")
	// The deadline may have passed just as the probe exited; collecting what
	// it wrote gets a short grace of its own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), 30*time.Second)
	defer cancel()
	var res report.ProbeResult
	state, err := b.Client.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return res, fmt.Errorf("inspect container %s: %w", shortID(id), err)
	}
	stdout, stderr, err := b.logs(ctx, id)
	if err != nil {
		return res, a.cannot(runner.ReasonLogsUnavailable, "read the logs of container %s: %v", shortID(id), err)
	}
	st := state.Container.State
	// Docker learns of an OOM kill from the runtime's OOM event, which can
	// land after the exit, and Docker 20.10 then never sets OOMKilled (a CI
	// run saw it: exit 137, "Killed", no flag) though it still logs the
	// container's "oom" event. A probe SIGKILLed under a memory limit is
	// asked about again, flag and event, for up to five seconds before it
	// is called a crash (on a machine at load 15, two were once too few).
	for i := 0; i < 50 && !st.OOMKilled && st.ExitCode == 137 && memoryLimited(state.Container.HostConfig); i++ {
		if b.oomEvent(ctx, id, st.StartedAt) {
			st.OOMKilled = true
			break
		}
		time.Sleep(100 * time.Millisecond)
		again, err := b.Client.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			break
		}
		st = again.Container.State
	}
	b.log().Debug("probe container state", "container", shortID(id), "exit", st.ExitCode, "oom", st.OOMKilled, "error", st.Error, "stderr", stderr.String(), "stdout_bytes", stdout.Len())
	switch {
	case st.OOMKilled:
		return res, a.cannot(runner.ReasonOOM, "the probe container was killed for exceeding its memory limit%s", runner.StderrTail(stderr.String()))
	case st.Error != "":
		return res, a.cannot(runner.ReasonLaunch, "the runtime could not run the probe: %s", st.Error)
	}
	if err := runner.ExitProblem(a.target, st.ExitCode, stderr.String()); err != nil {
		if a.gvisor && st.ExitCode == report.ExitBadInput && strings.TrimSpace(stderr.String()) == "" {
			return res, gvisorDied(a.target, state.Container.HostConfig, stdout.Len())
		}
		return res, err
	}
	if stdout.Overflow {
		return res, a.cannot(runner.ReasonGarbled, "the probe printed more than %d bytes", maxStdout)
	}
	res, err = runner.ParseResult(a.target, stdout.Bytes(), nonce)
	if err != nil {
		return res, err
	}
	if err := runner.CheckExit(a.target, st.ExitCode, res); err != nil {
		return res, err
	}
	res.Target = a.target
	return res, nil
}

// binary finds the static sandprobe to mount and refuses a dynamic one: a
// scratch or distroless image has no loader, and the failure would look like
// a missing file.
func (b *Backend) binary() (string, error) {
	bin := b.Binary
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("find own executable: %w", err)
		}
		bin = runner.ProbeBeside(exe)
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return "", err
	}
	f, err := elf.Open(bin)
	if err != nil {
		return "", fmt.Errorf("probe binary %s: %w", bin, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("probe binary %s is dynamically linked: build it with CGO_ENABLED=0 (make build) so it runs in any image", bin)
		}
	}
	return bin, nil
}

// waitExit waits for the container to exit, showing progress.
func (b *Backend) waitExit(ctx context.Context, id, rt string, wait client.ContainerWaitResult, start time.Time) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case r := <-wait.Result:
			if r.Error != nil && r.Error.Message != "" {
				return errors.New(r.Error.Message)
			}
			return nil
		case err := <-wait.Error:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		case <-tick.C:
			b.progress("probe running in container %s (runtime %s): %s", shortID(id), rt, time.Since(start).Round(time.Second))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *Backend) logs(ctx context.Context, id string) (*runner.LimitedBuffer, *runner.LimitedBuffer, error) {
	rc, err := b.Client.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return nil, nil, err
	}
	defer rc.Close()
	stdout, stderr := &runner.LimitedBuffer{Max: maxStdout}, &runner.LimitedBuffer{Max: maxStderr}
	if _, err := stdcopy.StdCopy(stdout, stderr, rc); err != nil {
		return nil, nil, fmt.Errorf("demultiplex: %w", err)
	}
	return stdout, stderr, nil
}

// stderrTail reads what the probe said on stderr so far, for a deadline's detail.
func (b *Backend) stderrTail(ctx context.Context, id string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, stderr, err := b.logs(ctx, id)
	if err != nil {
		return ""
	}
	return runner.StderrTail(stderr.String())
}

func (b *Backend) remove(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b.progress("removing container %s", shortID(id))
	if _, err := b.Client.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		b.log().Warn("could not remove the probe container", "container", id, "err", err)
	}
}

// writableModes stats the writable paths in the created container: with the
// container not running, that is the image's own directory.
func (b *Backend) writableModes(ctx context.Context, id string, paths []string) map[string]os.FileMode {
	out := map[string]os.FileMode{}
	for _, p := range paths {
		st, err := b.Client.ContainerStatPath(ctx, id, client.ContainerStatPathOptions{Path: p})
		if err == nil {
			out[p] = st.Stat.Mode
		}
	}
	return out
}

// explainWritable names the cause of an unwritable tmpfs when the image's
// directory under it is not world-writable: runc gives a tmpfs the mode of
// the directory it covers, whatever its mode= option says.
func explainWritable(fs []report.Finding, imageModes map[string]os.FileMode) {
	for i := range fs {
		f := &fs[i]
		mode, ok := imageModes[f.Subject]
		if f.Check != "fs.writable" || f.Status != report.Fail || !ok || mode.Perm()&0o002 != 0 {
			continue
		}
		perm := mode.Perm()
		if mode&os.ModeSticky != 0 {
			perm |= 0o1000
		}
		f.Evidence += fmt.Sprintf("; the image's %s is mode %04o", f.Subject, uint32(perm))
		f.Fix = fmt.Sprintf("the image's %s is mode %04o: Docker's runc gives a tmpfs mounted there the mode of the image directory it covers (mode=1777 is overridden), so the sandbox uid cannot write it; make it world-writable and sticky in the image (Dockerfile: RUN chmod 1777 %s)", f.Subject, uint32(perm), f.Subject)
	}
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func shortNonce(n string) string {
	n = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return -1
	}, strings.ToLower(n))
	if len(n) > 24 {
		n = n[:24]
	}
	if n == "" {
		n = strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	return n
}

var _ runner.Backend = (*Backend)(nil)

func memoryLimited(hc *container.HostConfig) bool { return hc != nil && hc.Memory > 0 }

// oomEvent reports whether the engine logged an "oom" event for container
// id since it started (startedAt, RFC 3339; the last day when unreadable):
// the events up to now are read and the stream ends.
func (b *Backend) oomEvent(ctx context.Context, id, startedAt string) bool {
	since, err := time.Parse(time.RFC3339Nano, startedAt)
	if err != nil || since.IsZero() {
		since = time.Now().Add(-24 * time.Hour)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	stamp := func(t time.Time) string { return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond()) }
	res := b.Client.Events(ctx, client.EventsListOptions{
		Since:   stamp(since.Add(-time.Second)),
		Until:   stamp(time.Now()),
		Filters: client.Filters{}.Add("type", "container").Add("container", id).Add("event", "oom"),
	})
	for {
		select {
		case m := <-res.Messages:
			if m.Action == "oom" {
				return true
			}
		case <-res.Err:
			return false
		}
	}
}

// gvisorDied names what ended a gVisor container with a silent exit 2: runsc
// runs its sentry with stdio on /dev/null and exits 2 when the sentry
// panics, so the container's stderr is empty. Under a pids limit the panic
// is almost always gVisor's own host threads reaching it (gVisor issues
// 2490, 3942): the container's pids cgroup counts the sentry's and the
// gofer's threads and, on the ptrace platform, a traced stub thread for
// each sentry thread in each of the sandbox's processes — measured here,
// Debian + Chromium peaks at ~115 tasks under runc and 400-512 under runsc.
// The kernel refuses the clone, and the sentry dies instead of failing
// the sandbox's fork.
func gvisorDied(target string, hc *container.HostConfig, stdoutBytes int) error {
	printed := "it had printed nothing on stdout yet"
	if stdoutBytes > 0 {
		printed = fmt.Sprintf("it had printed %d bytes on stdout", stdoutBytes)
	}
	detail := "gVisor's sandbox ended the container with exit 2 and nothing on stderr, which is how runsc's sentry exits when it panics (the panic goes to runsc's own log, not the container's output); " + printed
	fix := runner.SilentExit2Fix
	if hc != nil && hc.PidsLimit != nil && *hc.PidsLimit > 0 {
		limit := *hc.PidsLimit
		detail += fmt.Sprintf("; the container's pids limit is %d, and gVisor counts its own host threads against it (the sentry's, the gofer's and, on the ptrace platform, a stub thread per sentry thread for every process in the sandbox): when they reach the limit the sentry panics (\"error initializing first thread: resource temporarily unavailable\") instead of the sandbox's fork failing", limit)
		fix = fmt.Sprintf("raise spec.resources.pids (%d) so that it covers gVisor's own threads as well as the sandbox's processes (on the ptrace platform several times what the same workload needs under runc), or run runsc on the systrap or KVM platform; runsc --panic-log=FILE in the runtime's arguments records the panic", limit)
	}
	return &runner.CouldNotRun{Target: target, Reason: runner.ReasonCrashed, Detail: detail, Fix: fix}
}
