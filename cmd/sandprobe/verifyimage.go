package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

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

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
