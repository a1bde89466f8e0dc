package runner_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

func egressOpen(ns, node string, open bool) report.Finding {
	where := report.Location{Namespace: ns, Node: node}
	f := report.Finding{Check: "egress.must-fail", Role: report.RoleMustFail, Target: where.String(), Where: where, Namespace: ns,
		Subject: "192.0.2.10:443", Status: report.Pass, Class: "timeout"}
	if open {
		f.Status, f.Class = report.Fail, report.ClassAnswered
	}
	return f
}

// TestMergeKeepsWhatATargetedCycleDidNotProbe: namespace b was open on
// node n2 in the last full cycle; a cycle for namespace a (a policy there
// changed) must not make that go away, nor a cycle for node n1.
func TestMergeKeepsWhatATargetedCycleDidNotProbe(t *testing.T) {
	last := report.Run{
		Findings: []report.Finding{
			egressOpen("a", "n1", true), egressOpen("a", "n2", false),
			egressOpen("b", "n1", false), egressOpen("b", "n2", true),
			{Check: "control.vantage", Target: "namespace/sandprobe-system/node/n1/control", Where: report.Location{Namespace: "sandprobe-system", Node: "n1", Control: true}, Status: report.Pass},
			{Check: "drift.pod.runtime-class", Target: "pod/b/x", Namespace: "b", Status: report.Fail},
		},
		Scanned: 7, Phases: map[string]float64{"probe": 3, "drift": 1}, Notes: []string{"drift note"},
	}
	cases := []struct {
		name      string
		scope     runner.Scope
		targeted  []report.Finding
		drift     bool
		wantOpen  []string // targets whose egress.must-fail fails after the merge
		wantTotal int
	}{
		{"namespace a fixed", runner.NamespaceScope("a"),
			[]report.Finding{egressOpen("a", "n1", false), egressOpen("a", "n2", false),
				{Check: "control.vantage", Target: "namespace/sandprobe-system/node/n2/control", Where: report.Location{Namespace: "sandprobe-system", Node: "n2", Control: true}, Status: report.Pass}},
			true, []string{"namespace/b/node/n2"}, 5},
		{"node n1 agent restarted", runner.NodeScope("n1"),
			[]report.Finding{egressOpen("a", "n1", false), egressOpen("b", "n1", true),
				{Check: "control.vantage", Target: "namespace/sandprobe-system/node/n1/control", Where: report.Location{Namespace: "sandprobe-system", Node: "n1", Control: true}, Status: report.Pass}},
			false, []string{"namespace/b/node/n1", "namespace/b/node/n2"}, 6},
		{"node outside the pool: nothing probed", runner.NodeScope("gone"), nil, false,
			[]string{"namespace/a/node/n1", "namespace/b/node/n2"}, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			targeted := report.Run{Findings: c.targeted, Phases: map[string]float64{"probe": 1}}
			if c.drift {
				targeted.Phases["drift"] = 0.5
			}
			got := runner.Merge(last, targeted, c.scope)
			var open []string
			for _, f := range got.Findings {
				if f.Check == "egress.must-fail" && f.Status == report.Fail {
					open = append(open, f.Target)
				}
			}
			if strings.Join(open, " ") != strings.Join(c.wantOpen, " ") {
				t.Errorf("open after the merge: %v, want %v", open, c.wantOpen)
			}
			if len(got.Findings) != c.wantTotal {
				t.Errorf("%d findings, want %d: %v", len(got.Findings), c.wantTotal, got.Findings)
			}
			controls := 0
			for _, f := range got.Findings {
				if f.Check == "control.vantage" {
					controls++
				}
			}
			if want := min(1, len(c.targeted)); controls != want {
				t.Errorf("%d control findings, want %d (the targeted cycle's own)", controls, want)
			}
			// The metrics see the merged run: every open location keeps
			// its sandprobe_egress_unexpected_open series at 1.
			openSeries := openSeriesOf(t, got)
			slices.Sort(openSeries)
			if strings.Join(openSeries, " ") != strings.Join(c.wantOpen, " ") {
				t.Errorf("sandprobe_egress_unexpected_open > 0 at %v, want %v", openSeries, c.wantOpen)
			}
			if _, ok := got.Phases["drift"]; !ok {
				t.Error("the merged run lost its drift phase: sandprobe_sandboxes_scanned would vanish")
			}
			if !c.drift && got.Scanned != 7 {
				t.Errorf("scanned %d, want the last drift's 7", got.Scanned)
			}
			if !slices.ContainsFunc(got.Notes, func(n string) bool { return strings.Contains(n, c.scope.String()) }) {
				t.Errorf("notes %q do not say what the cycle covered", got.Notes)
			}
		})
	}
	checkMergeAgainAndFull(t, last)
}

// checkMergeAgainAndFull: merging again does not pile up notes, and a full
// cycle's run replaces the last one (but for its drift, when it has none).
func checkMergeAgainAndFull(t *testing.T, last report.Run) {
	t.Helper()
	// Merging again does not pile up notes.
	once := runner.Merge(last, report.Run{}, runner.NodeScope("n1"))
	twice := runner.Merge(once, report.Run{}, runner.NodeScope("n1"))
	if len(twice.Notes) != len(once.Notes) {
		t.Errorf("notes grew from %d to %d: %q", len(once.Notes), len(twice.Notes), twice.Notes)
	}
	if full := runner.Merge(last, report.Run{Scanned: 1, Phases: map[string]float64{"drift": 1}}, runner.FullScope()); full.Scanned != 1 || len(full.Findings) != 0 {
		t.Error("a full cycle's run is not the whole truth after the merge")
	}
	// A full probe without its drift phase (shown before drift runs)
	// keeps the last drift, and nothing else of the last run.
	probed := runner.Merge(last, report.Run{Findings: []report.Finding{egressOpen("a", "n3", false)}}, runner.FullScope())
	if len(probed.Findings) != 2 || probed.Scanned != 7 || probed.Findings[1].Check != "drift.pod.runtime-class" {
		t.Errorf("a full probe without drift: %d findings %v, scanned %d; want its own and the last drift's", len(probed.Findings), probed.Findings, probed.Scanned)
	}
}

// openSeriesOf is where the metrics of run say egress is unexpectedly open
// (namespace/NS/node/NODE, unsorted).
func openSeriesOf(t *testing.T, run report.Run) []string {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := report.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(run, time.Now())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var openSeries []string
	for _, mf := range mfs {
		if mf.GetName() != report.MetricEgressUnexpectedOpen {
			continue
		}
		for _, s := range mf.GetMetric() {
			if s.GetGauge().GetValue() > 0 {
				l := map[string]string{}
				for _, lp := range s.GetLabel() {
					l[lp.GetName()] = lp.GetValue()
				}
				openSeries = append(openSeries, "namespace/"+l["namespace"]+"/node/"+l["node"])
			}
		}
	}
	return openSeries
}

// TestWithDrift: the drift phase run after a targeted cycle's probe
// verdict replaces the drift findings, count and phase, and nothing else;
// a drift run with no phase (no drift configured) changes nothing.
func TestWithDrift(t *testing.T) {
	shown := runner.Merge(report.Run{
		Findings: []report.Finding{{Check: "drift.pod.runtime-class", Target: "pod/b/x", Namespace: "b", Status: report.Fail}},
		Scanned:  7, Phases: map[string]float64{"drift": 1},
	}, report.Run{Findings: []report.Finding{egressOpen("a", "n1", true)}, Phases: map[string]float64{"probe": 2}, Seconds: 2}, runner.NamespaceScope("a"))
	drift := report.Run{Findings: []report.Finding{{Check: "drift.netpol.egress-open", Target: "networkpolicy/a/allow-all", Namespace: "a", Status: report.Fail}},
		Scanned: 8, Phases: map[string]float64{"drift": 0.5}, Notes: []string{"Cilium CRDs are not installed"}}
	got := runner.WithDrift(shown, drift)
	var checks []string
	for _, f := range got.Findings {
		checks = append(checks, f.Check)
	}
	if strings.Join(checks, " ") != "egress.must-fail drift.netpol.egress-open" {
		t.Errorf("findings %v, want the probe's and the new drift's", checks)
	}
	if got.Scanned != 8 || got.Phases["drift"] != 0.5 || got.Phases["probe"] != 2 || got.Seconds != 2.5 {
		t.Errorf("scanned %d, phases %v, seconds %v", got.Scanned, got.Phases, got.Seconds)
	}
	if slices.ContainsFunc(got.Notes, func(n string) bool { return strings.HasPrefix(n, "drift: the findings of the last cycle") }) || !slices.Contains(got.Notes, "Cilium CRDs are not installed") {
		t.Errorf("notes %q", got.Notes)
	}
	if same := runner.WithDrift(shown, report.Run{}); len(same.Findings) != len(shown.Findings) || same.Scanned != 7 {
		t.Error("a drift run without a drift phase changed the run")
	}
}
