package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/kube"
	"github.com/sandprobe/sandprobe/runner/kube/trigger"
)

// watchFlags are serve --watch's: cycles for exactly the affected
// namespaces or nodes when an egress policy or a CNI agent changes.
type watchFlags struct {
	fs                                *pflag.FlagSet
	on                                bool
	debounce, minInterval, agentGrace time.Duration
	cni                               []string
	agents                            []trigger.Agent
}

func (wf *watchFlags) register(fs *pflag.FlagSet) {
	wf.fs = fs
	fs.BoolVar(&wf.on, "watch", false, "kube: also start a cycle at once, for exactly the namespaces or nodes a change can affect, when an egress policy object changes or a CNI agent restarts (docs/fleet.md)")
	fs.DurationVar(&wf.debounce, "watch-debounce", runner.DefaultDebounce, "--watch: quiet time after the last change before its cycle starts (a storm of changes is one cycle)")
	fs.DurationVar(&wf.minInterval, "watch-min-interval", runner.DefaultMinInterval, "--watch: least time between the starts of two triggered cycles; changes in between join the next")
	fs.StringArrayVar(&wf.cni, "watch-cni", nil, "--watch: NAMESPACE/DAEMONSET of a CNI or network-policy agent whose pods restarting on a node start a cycle for that node (repeatable; default: the well-known agents found, e.g. kube-system/cilium, calico-system/calico-node, kube-system/kube-router)")
	fs.DurationVar(&wf.agentGrace, "watch-cni-grace", trigger.DefaultAgentGrace, "--watch: how long a node's agent may stay not Ready before its node is probed anyway; a node whose agent became Ready is probed at once and again after this long")
}

// check is the flags' bad input, one line naming the flag (exit 2).
func (wf *watchFlags) check(backend string) error {
	if !wf.on {
		for _, name := range []string{"watch-debounce", "watch-min-interval", "watch-cni", "watch-cni-grace"} {
			if wf.fs.Changed(name) {
				return fmt.Errorf("--%s: only means something with --watch", name)
			}
		}
		return nil
	}
	if backend != "kube" {
		return fmt.Errorf("--watch: watches a cluster's policies and CNI agents, so it needs --backend kube, got %q", backend)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"watch-debounce", wf.debounce}, {"watch-min-interval", wf.minInterval}, {"watch-cni-grace", wf.agentGrace}} {
		if d.v <= 0 {
			return fmt.Errorf("--%s: want a positive duration, got %s", d.name, d.v)
		}
	}
	for _, s := range wf.cni {
		a, err := trigger.ParseAgent(s)
		if err != nil {
			return fmt.Errorf("--watch-cni: %w", err)
		}
		wf.agents = append(wf.agents, a)
	}
	return nil
}

// start wires the watch to the server's schedule and starts the informers;
// nothing when --watch is off.
func (wf *watchFlags) start(ctx context.Context, current func() *cycle, srv *server, logger *slog.Logger) (*trigger.Running, error) {
	if !wf.on {
		return nil, nil
	}
	cyc := current()
	kb, ok := cyc.backend.(*kube.Backend)
	if !ok || cyc.kube == nil {
		return nil, fmt.Errorf("--watch: needs the kube backend")
	}
	m, err := report.NewWatchMetrics(srv.registry)
	if err != nil {
		return nil, err
	}
	w := &runner.Watch{Cycle: srv.targeted(current, m), Debounce: wf.debounce, MinInterval: wf.minInterval, Coalesced: m.Coalesced}
	srv.sched.Watch = w
	// client-go's informers log through klog (a watch that failed, a
	// re-list): into serve's log, in its format.
	klog.SetSlogLogger(logger.With("component", "client-go"))
	cfg := rest.CopyConfig(cyc.kube.config)
	cfg.UserAgent = "sandprobe-watch"
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--watch: metadata client: %w", err)
	}
	var agents []trigger.Agent
	if wf.fs.Changed("watch-cni") {
		agents = wf.agents
	}
	tw := &trigger.Watcher{
		Metadata: md, Pods: kb.API, DaemonSets: cyc.kube.drift, Agents: agents, AgentGrace: wf.agentGrace,
		Namespaces: kb.Namespaces(runner.ProbeSpec{Policy: cyc.policy}),
		Request:    func(s runner.Scope, why string) { w.Request(s, why, time.Now()) },
		Event:      m.Event, Logger: logger,
	}
	return tw.Start(ctx)
}

// targeted is serve --watch's cycle over scope, whose run shows the whole
// fleet: merged with the last published run, so what it did not probe
// keeps its last values (an alert must not resolve because a narrow cycle
// did not look). The probe's verdict is shown on /metrics and
// /report.json as soon as it is in; the drift phase, when the scope wants
// one (Scope.Drift: a policy changed), runs after it, and the run it ends
// is published as usual. Before any run was published there is nothing
// to keep, and the cycle is a full one. m counts it by the scope it ran.
func (s *server) targeted(current func() *cycle, m *report.WatchMetrics) func(context.Context, runner.Scope) report.Run {
	return func(ctx context.Context, scope runner.Scope) report.Run {
		c := current() // the policy as last (re)loaded
		s.mu.RLock()
		last := s.lastRun
		s.mu.RUnlock()
		if last == nil {
			m.Cycle(runner.FullScope().Kinds())
			return c.run(ctx)
		}
		m.Cycle(scope.Kinds())
		probed := c.spec(&scope)
		probed.SkipAfterProbe = true
		merged := runner.Merge(*last, c.runSpec(ctx, probed), scope)
		if !scope.Drift() || ctx.Err() != nil {
			return merged
		}
		s.metrics.Show(merged, time.Now())
		s.endpoints(merged)
		drift := report.Run{}
		if !probeCycle(c.backend, c.backendName).AfterProbe(ctx, c.spec(nil), &drift) {
			return merged
		}
		return runner.WithDrift(merged, drift)
	}
}
