package report_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
)

// fleetRun is one cycle over n nodes in each of the policy's namespaces:
// every check of the catalogue and every egress attempt of the policy's
// plan on every node, as the kube backend reports them. broken(node)
// fails identity.uid and opens one must-fail destination on that node.
func fleetRun(t *testing.T, n int, broken func(i int) bool) (report.Run, int) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	p, _, err := policy.LoadFile(filepath.Join(filepath.Dir(file), "..", "fixtures", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// One node's findings: check and subject.
	var perNode []report.Finding
	for _, c := range probes.Catalogue() {
		switch {
		case c.Area() == "egress":
			continue // below, from the plan
		case c.ID == "caps.sets":
			for _, set := range []string{"CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"} {
				perNode = append(perNode, report.Finding{Check: c.ID, Subject: set})
			}
		case strings.HasPrefix(c.ID, "fs."):
			for _, w := range p.Spec.Filesystem.Writable {
				perNode = append(perNode, report.Finding{Check: c.ID, Subject: w})
			}
		default:
			perNode = append(perNode, report.Finding{Check: c.ID})
		}
	}
	plan, planned := probes.PlanEgress(p.Spec.Egress)
	for _, a := range plan {
		perNode = append(perNode, report.Finding{Check: a.Check, Subject: a.Subject, Class: "timeout", Role: probes.RoleOf(a.Check)})
	}
	perNode = append(perNode, planned...)
	pairs := map[string]bool{}
	for _, f := range perNode {
		pairs[f.Check+"\x00"+f.Subject] = true
	}
	run := report.Run{Policy: p.Metadata.Name, Version: "test", Backend: "kube", StartedAt: time.Unix(0, 0), Seconds: 60,
		Phases: map[string]float64{"probe": 50, "drift": 10}, Scanned: 5, DeclaredNamespaces: len(p.Spec.Namespaces)}
	for _, ns := range p.Spec.Namespaces {
		for i := 0; i < n; i++ {
			where := report.Location{Namespace: ns, Node: fmt.Sprintf("node-%04d", i)}
			for _, f := range perNode {
				f.Target, f.Where, f.Namespace, f.Status = where.String(), where, ns, report.Pass
				if broken(i) && (f.Check == "identity.uid" || (f.Check == "egress.must-fail" && !strings.Contains(f.Subject, "proxy"))) {
					f.Status, f.Class = report.Fail, report.ClassAnswered
				}
				run.Findings = append(run.Findings, f)
			}
		}
	}
	return run, len(pairs)
}

// series gathers what one run exposes: the number of series per metric
// and the series themselves by name.
func series(t *testing.T, run report.Run, detail int) (map[string]int, map[string][]map[string]string, map[string][]float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := report.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if detail != report.DefaultNodeDetail {
		m.SetNodeDetail(detail)
	}
	m.Observe(run, time.Unix(100, 0))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	count, labels, values := map[string]int{}, map[string][]map[string]string{}, map[string][]float64{}
	for _, fam := range fams {
		for _, mt := range fam.Metric {
			count[fam.GetName()]++
			l := map[string]string{}
			for _, lp := range mt.Label {
				l[lp.GetName()] = lp.GetValue()
			}
			labels[fam.GetName()] = append(labels[fam.GetName()], l)
			v := mt.GetGauge().GetValue()
			if mt.Counter != nil {
				v = mt.GetCounter().GetValue()
			}
			values[fam.GetName()] = append(values[fam.GetName()], v)
		}
	}
	return count, labels, values
}

func total(c map[string]int) int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// TestMetricsSeriesBound: the bound docs/metrics.md documents. With N
// nodes, S sandbox namespaces and C (check, target) pairs per probe
// location, a run over more than DefaultNodeDetail nodes exposes at most
// 2·C·S + 256 + 3·N·S + fixed series (check_success without a node and
// check_failed_nodes per pair, at most 256 failing nodes named, the three
// egress gauges per node, the run's own gauges) instead of C·N·S; the
// egress gauges that page keep every node, and a broken node is named.
func TestMetricsSeriesBound(t *testing.T) {
	const fixed = 20 // up, info, durations, timestamps, runs_total{result}, …
	one := func(i int) bool { return i == 417 }
	run, c := fleetRun(t, 1000, one)
	s := 1
	count, labels, values := series(t, run, report.DefaultNodeDetail)
	bound := 2*c*s + 256 + 3*1000*s + fixed
	t.Logf("1,000 nodes × %d (check, target) pairs: %d series (bound %d; one series per node and pair would be %d)", c, total(count), bound, c*1000*s)
	if total(count) > bound {
		t.Errorf("%d series, over the bound %d: %v", total(count), bound, count)
	}
	if got := count[report.MetricEgressUnexpectedOpen]; got != 1000*s {
		t.Errorf("%s: %d series, want one per node (%d)", report.MetricEgressUnexpectedOpen, got, 1000*s)
	}
	checkOneFailingNode(t, labels, values)

	// The whole fleet broken: still bounded, 256 nodes named, the rest folded.
	run, _ = fleetRun(t, 1000, func(int) bool { return true })
	count, labels, values = series(t, run, report.DefaultNodeDetail)
	if total(count) > bound {
		t.Errorf("fleet-wide failure: %d series, over the bound %d", total(count), bound)
	}
	namedNodes, folded := 0, 0
	for i, l := range labels[report.MetricCheckSuccess] {
		if values[report.MetricCheckSuccess][i] == 0 {
			if l["node"] != "" {
				namedNodes++
			} else {
				folded++
			}
		}
	}
	if namedNodes != 256 || folded == 0 {
		t.Errorf("fleet-wide failure: %d failing series name a node (want 256), %d fold the rest (want > 0)", namedNodes, folded)
	}

	// At the node detail and below: a series per node and pair, as before.
	run, _ = fleetRun(t, report.DefaultNodeDetail, one)
	count, _, _ = series(t, run, report.DefaultNodeDetail)
	if got, want := count[report.MetricCheckSuccess], c*report.DefaultNodeDetail*s; got != want {
		t.Errorf("%d nodes: %d check_success series, want %d (one per node and pair)", report.DefaultNodeDetail, got, want)
	}
	if count[report.MetricCheckFailedNodes] != 0 {
		t.Errorf("%d nodes: check_failed_nodes present", report.DefaultNodeDetail)
	}
	// And an operator can ask for every node's series whatever the size.
	run, _ = fleetRun(t, 300, one)
	count, _, _ = series(t, run, -1)
	if got, want := count[report.MetricCheckSuccess], c*300*s; got != want {
		t.Errorf("node detail -1, 300 nodes: %d check_success series, want %d", got, want)
	}
}

// checkOneFailingNode: with node-0417 alone failing, egress is open there
// alone, identity.uid's failing series names the node and no passing one
// does, and check_failed_nodes counts it.
func checkOneFailingNode(t *testing.T, labels map[string][]map[string]string, values map[string][]float64) {
	t.Helper()
	opened := ""
	for i, l := range labels[report.MetricEgressUnexpectedOpen] {
		if values[report.MetricEgressUnexpectedOpen][i] > 0 {
			opened += l["node"] + " "
		}
	}
	if opened != "node-0417 " {
		t.Errorf("egress reopened on %q, want node-0417 alone", opened)
	}
	named := false
	for i, l := range labels[report.MetricCheckSuccess] {
		v := values[report.MetricCheckSuccess][i]
		switch {
		case l["check"] == "identity.uid" && l["node"] == "node-0417":
			named = v == 0
		case l["node"] != "" && v != 0:
			t.Errorf("a passing check kept its node: %v", l)
		}
	}
	if !named {
		t.Error("identity.uid failing on node-0417 is not a series naming the node")
	}
	for i, l := range labels[report.MetricCheckFailedNodes] {
		want := 0.0
		if l["check"] == "identity.uid" {
			want = 1
		}
		if l["check"] == "identity.uid" || l["check"] == "caps.sets" {
			if got := values[report.MetricCheckFailedNodes][i]; got != want {
				t.Errorf("%s %v = %v, want %v", report.MetricCheckFailedNodes, l, got, want)
			}
		}
	}
}

// TestMetricsSeriesBoundUnprobed: sandprobe_node_unprobed adds at most one
// series per node and namespace, and only for the nodes that were not
// probed: 10 cordoned nodes of 1,000 add 10; a fleet where no node could
// be probed stays within 2·C·S + 256 + 4·N·S + fixed.
func TestMetricsSeriesBoundUnprobed(t *testing.T) {
	const fixed = 20
	run, c := fleetRun(t, 1000, func(int) bool { return false })
	s := 1
	bound := 2*c*s + 256 + 4*1000*s + fixed
	cordon := func(run *report.Run, node func(i int) bool) {
		kept := run.Findings[:0]
		seen := map[string]bool{}
		for _, f := range run.Findings {
			var i int
			fmt.Sscanf(report.NodeLabel(f), "node-%d", &i)
			if !node(i) {
				kept = append(kept, f)
				continue
			}
			if !seen[f.Target] {
				seen[f.Target] = true
				kept = append(kept, report.Finding{Check: report.CheckProbeRun, Subject: "node-cordoned", Target: f.Target, Where: f.Where, Status: report.Error})
			}
		}
		run.Findings = kept
	}
	cordon(&run, func(i int) bool { return i%100 == 7 })
	count, labels, _ := series(t, run, report.DefaultNodeDetail)
	t.Logf("1,000 nodes, 10 cordoned: %d series (bound %d), %d of %s", total(count), bound, count[report.MetricNodeUnprobed], report.MetricNodeUnprobed)
	if got := count[report.MetricNodeUnprobed]; got != 10 {
		t.Errorf("%s: %d series, want 10 (the cordoned nodes alone): %v", report.MetricNodeUnprobed, got, labels[report.MetricNodeUnprobed])
	}
	for _, l := range labels[report.MetricNodeUnprobed] {
		if l["reason"] != "node-cordoned" || l["namespace"] == "" || !strings.HasSuffix(l["node"], "07") {
			t.Errorf("%s %v", report.MetricNodeUnprobed, l)
		}
	}
	if total(count) > bound {
		t.Errorf("%d series, over the bound %d", total(count), bound)
	}
	run, _ = fleetRun(t, 1000, func(int) bool { return false })
	cordon(&run, func(int) bool { return true })
	count, _, _ = series(t, run, report.DefaultNodeDetail)
	t.Logf("1,000 nodes, every one unprobed: %d series (bound %d)", total(count), bound)
	if got := count[report.MetricNodeUnprobed]; got != 1000*s {
		t.Errorf("%s: %d series, want %d", report.MetricNodeUnprobed, got, 1000*s)
	}
	if total(count) > bound {
		t.Errorf("%d series, over the bound %d", total(count), bound)
	}
}
