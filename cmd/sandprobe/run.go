package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/internal/catalogue"
	"github.com/sandprobe/sandprobe/internal/version"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/local"
)

func (a *app) cmdRun(fs *pflag.FlagSet) runFunc {
	var (
		cf  cycleFlags
		out outputs
		lf  logFlags
	)
	cf.register(fs)
	out.register(fs)
	lf.register(fs)
	return func(ctx context.Context, _ []string) int {
		if err := out.check(); err != nil {
			fmt.Fprintf(a.stderr, "sandprobe run: %v\n", err)
			return report.ExitBadInput
		}
		logger, err := lf.logger(a.stderr)
		if err != nil {
			fmt.Fprintf(a.stderr, "sandprobe run: %v\n", err)
			return report.ExitBadInput
		}
		cyc, ok := cf.build(a, "run", logger)
		if !ok {
			return report.ExitBadInput
		}
		defer cyc.close()
		if lf.format == "json" {
			// The CronJob's stderr is a stream of JSON log records, its
			// stdout the report: what the run says goes to the log too.
			cyc.say = func(msg string) { logger.Error(msg) }
			out.warn = func(msg string) { logger.Warn(msg) }
		}
		out.policy = cyc.policy
		run := cyc.run(ctx)
		if err := out.write(ctx, a, run, lf.verbose); err != nil {
			fmt.Fprintf(a.stderr, "sandprobe run: %v\n", err)
			return report.ExitCouldNotRun
		}
		return run.ExitCode()
	}
}

// cycleFlags say what one cycle checks and where. run and serve share them,
// so a scheduled cycle is built exactly like a one-shot one.
type cycleFlags struct {
	policyPath, backend, netns, controlNetns, sabotage string
	volumes                                            stringList
	deadline                                           time.Duration
	noNetwork                                          bool
	docker                                             dockerFlags
	kube                                               kubeFlags
	proxyLog                                           proxyLogFlags
	usage                                              usageFlags
}

func (cf *cycleFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&cf.policyPath, "policy", "", "the SandboxPolicy file")
	fs.StringVar(&cf.backend, "backend", "local", "where to run the probe: local, docker or kube")
	fs.DurationVar(&cf.deadline, "deadline", 0, "bound on one probe from launch to result (default: spec.probe.deadline, 2m)")
	fs.BoolVar(&cf.noNetwork, "no-network", false, "leave out the checks that send traffic")
	cf.proxyLog.register(fs)
	cf.usage.register(fs)
	group(fs, groupLocal, func() {
		fs.StringVar(&cf.netns, "netns", "", "local backend: attach the sandbox to this named network namespace (default: a new, empty one)")
		fs.StringVar(&cf.controlNetns, "control-netns", "", "local backend: the control vantage, a named network namespace no sandbox rule governs (the lab: sp-control); every must-fail destination is dialled from there too, and a deny counts only where it answered (default: none, so no deny is proven)")
		fs.StringVar(&cf.sabotage, "sabotage", "", "local backend: break the sandbox on purpose to see the checks fail ("+strings.Join(local.SabotageNames(), ", ")+")")
		fs.Var(&cf.volumes, "volume", "local backend: bind a host directory or file into the sandbox, SRC:DST[:ro|rw] (default rw), as docker -v: the workspace the phases share, a package cache (:ro), a baseline (:ro); repeatable")
	})
	group(fs, groupDocker, func() { cf.docker.register(fs); cf.docker.registerJoin(fs) })
	group(fs, groupKube, func() { cf.kube.register(fs) })
}

// build loads the policy and constructs the backend, printing any problem;
// false means bad input (exit 2).
func (cf *cycleFlags) build(a *app, cmd string, logger *slog.Logger) (*cycle, bool) {
	p, raw, ok := a.loadPolicy(cf.policyPath)
	if !ok {
		return nil, false
	}
	if err := cf.usage.check(); err != nil {
		fmt.Fprintf(a.stderr, "sandprobe %s: %v\n", cmd, err)
		return nil, false
	}
	if err := cf.proxyLog.check(p, cf.backend); err != nil {
		fmt.Fprintf(a.stderr, "sandprobe %s: %v\n", cmd, err)
		return nil, false
	}
	var be runner.Backend
	closeBackend := func() {}
	switch cf.backend {
	case "local":
		sb := local.SandboxFor(p, cf.netns)
		for _, v := range cf.volumes {
			vol, err := parseVolume(v)
			if err != nil {
				fmt.Fprintf(a.stderr, "sandprobe %s: --volume: %v\n", cmd, err)
				return nil, false
			}
			sb.Volumes = append(sb.Volumes, vol)
		}
		if err := sb.Sabotage(cf.sabotage); err != nil {
			fmt.Fprintf(a.stderr, "sandprobe %s: --sabotage: %v\n", cmd, err)
			return nil, false
		}
		be = &local.Backend{Sandbox: sb, ControlNetNS: cf.controlNetns, Logger: logger}
	case "docker":
		dbe, closeFn, err := cf.docker.backend(a, p, p.Spec.Docker.Network, logger)
		if err != nil {
			fmt.Fprintf(a.stderr, "sandprobe %s: %v\n", cmd, err)
			return nil, false
		}
		be, closeBackend = dbe, closeFn
	case "kube":
		kbe, closeFn, err := cf.kube.backend(a, cf, p, logger)
		if err != nil {
			fmt.Fprintf(a.stderr, "sandprobe %s: %s\n", cmd, oneLineErr(err))
			return nil, false
		}
		be, closeBackend = kbe, closeFn
	default:
		fmt.Fprintf(a.stderr, "sandprobe %s: --backend: want local, docker or kube, got %q\n", cmd, cf.backend)
		return nil, false
	}
	trail, err := cf.proxyLog.trail(cf.kube.clients)
	if err != nil {
		closeBackend()
		fmt.Fprintf(a.stderr, "sandprobe %s: %v\n", cmd, err)
		return nil, false
	}
	cyc := &cycle{policy: p, raw: raw, backendName: cf.backend, backend: be, close: closeBackend, deadline: cf.deadline, noNetwork: cf.noNetwork, kube: cf.kube.clients, trail: trail, usage: &cf.usage}
	cyc.say = func(msg string) { fmt.Fprintf(a.stderr, "sandprobe %s: %s\n", cmd, msg) }
	if cmd == "serve" {
		cyc.say = func(msg string) { logger.Error(msg) }
	}
	return cyc, true
}

// cycle is one configured probe cycle; run performs it, any number of times.
type cycle struct {
	policy      *policy.Policy
	raw         []byte
	backendName string
	backend     runner.Backend
	close       func() // releases the backend's clients
	deadline    time.Duration
	noNetwork   bool
	// say prints the one-line error of a backend's preflight (a cluster
	// that does not answer): on stderr under run, as a log under serve.
	say func(msg string)
	// kube are the kube backend's clients (serve --watch builds on them).
	kube *kubeClients
	// trail reads the proxy's record after each probe (--proxy-log).
	trail *runner.Trail
	// usage reads the long record after each run (--egress-log).
	usage *usageFlags
}

// run performs one full cycle.
func (c *cycle) run(ctx context.Context) report.Run { return c.runSpec(ctx, c.spec(nil)) }

// spec is a cycle's spec over scope (nil: everything) with a fresh nonce,
// so no result of an earlier cycle can pass for this one.
func (c *cycle) spec(scope *runner.Scope) runner.ProbeSpec {
	return runner.ProbeSpec{Policy: c.policy, PolicyBytes: c.raw, Nonce: runner.NewNonce(), Deadline: c.deadline, NoNetwork: c.noNetwork, Scope: scope}
}

// runSpec performs one cycle of spec.
func (c *cycle) runSpec(ctx context.Context, spec runner.ProbeSpec) report.Run {
	cyc := probeCycle(c.backend, c.backendName)
	cyc.Trail = c.trail
	run, err := cyc.Run(ctx, spec)
	if err != nil {
		c.say(err.Error())
	}
	if c.usage != nil {
		c.usage.attach(ctx, c.policy, &run)
	}
	return run
}

// probeCycle is a backend's cycle, the same for every backend.
func probeCycle(be runner.Backend, name string) runner.Cycle {
	b := version.Get()
	return runner.Cycle{Backend: be, Name: name, Version: b.Version, Commit: b.Commit, BuildDate: b.Date, FixFor: probes.FixFor, SeverityFor: catalogue.Severity}
}

// parseVolume reads --volume SRC:DST[:ro|rw].
func parseVolume(v string) (local.Volume, error) {
	parts := strings.Split(v, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
		return local.Volume{}, fmt.Errorf("want SRC:DST[:ro|rw], got %q", v)
	}
	vol := local.Volume{Source: parts[0], Target: parts[1], Writable: true}
	if len(parts) == 3 {
		switch parts[2] {
		case "ro":
			vol.Writable = false
		case "rw":
		default:
			return local.Volume{}, fmt.Errorf("want SRC:DST[:ro|rw], got mode %q in %q", parts[2], v)
		}
	}
	if !strings.HasPrefix(vol.Target, "/") || path.Clean(vol.Target) != vol.Target || vol.Target == "/" {
		return local.Volume{}, fmt.Errorf("DST must be a clean absolute path other than /, got %q", vol.Target)
	}
	if _, err := os.Stat(vol.Source); err != nil {
		return local.Volume{}, fmt.Errorf("SRC %s: %w", vol.Source, unwrapPath(err))
	}
	abs, err := filepath.Abs(vol.Source)
	if err != nil {
		return local.Volume{}, err
	}
	vol.Source = abs
	return vol, nil
}
