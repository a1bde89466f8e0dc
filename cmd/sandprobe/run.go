package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/local"
)

func (a *app) cmdRun(ctx context.Context, args []string) int {
	fs := a.flagSet("run", "--policy FILE [--backend local] [flags]")
	var (
		policyPath, backend, netns, sabotage string
		deadline                             time.Duration
		noNetwork                            bool
		out                                  outputs
		lf                                   logFlags
		df                                   dockerFlags
	)
	fs.StringVar(&policyPath, "policy", "", "the SandboxPolicy file")
	fs.StringVar(&backend, "backend", "local", "where to run the probe: local or docker")
	fs.StringVar(&netns, "netns", "", "local backend: attach the sandbox to this named network namespace (default: a new, empty one)")
	fs.StringVar(&sabotage, "sabotage", "", "local backend: break the sandbox on purpose to see the checks fail ("+strings.Join(local.SabotageNames(), ", ")+")")
	fs.DurationVar(&deadline, "deadline", 0, "bound on one probe from launch to result (default: spec.probe.deadline, 2m)")
	fs.BoolVar(&noNetwork, "no-network", false, "leave out the checks that send traffic")
	df.register(fs)
	out.register(fs)
	lf.register(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if err := out.check(); err != nil {
		fmt.Fprintf(a.stderr, "sandprobe run: %v\n", err)
		return report.ExitBadInput
	}
	logger, err := lf.logger(a.stderr)
	if err != nil {
		fmt.Fprintf(a.stderr, "sandprobe run: %v\n", err)
		return report.ExitBadInput
	}
	p, raw, ok := a.loadPolicy(policyPath)
	if !ok {
		return report.ExitBadInput
	}
	var be runner.Backend
	switch backend {
	case "local":
		sb := local.SandboxFor(p, netns)
		if err := sb.Sabotage(sabotage); err != nil {
			fmt.Fprintf(a.stderr, "sandprobe run: --sabotage: %v\n", err)
			return report.ExitBadInput
		}
		be = &local.Backend{Sandbox: sb, Logger: logger}
	case "docker":
		dbe, closeBackend, err := df.backend(a, p, p.Spec.Docker.Network, logger)
		if err != nil {
			fmt.Fprintf(a.stderr, "sandprobe run: %v\n", err)
			return report.ExitBadInput
		}
		defer closeBackend()
		be = dbe
	default:
		fmt.Fprintf(a.stderr, "sandprobe run: --backend: want local or docker, got %q\n", backend)
		return report.ExitBadInput
	}
	spec := runner.ProbeSpec{Policy: p, PolicyBytes: raw, Nonce: runner.NewNonce(), Deadline: deadline, NoNetwork: noNetwork}
	run := probeCycle(ctx, be, backend, p, spec)
	if err := out.write(a, run, lf.verbose); err != nil {
		fmt.Fprintf(a.stderr, "sandprobe run: %v\n", err)
		return report.ExitCouldNotRun
	}
	return run.ExitCode()
}

// probeCycle runs one probe through a backend and assembles the run. A
// backend error becomes error findings, so the run can never look clean.
func probeCycle(ctx context.Context, be runner.Backend, backend string, p *policy.Policy, spec runner.ProbeSpec) report.Run {
	start := time.Now()
	run := report.Run{Policy: p.Metadata.Name, Version: probes.Version(), Backend: backend, StartedAt: start.UTC()}
	results, err := be.Run(ctx, spec)
	for _, res := range results {
		run.Findings = append(run.Findings, runner.Findings(res.Target, res, probes.FixFor)...)
		run.Probes = append(run.Probes, res)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			err = &runner.CouldNotRun{Target: backend, Reason: runner.ReasonDeadline, Detail: "interrupted before the probe reported"}
		}
		for _, cnr := range runner.Problems(backend, err) {
			run.Findings = append(run.Findings, cnr.Finding())
		}
	}
	run.Seconds = time.Since(start).Seconds()
	run.Phases = map[string]float64{"probe": run.Seconds}
	return run
}
