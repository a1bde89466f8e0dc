package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/page"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

func (a *app) cmdServe(fs *pflag.FlagSet) runFunc {
	var (
		cf               cycleFlags
		out              outputs
		lf               logFlags
		schedule, listen string
		runAtStart       bool
		grace            time.Duration
		history          int
		wf               watchFlags
	)
	cf.register(fs)
	out.registerFiles(fs)
	lf.register(fs)
	group(fs, groupServe, func() {
		fs.StringVar(&schedule, "schedule", runner.DefaultSchedule, `when to run: cron (5 fields, or 6 with seconds first) or a descriptor ("@hourly", "@every 10m")`)
		fs.StringVar(&listen, "listen", ":9090", "address for the egress page (/), /metrics, /healthz and /report.json")
		fs.IntVar(&history, "history", page.DefaultHistory, "how many runs the egress page keeps, so a reopened host shows as a change over time")
		fs.BoolVar(&runAtStart, "run-at-start", true, "run once at start instead of waiting for the first scheduled time")
		wf.register(fs)
		fs.DurationVar(&grace, "grace", 20*time.Second, "on SIGTERM, how long a run in flight may finish before it is cancelled (keep it below the pod's terminationGracePeriodSeconds)")
	})
	return func(ctx context.Context, _ []string) int {
		fail := func(code int, format string, args ...any) int {
			fmt.Fprintf(a.stderr, "sandprobe serve: "+format+"\n", args...)
			return code
		}
		if err := out.checkFiles(); err != nil {
			return fail(report.ExitBadInput, "%v", err)
		}
		sched, err := runner.ParseSchedule(schedule)
		if err != nil {
			return fail(report.ExitBadInput, "--schedule: %v", err)
		}
		if grace <= 0 {
			return fail(report.ExitBadInput, "--grace: want a positive duration, got %s", grace)
		}
		if history < 1 || history > 10000 {
			return fail(report.ExitBadInput, "--history: want 1 to 10000 runs, got %d", history)
		}
		if err := wf.check(cf.backend); err != nil {
			return fail(report.ExitBadInput, "%v", err)
		}
		logger, err := daemonLogger(&lf, a.stderr)
		if err != nil {
			return fail(report.ExitBadInput, "%v", err)
		}
		cyc, ok := cf.build(a, "serve", logger)
		if !ok {
			return report.ExitBadInput
		}
		out.policy, out.history = cyc.policy, page.NewHistory(history)
		out.warn = func(msg string) { logger.Warn(msg) }
		srv, err := newServer(cyc.run, &out, grace, logger)
		if err != nil {
			return fail(report.ExitCouldNotRun, "%v", err)
		}
		watching, err := wf.start(ctx, cyc, srv, logger)
		if err != nil {
			return fail(report.ExitCouldNotRun, "%v", err)
		}
		if watching != nil {
			defer watching.Stop()
		}
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return fail(report.ExitCouldNotRun, "listen on %s: %v", listen, err)
		}
		logger.Info("listening", "addr", ln.Addr().String(), "policy", cyc.policy.Metadata.Name, "backend", cyc.backendName, "schedule", schedule)
		if err := srv.serve(ctx, ln, sched, runAtStart); err != nil {
			return fail(report.ExitCouldNotRun, "%v", err)
		}
		return report.ExitOK
	}
}

// daemonLogger is the --log-format logger at info level: a daemon's
// lifecycle (listening, each run and its result) belongs in its log, where
// one-shot commands stay quiet below warnings.
func daemonLogger(lf *logFlags, w io.Writer) (*slog.Logger, error) {
	if lf.verbose {
		return lf.logger(w)
	}
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	switch lf.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: want text or json, got %q", lf.format)
}
