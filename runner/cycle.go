package runner

import (
	"context"
	"errors"
	"time"

	"github.com/sandprobe/sandprobe/report"
)

// Preflight is a backend that checks, before the probe, that where it
// launches answers at all (the kube backend asks the API server once), so
// an unreachable target is one clear error instead of one per phase.
type Preflight interface {
	Preflight(ctx context.Context, spec ProbeSpec) error
}

// AfterProbe is a backend with a phase after the probe (the kube backend
// compares the live sandboxes with the policy once its probe pods, which
// carry the sandbox labels, are gone). It adds its findings, notes and
// phase time to the run.
type AfterProbe interface {
	AfterProbe(ctx context.Context, spec ProbeSpec, run *report.Run)
}

// Targeter names where a backend's probe stands, for the error of a
// preflight that failed.
type Targeter interface {
	Target(spec ProbeSpec) string
}

// Cycle is one probe cycle through a backend, built the same way for every
// backend: preflight, probe, after-probe phase, each when the backend has it.
type Cycle struct {
	Backend Backend
	Name    string // the backend's name in the report: local, docker, kube
	Version string // sandprobe's version, in the report
	// Commit and BuildDate stamp the report with the build (internal/version).
	Commit, BuildDate string
	// FixFor gives a check's fix where a compact result dropped it.
	FixFor func(checkID string) string
	// SeverityFor gives each finding its check's severity (the catalogue's
	// rows); the probe does not send it.
	SeverityFor func(checkID string) report.Severity
	// Trail, when set, reads the proxy's record after the probe and finds
	// every attempt the probe made through the proxy in it
	// (egress.audit-trail, record.go).
	Trail *Trail
}

// Run performs the cycle. A backend error becomes error findings, so the
// run can never look clean. The error is the preflight's, already in the
// run as a finding, for the caller to say in one line.
func (c Cycle) Run(ctx context.Context, spec ProbeSpec) (report.Run, error) {
	start := time.Now()
	p := spec.Policy
	run := report.Run{Policy: p.Metadata.Name, Version: c.Version, Commit: c.Commit, BuildDate: c.BuildDate, Backend: c.Name, StartedAt: start.UTC(), DeclaredNamespaces: len(p.Spec.Namespaces)}
	if pf, ok := c.Backend.(Preflight); ok {
		if err := pf.Preflight(ctx, spec); err != nil {
			target := c.Name
			if t, ok := c.Backend.(Targeter); ok {
				target = t.Target(spec)
			}
			cnr := &CouldNotRun{Target: target, Reason: ReasonLaunch, Detail: err.Error()}
			run.Findings = []report.Finding{cnr.Finding()}
			run.Seconds = time.Since(start).Seconds()
			return run, err
		}
	}
	var mark RecordMark
	var markErr error
	if c.Trail != nil {
		mark, markErr = c.Trail.Record.Mark(ctx)
	}
	probeStart := time.Now()
	results, err := c.Backend.Run(ctx, spec)
	for _, res := range results {
		run.Findings = append(run.Findings, Findings(res.Target, res, c.FixFor)...)
		run.Probes = append(run.Probes, res)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			err = &CouldNotRun{Target: c.Name, Reason: ReasonDeadline, Detail: "interrupted before the probe reported"}
		}
		for _, cnr := range Problems(c.Name, err) {
			run.Findings = append(run.Findings, cnr.Finding())
		}
	}
	run.Phases = map[string]float64{"probe": time.Since(probeStart).Seconds()}
	if c.Trail != nil && !spec.NoNetwork {
		c.Trail.check(ctx, spec, &run, mark, markErr, probeStart)
	}
	run.Seconds = time.Since(start).Seconds()
	if ap, ok := c.Backend.(AfterProbe); ok && ctx.Err() == nil && !spec.SkipAfterProbe {
		ap.AfterProbe(ctx, spec, &run)
	}
	c.fillSeverity(run.Findings)
	return run, nil
}

func (c Cycle) fillSeverity(fs []report.Finding) {
	if c.SeverityFor == nil {
		return
	}
	for i := range fs {
		if fs[i].Severity == "" {
			fs[i].Severity = c.SeverityFor(fs[i].Check)
		}
	}
}

// AfterProbe runs the backend's phase after the probe on its own, into run
// (serve --watch, once a targeted cycle's probe verdict is out); false when
// the backend has none.
func (c Cycle) AfterProbe(ctx context.Context, spec ProbeSpec, run *report.Run) bool {
	ap, ok := c.Backend.(AfterProbe)
	if ok {
		ap.AfterProbe(ctx, spec, run)
		c.fillSeverity(run.Findings)
	}
	return ok
}
