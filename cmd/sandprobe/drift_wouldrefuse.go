package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/sandprobe/sandprobe/admission"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// driftWouldRefuse is `sandprobe drift --would-refuse`: the audit stage's
// question before the admission policy's binding says Deny. It judges the
// live pods (or the pods of -f files) by the rules the rendered policy
// encodes, so the list is what Deny would refuse, not what drift dislikes.
func (a *app) driftWouldRefuse(ctx context.Context, o *driftOptions, p *policy.Policy, kube bool, logger *slog.Logger) int {
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(a.stderr, "sandprobe drift: "+format+"\n", args...)
		return code
	}
	if o.docker || len(o.inspect) > 0 {
		return fail(report.ExitBadInput, "--would-refuse judges pods by the Kubernetes admission policy: give --kubeconfig or -f FILE, not --docker or --inspect")
	}
	judge, err := admission.NewJudge(p)
	if err != nil {
		return fail(report.ExitBadInput, "--would-refuse: %v", err)
	}
	if !kube && len(o.files) == 0 {
		if os.Getenv("KUBECONFIG") == "" && os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
			return fail(report.ExitBadInput, "nothing to check: give --kubeconfig or -f FILE")
		}
		kube = true
	}
	start := time.Now()
	var results []*admission.WouldRefuse
	if len(o.files) > 0 {
		m, err := a.readManifests(o.files, o.namespace, o.recursive)
		if err != nil {
			return fail(report.ExitBadInput, "%v", err)
		}
		r := judge.JudgePods(m.Pods, "the files")
		m.Locate(r.Findings) // the pod's place in its file, for SARIF and JUnit
		results = append(results, r)
	}
	if kube {
		ctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		api, cfg, err := o.kubeAPI()
		if err != nil {
			return fail(report.ExitBadInput, "%s", oneLineErr(err))
		}
		res, err := judge.ScanWouldRefuse(ctx, api, o.pageSize, "the cluster at "+cfg.Host)
		if err != nil {
			fmt.Fprintf(a.stderr, "sandprobe drift: %s\n", oneLineErr(err))
			res = &admission.WouldRefuse{Findings: []report.Finding{{
				Check: admission.CheckWouldRefuse, Target: "cluster", Status: report.Error,
				Expected: "the pods listed", Actual: err.Error(), Fix: "check the kubeconfig and that it may list pods in every namespace",
			}}}
		}
		results = append(results, res)
	}
	run := report.Run{Policy: p.Metadata.Name, Backend: "would-refuse", StartedAt: start.UTC()}
	stampRun(&run)
	for _, r := range results {
		run.Findings = append(run.Findings, r.Findings...)
		run.Notes = append(run.Notes, r.Notes...)
		run.Scanned += r.Checked
	}
	run.Seconds = time.Since(start).Seconds()
	run.Phases = map[string]float64{"would-refuse": run.Seconds}
	logger.Debug("would-refuse done", "checked", run.Scanned, "findings", len(run.Findings), "seconds", run.Seconds)
	if err := o.out.write(ctx, a, run, o.lf.verbose); err != nil {
		return fail(report.ExitCouldNotRun, "%v", err)
	}
	return run.ExitCode()
}
