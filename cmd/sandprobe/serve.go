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
	"github.com/robfig/cron/v3"
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
		cf  cycleFlags
		out outputs
		lf  logFlags
		sf  serveFlags
	)
	cf.register(fs)
	out.registerFiles(fs)
	lf.register(fs)
	sf.register(fs)
	return func(ctx context.Context, _ []string) int {
		fail := func(code int, format string, args ...any) int {
			fmt.Fprintf(a.stderr, "sandprobe serve: "+format+"\n", args...)
			return code
		}
		if err := out.checkFiles(); err != nil {
			return fail(report.ExitBadInput, "%v", err)
		}
		sched, err := sf.check(cf.backend)
		if err != nil {
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
		out.policy, out.history = cyc.policy, page.NewHistory(sf.history)
		out.warn = func(msg string) { logger.Warn(msg) }
		var cur atomic.Pointer[cycle]
		cur.Store(cyc)
		srv, err := newServer(func(ctx context.Context) report.Run { return cur.Load().run(ctx) }, &out, sf.grace, logger)
		if err != nil {
			return fail(report.ExitCouldNotRun, "%v", err)
		}
		srv.webConfig = sf.webConfig
		srv.reloadPolicy = a.policyReloader(&cf, &cur, sf.wf.on, logger)
		defer reloadOnHUP(ctx, srv)()
		watching, err := sf.wf.start(ctx, func() *cycle { return cur.Load() }, srv, logger)
		if err != nil {
			return fail(report.ExitCouldNotRun, "%v", err)
		}
		if watching != nil {
			defer watching.Stop()
		}
		ln, err := net.Listen("tcp", sf.listen)
		if err != nil {
			return fail(report.ExitCouldNotRun, "listen on %s: %v", sf.listen, err)
		}
		logger.Info("listening", "addr", ln.Addr().String(), "policy", cyc.policy.Metadata.Name, "backend", cyc.backendName, "schedule", sf.schedule)
		if err := srv.serve(ctx, ln, sched, sf.runAtStart); err != nil {
			return fail(report.ExitCouldNotRun, "%v", err)
		}
		return report.ExitOK
	}
}

// serveFlags are serve's own flags, beside the cycle's, the outputs' and
// the log's.
type serveFlags struct {
	schedule, listen string
	webConfig        string
	runAtStart       bool
	grace            time.Duration
	history          int
	wf               watchFlags
}

func (sf *serveFlags) register(fs *pflag.FlagSet) {
	group(fs, groupServe, func() {
		fs.StringVar(&sf.schedule, "schedule", runner.DefaultSchedule, `when to run: cron (5 fields, or 6 with seconds first) or a descriptor ("@hourly", "@every 10m")`)
		fs.StringVar(&sf.listen, "listen", DefaultListen, "address for the egress page (/), /metrics, /healthz, /report.json and POST /-/reload (10191: sandprobe's own port, see docs/metrics.md)")
		fs.StringVar(&sf.webConfig, "web.config.file", "", "TLS and basic authentication for every endpoint: a Prometheus exporter-toolkit web configuration file (tls_server_config, basic_auth_users; docs/metrics.md)")
		fs.IntVar(&sf.history, "history", page.DefaultHistory, "how many runs the egress page keeps, so a reopened host shows as a change over time")
		fs.BoolVar(&sf.runAtStart, "run-at-start", true, "run once at start instead of waiting for the first scheduled time")
		sf.wf.register(fs)
		fs.DurationVar(&sf.grace, "grace", 20*time.Second, "on SIGTERM, how long a run in flight may finish before it is cancelled (keep it below the pod's terminationGracePeriodSeconds)")
	})
}

// check finds bad input before the first run: the schedule (returned
// parsed), the grace period, the history, --watch for the backend, and a
// web configuration that cannot serve (rather than when the listener
// starts).
func (sf *serveFlags) check(backend string) (cron.Schedule, error) {
	sched, err := runner.ParseSchedule(sf.schedule)
	if err != nil {
		return nil, fmt.Errorf("--schedule: %w", err)
	}
	if sf.grace <= 0 {
		return nil, fmt.Errorf("--grace: want a positive duration, got %s", sf.grace)
	}
	if sf.history < 1 || sf.history > 10000 {
		return nil, fmt.Errorf("--history: want 1 to 10000 runs, got %d", sf.history)
	}
	if err := sf.wf.check(backend); err != nil {
		return nil, err
	}
	if err := web.Validate(sf.webConfig); err != nil {
		return nil, fmt.Errorf("--web.config.file: %w", err)
	}
	return sched, nil
}

// policyReloader builds the whole cycle again from the policy file,
// exactly as at start (a backend built from the policy, the kube
// clients), and makes it the current one; the run in flight, if any, ends
// with the old one.
func (a *app) policyReloader(cf *cycleFlags, cur *atomic.Pointer[cycle], watching bool, logger *slog.Logger) func() (*policy.Policy, error) {
	return func() (*policy.Policy, error) {
		var problems bytes.Buffer
		next, ok := cf.build(&app{stdin: a.stdin, stdout: io.Discard, stderr: &problems}, "serve", logger)
		if !ok {
			return nil, errors.New(oneLineErr(errors.New(problems.String())))
		}
		if watching && !slices.Equal(next.policy.Spec.Namespaces, cur.Load().policy.Spec.Namespaces) {
			logger.Warn("spec.namespaces changed: --watch keeps watching the namespaces it started with until serve restarts; scheduled cycles probe the new ones")
		}
		cur.Store(next)
		return next.policy, nil
	}
}

// reloadOnHUP reloads the policy on SIGHUP until ctx ends; the returned
// function stops listening for the signal.
func reloadOnHUP(ctx context.Context, srv *server) func() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
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
	return func() { signal.Stop(hup) }
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
