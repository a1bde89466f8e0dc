package report_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandprobe/sandprobe/report"
)

// TestWatchMetricsBound: serve --watch's counters are a fixed set of
// series (docs/metrics.md: 12, whatever the fleet's size), all present
// from the start so increase() sees the first change.
func TestWatchMetricsBound(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := report.NewWatchMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	count := func() int {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, mf := range mfs {
			n += len(mf.GetMetric())
		}
		return n
	}
	if n := count(); n != 12 {
		t.Fatalf("%d series before any change, want 12", n)
	}
	for range 1000 {
		m.Event("networkpolicy")
		m.Event("cni-agent")
		m.Cycle([]string{"namespaces", "nodes"})
		m.Coalesced()
	}
	if n := count(); n != 12 {
		t.Errorf("%d series after a thousand changes, want 12", n)
	}
	if _, err := report.NewWatchMetrics(reg); err == nil {
		t.Error("registering the watch metrics twice on one registry: no error")
	}
}
