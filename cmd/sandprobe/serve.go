package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/exporter-toolkit/web"
	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/page"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// DefaultListen is serve's address: port 10191, sandprobe's own in the
// Prometheus default port allocations (9090 is Prometheus's; 9100-9999
// are all taken, allocations continue at 10000).
const DefaultListen = ":10191"

func (a *app) cmdServe(fs *pflag.FlagSet) runFunc {
	var (
		cf               cycleFlags
		out              outputs
		lf               logFlags
		schedule, listen string
		webConfig        string
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
		fs.StringVar(&listen, "listen", DefaultListen, "address for the egress page (/), /metrics, /healthz, /report.json and POST /-/reload (10191: sandprobe's own port, see docs/metrics.md)")
		fs.StringVar(&webConfig, "web.config.file", "", "TLS and basic authentication for every endpoint: a Prometheus exporter-toolkit web configuration file (tls_server_config, basic_auth_users; docs/metrics.md)")
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
		// A web configuration that cannot serve is bad input, found before
		// the first run rather than when the listener starts.
		if err := web.Validate(webConfig); err != nil {
			return fail(report.ExitBadInput, "--web.config.file: %v", err)
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
		var cur atomic.Pointer[cycle]
		cur.Store(cyc)
		srv, err := newServer(func(ctx context.Context) report.Run { return cur.Load().run(ctx) }, &out, grace, logger)
		if err != nil {
			return fail(report.ExitCouldNotRun, "%v", err)
		}
		srv.webConfig = webConfig
		srv.reloadPolicy = func() (*policy.Policy, error) {
			// The whole cycle is built again from the file, exactly as at
			// start (a backend built from the policy, the kube clients);
			// the run in flight, if any, ends with the old one.
			var problems bytes.Buffer
			next, ok := cf.build(&app{stdin: a.stdin, stdout: io.Discard, stderr: &problems}, "serve", logger)
			if !ok {
				return nil, errors.New(oneLineErr(errors.New(problems.String())))
			}
			if wf.on && !slices.Equal(next.policy.Spec.Namespaces, cur.Load().policy.Spec.Namespaces) {
				logger.Warn("spec.namespaces changed: --watch keeps watching the namespaces it started with until serve restarts; scheduled cycles probe the new ones")
			}
			cur.Store(next)
			return next.policy, nil
		}
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go func() {
			for {
				select {
				case <-hup:
					srv.reload("SIGHUP")
				case <-ctx.Done():
					return
				}
			}
		}()
		watching, err := wf.start(ctx, func() *cycle { return cur.Load() }, srv, logger)
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
