package page

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/report"
)

// bigRun is a cluster-sized run: n probe targets (nodes) with the lab
// policy's findings each, plus drift on 200 objects.
func bigRun(b *testing.B, nodes int) (report.Run, *History) {
	p := labPolicy(b)
	h := NewHistory(DefaultHistory)
	var last report.Run
	for i := range DefaultHistory {
		run := report.Run{Policy: p.Metadata.Name, Version: "bench", Backend: "kube", StartedAt: t0.Add(time.Duration(i) * 30 * time.Minute)}
		for n := range nodes {
			one := runFor(p, run.StartedAt)
			for _, f := range one.Findings {
				f.Where = report.Location{Namespace: "sandboxes", Node: fmt.Sprintf("worker-%d", n)}
				f.Target = f.Where.String()
				run.Findings = append(run.Findings, f)
			}
		}
		for o := range 200 {
			run.Findings = append(run.Findings, report.Finding{Check: "drift.pod.runtime-class", Target: fmt.Sprintf("pod/sandboxes/agent-%d", o), Subject: "spec.runtimeClassName",
				Status: report.Fail, Expected: "one of kata, gvisor", Actual: "unset", Fix: "set spec.runtimeClassName: kata"})
		}
		h.Add(run)
		last = run
	}
	return last, h
}

// BenchmarkPage renders the egress page of a 10-node run with 24 runs of
// history, against the JSON report of the same run (the baseline).
func BenchmarkPage(b *testing.B) {
	run, h := bigRun(b, 10)
	p := labPolicy(b)
	b.Run("json-baseline", func(b *testing.B) {
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			if err := (report.JSON{}).Write(&buf, run); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(buf.Len())/1024, "KiB")
	})
	b.Run("page", func(b *testing.B) {
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			if err := Write(&buf, Page{Policy: p, Run: run, History: h, Served: true, Now: t0}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(buf.Len())/1024, "KiB")
	})
}
