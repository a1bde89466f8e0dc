package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/robfig/cron/v3"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

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

	// webConfig is exporter-toolkit's --web.config.file: TLS and basic
	// authentication on every endpoint ("" for plain HTTP).
	webConfig string
	// reloadPolicy reads the policy file again and, when it is good,
	// makes it the one the next cycles run; a bad file is an error and
	// the previous policy stays. nil: reloading is not offered.
	reloadPolicy func() (*policy.Policy, error)
	// reloadMu orders reloads with each other and with publish, which
	// reads out.policy for the report files.
	reloadMu                 sync.Mutex
	reloadOK, reloadLastGood prometheus.Gauge
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
	s := &server{logger: logger, registry: reg, scrape: prometheus.Gatherers{reg, self}, metrics: m, out: out, started: time.Now(),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandprobe_policy_last_reload_successful",
			Help: "1 when the last policy reload (SIGHUP, POST /-/reload) succeeded or none was asked for, 0 when the file was bad and the previous policy kept running.",
		}),
		reloadLastGood: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandprobe_policy_last_reload_success_timestamp_seconds",
			Help: "Unix time the policy was last loaded successfully (at start, or by a reload).",
		}),
	}
	s.reloadOK.Set(1)
	s.reloadLastGood.Set(float64(s.started.UnixNano()) / 1e9)
	if err := self.Register(s.reloadOK); err != nil {
		return nil, fmt.Errorf("register reload metrics: %w", err)
	}
	if err := self.Register(s.reloadLastGood); err != nil {
		return nil, fmt.Errorf("register reload metrics: %w", err)
	}
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
	s.endpoints(run)
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if err := s.out.writeFiles(ctx, run, s.registry, s.metrics); err != nil {
		s.logger.Error("write reports", "err", err)
	}
}

// reload reads the policy file again (SIGHUP, POST /-/reload): a good one
// runs from the next cycle on (a run in flight ends with the old one), a
// bad one changes nothing and says why, in the log, in the answer and in
// sandprobe_policy_last_reload_successful.
func (s *server) reload(why string) (string, error) {
	if s.reloadPolicy == nil {
		return "", errors.New("this server cannot reload its policy")
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	p, err := s.reloadPolicy()
	if err != nil {
		s.reloadOK.Set(0)
		s.logger.Error("policy reload failed: the previous policy keeps running", "trigger", why, "err", err)
		return "", err
	}
	s.reloadOK.Set(1)
	s.reloadLastGood.Set(float64(time.Now().UnixNano()) / 1e9)
	s.mu.Lock()
	s.out.policy = p
	s.mu.Unlock()
	s.logger.Info("policy reloaded: the next cycle runs it", "trigger", why, "policy", p.Metadata.Name)
	return p.Metadata.Name, nil
}

// endpoints makes run what /report.json and the egress page show.
func (s *server) endpoints(run report.Run) {
	s.mu.Lock()
	s.lastRun = &run
	s.mu.Unlock()
	var buf bytes.Buffer
	if err := (report.JSON{}).Write(&buf, run); err != nil {
		s.logger.Error("render the JSON report", "err", err)
		return
	}
	s.mu.Lock()
	s.lastJSON = buf.Bytes()
	s.mu.Unlock()
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
	webConfig := s.webConfig
	listen := []string{ln.Addr().String()}
	schedCtx, stopSched := context.WithCancel(ctx)
	defer stopSched()
	var wg sync.WaitGroup
	var serveErr error
	wg.Go(func() {
		// exporter-toolkit: TLS and basic auth from --web.config.file, as
		// every Prometheus exporter reads it; plain HTTP without one.
		flags := &web.FlagConfig{WebConfigFile: &webConfig, WebListenAddresses: &listen}
		if err := web.Serve(ln, httpSrv, flags, s.logger.With("component", "web")); !errors.Is(err, http.ErrServerClosed) {
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
