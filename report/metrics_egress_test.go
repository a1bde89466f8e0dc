package report_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandprobe/sandprobe/report"
)

// The egress record's series: per allowance from the policy; the hosts
// sandboxes tried bounded to the busiest 20 plus one for the rest.
func TestEgressUsageMetrics(t *testing.T) {
	end := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	u := &report.EgressUsage{From: end.Add(-40 * 24 * time.Hour), To: end, UnusedDays: 30, Allowances: []report.AllowanceUsage{
		{Host: "api.lab.test", Port: 443, Requests: 82, LastUse: end, Verdict: report.Pass},
		{Host: "git.lab.test", Port: 443, Requests: 0, Verdict: report.Fail},
		{Host: "*.github.io", Port: 443, Requests: 3, LastUse: end.Add(-time.Hour), Verdict: report.Pass, Risk: "github.io is a multi-tenant suffix"},
	}}
	for i := 0; i < 25; i++ {
		u.Denied = append(u.Denied, report.DestinationUse{Sandbox: "10.0.0.1", Host: fmt.Sprintf("h%02d.example.com", i), Port: 443, Count: int64(100 - i)})
	}
	u.WouldBlock = []report.DestinationUse{{Sandbox: "a", Host: "git.lab.test", Port: 443, Count: 5}, {Sandbox: "b", Host: "git.lab.test", Port: 443, Count: 2}}
	run := report.Run{Policy: "p", Version: "v", StartedAt: end, Findings: []report.Finding{{Check: "egress.allowance-unused", Target: "policy", Status: report.Fail}}, EgressUsage: u}
	reg := prometheus.NewRegistry()
	m, err := report.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(run, end)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{}
	for _, mf := range mfs {
		got[mf.GetName()] = map[string]float64{}
		for _, mm := range mf.GetMetric() {
			l := ""
			for _, lp := range mm.GetLabel() {
				l += lp.GetValue()
			}
			got[mf.GetName()][l] = mm.GetGauge().GetValue()
		}
	}
	check := func(name, label string, want float64) {
		t.Helper()
		if v, ok := got[name][label]; !ok || v != want {
			t.Errorf("%s{%q} = %v (present %v), want %v", name, label, v, ok, want)
		}
	}
	check(report.MetricEgressAllowanceRequests, "api.lab.test:443", 82)
	check(report.MetricEgressAllowanceRequests, "git.lab.test:443", 0)
	check(report.MetricEgressAllowanceLastUse, "api.lab.test:443", float64(end.Unix()))
	if _, ok := got[report.MetricEgressAllowanceLastUse]["git.lab.test:443"]; ok {
		t.Errorf("last use of a never-used allowance is present")
	}
	check(report.MetricEgressAllowancesUnused, "", 1)
	check(report.MetricEgressAllowancesRisky, "", 1)
	check(report.MetricEgressWouldBlock, "git.lab.test:443", 7)
	check(report.MetricEgressRecordEnd, "", float64(end.Unix()))
	if n := len(got[report.MetricEgressDeniedAttempts]); n != 21 {
		t.Errorf("%d denied series, want 20 hosts + 1 for the rest", n)
	}
	check(report.MetricEgressDeniedAttempts, "h00.example.com:443", 100)
	check(report.MetricEgressDeniedAttempts, "", 80+79+78+77+76)

	// A run that read no record has none of these series.
	reg = prometheus.NewRegistry()
	m, _ = report.NewMetrics(reg)
	run.EgressUsage = nil
	m.Observe(run, end)
	mfs, _ = reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == report.MetricEgressAllowancesUnused || mf.GetName() == report.MetricEgressRecordEnd {
			t.Errorf("%s present without a record", mf.GetName())
		}
	}
}
