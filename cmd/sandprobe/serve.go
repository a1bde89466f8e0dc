package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/robfig/cron/v3"
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
	)
	cf.register(fs)
	out.registerFiles(fs)
	lf.register(fs)
	group(fs, groupServe, func() {
		fs.StringVar(&schedule, "schedule", runner.DefaultSchedule, `when to run: cron (5 fields, or 6 with seconds first) or a descriptor ("@hourly", "@every 10m")`)
		fs.StringVar(&listen, "listen", ":9090", "address for the egress page (/), /metrics, /healthz and /report.json")
		fs.IntVar(&history, "history", page.DefaultHistory, "how many runs the egress page keeps, so a reopened host shows as a change over time")
		fs.BoolVar(&runAtStart, "run-at-start", true, "run once at start instead of waiting for the first scheduled time")
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
		logger, err := daemonLogger(&lf, a.stderr)
		if err != nil {
			return fail(report.ExitBadInput, "%v", err)
		}
		cyc, ok := cf.build(a, "serve", logger)
		if !ok {
			return report.ExitBadInput
		}
		out.policy, out.history = cyc.policy, page.NewHistory(history)
		srv, err := newServer(cyc.run, &out, grace, logger)
		if err != nil {
			return fail(report.ExitCouldNotRun, "%v", err)
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

// server is sandprobe serve: a schedule of cycles and the HTTP endpoints
// that show the last one.
type server struct {
	logger   *slog.Logger
	registry *prometheus.Registry // sandprobe's metrics: files, pushes and /metrics
	scrape   prometheus.Gatherer  // those and the process's own, for /metrics
	metrics  *report.Metrics
	sched    *runner.Scheduler
	out      *outputs

	mu       sync.RWMutex
	lastJSON []byte      // the last published run, rendered once
	lastRun  *report.Run // the same, for the egress page
	started  time.Time
}

// newServer wires a cycle to the schedule, the metrics and the outputs. The
// registry is the server's own: nothing else can register on it.
func newServer(cycle func(context.Context) report.Run, out *outputs, grace time.Duration, logger *slog.Logger) (*server, error) {
	reg := prometheus.NewRegistry()
	m, err := report.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	m.SetNodeDetail(out.nodeDetail)
	// A long-running process reports on itself too (restarts, memory,
	// goroutines), but only on /metrics: in a textfile they would collide
	// with node_exporter's own go_* and process_* series.
	self := prometheus.NewRegistry()
	if err := self.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("register process metrics: %w", err)
	}
	if err := self.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("register go metrics: %w", err)
	}
	s := &server{logger: logger, registry: reg, scrape: prometheus.Gatherers{reg, self}, metrics: m, out: out, started: time.Now()}
	s.sched = &runner.Scheduler{
		Cycle:   cycle,
		Publish: s.publish,
		Skipped: m.SkippedRun,
		Grace:   grace,
		Logger:  logger,
	}
	return s, nil
}

// publish makes a finished run visible: metrics, /report.json, then the
// files and the Pushgateway. A report that cannot be written is logged as an
// error; the endpoints still show the run.
func (s *server) publish(ctx context.Context, run report.Run, finished time.Time) {
	s.metrics.Observe(run, finished)
	if s.out.history != nil {
		s.out.history.Add(run)
	}
	s.mu.Lock()
	s.lastRun = &run
	s.mu.Unlock()
	var buf bytes.Buffer
	if err := (report.JSON{}).Write(&buf, run); err != nil {
		s.logger.Error("render the JSON report", "err", err)
	} else {
		s.mu.Lock()
		s.lastJSON = buf.Bytes()
		s.mu.Unlock()
	}
	if err := s.out.writeFiles(ctx, run, s.registry); err != nil {
		s.logger.Error("write reports", "err", err)
	}
}

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.scrape, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(s.logger.Handler(), slog.LevelError),
		ErrorHandling: promhttp.HTTPErrorOnError,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /report.json", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.RLock()
		body := s.lastJSON
		s.mu.RUnlock()
		if body == nil {
			w.Header().Set("Retry-After", "10")
			http.Error(w, "no run has finished yet", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})
	mux.HandleFunc("GET /{$}", s.servePage)
	return mux
}

// servePage renders the egress page from the last run and the history, on
// every request (a few milliseconds), so its ages are those of the moment.
func (s *server) servePage(w http.ResponseWriter, _ *http.Request) {
	s.mu.RLock()
	last := s.lastRun
	s.mu.RUnlock()
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", page.ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	var buf bytes.Buffer
	var err error
	status := http.StatusOK
	if last == nil {
		status = http.StatusServiceUnavailable
		h.Set("Retry-After", "10")
		name := ""
		if s.out.policy != nil {
			name = s.out.policy.Metadata.Name
		}
		err = page.Pending(&buf, name, s.started)
	} else {
		err = page.Write(&buf, page.Page{Policy: s.out.policy, Run: *last, History: s.out.history, Served: true, Now: time.Now()})
	}
	if err != nil {
		s.logger.Error("render the egress page", "err", err)
		http.Error(w, "render the egress page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// serve runs the schedule and the endpoints until ctx is done (SIGTERM),
// then lets the run in flight finish or cancels it, and only then stops
// the endpoints, so a last scrape still sees the last run.
func (s *server) serve(ctx context.Context, ln net.Listener, sched cron.Schedule, runAtStart bool) error {
	httpSrv := &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
	}
	schedCtx, stopSched := context.WithCancel(ctx)
	defer stopSched()
	var wg sync.WaitGroup
	var serveErr error
	wg.Go(func() {
		if err := httpSrv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			serveErr = fmt.Errorf("serve on %s: %w", ln.Addr(), err)
			stopSched() // endpoints gone: stop the schedule too
		}
	})
	schedErr := s.sched.Run(schedCtx, sched, runAtStart)
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := httpSrv.Shutdown(shutdownCtx); err != nil {
		httpSrv.Close()
	}
	wg.Wait()
	s.logger.Info("stopped")
	return errors.Join(serveErr, schedErr)
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
