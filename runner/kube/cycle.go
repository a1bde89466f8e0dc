package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// What a cycle on a cluster adds to the probe pods (runner.Cycle calls
// them): a preflight, so an unreachable cluster is one clear error instead
// of one per phase, and the drift phase after the probe.

// DefaultDriftTimeout bounds the drift phase when DriftPhase.Timeout is 0.
const DefaultDriftTimeout = 5 * time.Minute

// reachTimeout bounds the preflight's one request.
const reachTimeout = 20 * time.Second

// DriftPhase compares the live sandboxes and their egress policies with the
// policy after every probe, in the same cycle.
type DriftPhase struct {
	API     drift.KubeAPI
	Timeout time.Duration // 0 is DefaultDriftTimeout
}

var (
	_ runner.Preflight  = (*Backend)(nil)
	_ runner.AfterProbe = (*Backend)(nil)
	_ runner.Targeter   = (*Backend)(nil)
)

// Preflight asks the API server for the pods of the first probe namespace
// once, briefly: an error names the cluster (Host) and whether it did not
// answer or refused.
func (b *Backend) Preflight(ctx context.Context, spec runner.ProbeSpec) error {
	ctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	ns := b.Namespaces(spec)[0]
	_, err := b.API.ListPods(ctx, ns, metav1.ListOptions{Limit: 1})
	var status apierrors.APIStatus
	switch {
	case err == nil:
		return nil
	case errors.As(err, &status):
		// It answered, but not as asked: credentials or RBAC.
		return fmt.Errorf("the cluster at %s refused to list pods in %s: %s", b.Host, ns, oneLine(err))
	}
	return fmt.Errorf("cannot reach the cluster at %s: %s", b.Host, oneLine(err))
}

// AfterProbe runs the drift phase when b.Drift is set, after the probe,
// whose pods are gone by then: they carry the sandbox labels and would
// count as sandboxes. A cluster that cannot be listed is an error finding,
// never a clean phase. A cycle for nodes only (a CNI agent restarted:
// nothing drift reads changed) runs none; the merge keeps the last one.
func (b *Backend) AfterProbe(ctx context.Context, spec runner.ProbeSpec, run *report.Run) {
	if b.Drift == nil || (spec.Scope != nil && !spec.Scope.Drift()) {
		return
	}
	p := spec.Policy
	start := time.Now()
	engine, err := drift.NewEngine(p)
	col := drift.NewCollector()
	if err == nil {
		timeout := b.Drift.Timeout
		if timeout <= 0 {
			timeout = DefaultDriftTimeout
		}
		dctx, cancel := context.WithTimeout(ctx, timeout)
		scan := &drift.KubeScan{API: b.Drift.API, Engine: engine, Source: "the cluster at " + b.Host, Logger: b.log()}
		err = scan.Run(dctx, col)
		cancel()
	}
	if err != nil {
		b.log().Error("drift could not run", "err", oneLine(err))
		col.AddError("drift", "list", err)
	}
	if col.Scanned == 0 && err == nil {
		col.Note("no sandbox found: nothing carries the labels %s", drift.SelectorText(p))
	}
	col.Summary(p)
	run.Findings = append(run.Findings, col.Findings...)
	run.Notes = append(run.Notes, col.Notes...)
	run.Scanned += col.Scanned
	if run.Phases == nil {
		run.Phases = map[string]float64{}
	}
	run.Phases["drift"] = time.Since(start).Seconds()
	run.Seconds += run.Phases["drift"]
}
