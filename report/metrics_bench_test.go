package report

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkMetricsObserveAndWrite times what a run adds for metrics —
// Observe plus rendering the exposition — for 500 nodes × 24 findings,
// against rendering the same run as JSON in the same loop.
func BenchmarkMetricsObserveAndWrite(b *testing.B) {
	run := Run{Policy: "p", Version: "v", Seconds: 1, Phases: map[string]float64{"probe": 1}}
	for n := range 500 {
		target := fmt.Sprintf("node/worker-%d", n)
		for c := range 20 {
			run.Findings = append(run.Findings, Finding{Check: fmt.Sprintf("fs.check-%d", c), Target: target, Status: Pass})
		}
		for _, host := range []string{"a:443", "b:443"} {
			run.Findings = append(run.Findings, Finding{Check: "egress.allowed", Role: RoleAllowance, Subject: host, Target: target, Status: Pass, Class: "answered"})
			run.Findings = append(run.Findings, Finding{Check: "egress.must-fail", Role: RoleMustFail, Subject: host, Target: target, Status: Fail, Class: "answered"})
		}
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		b.Fatal(err)
	}
	var metricsT, jsonT time.Duration
	for b.Loop() {
		t0 := time.Now()
		m.Observe(run, time.Now())
		if err := WriteMetrics(io.Discard, reg); err != nil {
			b.Fatal(err)
		}
		metricsT += time.Since(t0)
		t1 := time.Now()
		if err := (JSON{}).Write(io.Discard, run); err != nil {
			b.Fatal(err)
		}
		jsonT += time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(len(run.Findings)), "findings")
	b.ReportMetric(float64(metricsT.Microseconds())/n/1000, "ms/metrics")
	b.ReportMetric(float64(jsonT.Microseconds())/n/1000, "ms/json")
	b.ReportMetric(float64(metricsT)/float64(jsonT), "ratio")
}
