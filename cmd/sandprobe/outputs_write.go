package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandprobe/sandprobe/internal/catalogue"
	"github.com/sandprobe/sandprobe/page"
	"github.com/sandprobe/sandprobe/report"
)

// pushTimeout bounds one push (and the read before it) to the Pushgateway.
const pushTimeout = 30 * time.Second

// write renders the run to stdout and to every requested file. A file that
// cannot be written is an error: a CI step must not read a stale report.
func (o *outputs) write(ctx context.Context, a *app, run report.Run, verbose bool) error {
	catalogue.Fill(run.Findings)
	var w report.Writer
	switch o.format {
	case "json":
		w = report.JSON{}
	case "junit":
		w = report.JUnit{}
	case "sarif":
		w = *o.sarif
	default:
		w = report.Text{Color: isTerminal(a.stdout), Verbose: verbose}
	}
	if err := w.Write(a.stdout, run); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if o.warn == nil {
		o.warn = func(msg string) { fmt.Fprintf(a.stderr, "sandprobe: %s\n", msg) }
	}
	return o.writeFiles(ctx, run, nil, nil)
}

// checkWritableDir makes sure a file can be created beside path (the
// atomic write's temporary file) and that path is not a directory.
// Its error reads "FILE: message".
func checkWritableDir(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s: is a directory", path)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".check-*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("%s: cannot write: %w", path, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// writeFiles writes the report files and ships the metrics. g and m hold
// the metrics of a long-running process (serve); when nil, they are made
// from this run alone. A push that fails is a warning and
// sandprobe_push_failures_total (in the metrics file and on /metrics),
// not an error, unless --require-push: the run's verdict does not depend
// on a gateway, and a Job that fails every thirty minutes for a missing
// one hides the verdicts that matter (SandboxProbeStale still fires when
// no metrics arrive).
func (o *outputs) writeFiles(ctx context.Context, run report.Run, g prometheus.Gatherer, m *report.Metrics) error {
	catalogue.Fill(run.Findings)
	if o.junitFile != "" {
		if err := report.WriteRunFile(o.junitFile, report.JUnit{}, run); err != nil {
			return err
		}
	}
	if o.jsonFile != "" {
		if err := report.WriteRunFile(o.jsonFile, report.JSON{}, run); err != nil {
			return err
		}
	}
	if o.sarifFile != "" && o.sarif != nil {
		if err := report.WriteRunFile(o.sarifFile, *o.sarif, run); err != nil {
			return err
		}
	}
	if o.htmlFile != "" {
		if run.Spooled != nil {
			// The page lays findings out by object: it reads them all at
			// once (memory grows with them again, for --html only).
			fs, err := run.Spooled.Slice()
			if err != nil {
				return err
			}
			run.Findings, run.Spooled = fs, nil
		}
		if err := page.WriteFile(o.htmlFile, page.Page{Policy: o.policy, Run: run, History: o.history, Now: time.Now()}); err != nil {
			return err
		}
	}
	if o.metricsFile == "" && o.pushgateway == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	client := &http.Client{Timeout: pushTimeout}
	if g == nil {
		var err error
		if g, m, err = o.oneRunMetrics(ctx, client, run); err != nil {
			return err
		}
	}
	// Push first, so the metrics file counts a failed push.
	if o.pushgateway != "" {
		if err := report.PushMetrics(ctx, client, o.pushgateway, o.cluster, g); err != nil {
			if o.requirePush {
				return err
			}
			m.PushFailed()
			msg := fmt.Sprintf("warning: %v; the run's result stands (--require-push makes a failed push exit 3)", err)
			if o.warn != nil {
				o.warn(msg)
			} else {
				fmt.Fprintf(os.Stderr, "sandprobe: %s\n", msg)
			}
		}
	}
	if o.metricsFile != "" {
		if err := report.WriteMetricsFile(o.metricsFile, g); err != nil {
			return err
		}
	}
	return nil
}

// oneRunMetrics makes the metrics of a one-shot run. It carries on from the
// previous metrics file or the gateway's group: sandprobe_runs_total counts
// on from their counts (a CronJob is a new process every run), and a run
// that is no success (exit 1, or 3 with nothing checked) keeps the last
// success, so a failing CronJob still says when the probe last worked
// instead of dropping the series.
func (o *outputs) oneRunMetrics(ctx context.Context, client *http.Client, run report.Run) (prometheus.Gatherer, *report.Metrics, error) {
	reg := prometheus.NewRegistry()
	m, err := report.NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	m.SetNodeDetail(o.nodeDetail)
	// Best effort: a file we cannot parse is about to be replaced, and a
	// gateway we cannot read fails the push below with a clearer error.
	// The file is this CronJob's own; with both, the gateway's group wins
	// (the file may be a pod's emptyDir that starts empty).
	var prev report.Previous
	if o.metricsFile != "" {
		if p, err := report.PreviousInFile(o.metricsFile); err == nil {
			prev = p
		}
	}
	if o.pushgateway != "" {
		if p, err := report.PreviousAtGateway(ctx, client, o.pushgateway, o.cluster); err == nil && (p.Runs != nil || !p.LastSuccess.IsZero()) {
			prev = p
		}
	}
	m.Remember(prev)
	m.Observe(run, time.Now())
	return reg, m, nil
}
