package manifests

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/sandprobe/sandprobe/internal/catalogue"
	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/report"
)

const (
	dashboardDir  = "components/grafana-dashboard"
	dashboardFile = dashboardDir + "/sandprobe-dashboard.json"
)

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Title      string
	UID        string
	Templating struct {
		List []struct {
			Name, Type string
			AllValue   string `json:"allValue"`
		}
	}
	Panels []struct {
		ID          int
		Title       string
		Type        string
		Description string
		Datasource  struct{ Type, UID string }
		GridPos     struct{ X, Y, W, H int } `json:"gridPos"`
		Targets     []struct {
			Expr       string
			RefID      string `json:"refId"`
			Datasource struct{ Type, UID string }
		}
	}
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// TestDashboardShape: the dashboard imports into any Grafana with a
// Prometheus data source (every query on the ${datasource} variable, the
// cluster variable with an All that matches series without the label),
// panels have unique ids, a description and a place, and every query reads
// metrics sandprobe exposes.
func TestDashboardShape(t *testing.T) {
	d := loadDashboard(t)
	if d.UID != "sandprobe" || d.Title == "" {
		t.Errorf("uid %q title %q", d.UID, d.Title)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Name == "cluster" && v.AllValue != ".*" {
			t.Errorf("cluster variable: allValue %q, want .* (matches a Prometheus without a cluster label too)", v.AllValue)
		}
	}
	if vars["datasource"] != "datasource" || vars["cluster"] != "query" {
		t.Errorf("template variables %v, want datasource and cluster", vars)
	}
	emitted := emittedSeries(t)
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] || p.ID == 0 {
			t.Errorf("panel %q: id %d not unique", p.Title, p.ID)
		}
		ids[p.ID] = true
		if strings.TrimSpace(p.Description) == "" || p.GridPos.W == 0 || p.GridPos.H == 0 || len(p.Targets) == 0 {
			t.Errorf("panel %q: description, gridPos and targets are required", p.Title)
		}
		for _, tg := range append([]struct{ Type, UID string }{p.Datasource}, datasources(p.Targets)...) {
			if tg.Type != "prometheus" || tg.UID != "${datasource}" {
				t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, tg)
			}
		}
		for _, tg := range p.Targets {
			if tg.RefID == "" || !strings.Contains(tg.Expr, `cluster=~"$cluster"`) {
				t.Errorf("panel %q: target %q lacks a refId or the cluster filter", p.Title, tg.Expr)
			}
			checkQueriedLabels(t, p.Title, tg.Expr, emitted)
		}
	}
	for _, title := range panelTitles(d) {
		if _, ok := panelClaims[title]; !ok {
			t.Errorf("panel %q: no claim in panelClaims, so TestDashboardQueries does not test it", title)
		}
	}
}

func datasources(targets []struct {
	Expr       string
	RefID      string `json:"refId"`
	Datasource struct{ Type, UID string }
}) []struct{ Type, UID string } {
	var out []struct{ Type, UID string }
	for _, tg := range targets {
		out = append(out, tg.Datasource)
	}
	return out
}

func panelTitles(d dashboard) []string {
	var out []string
	for _, p := range d.Panels {
		out = append(out, p.Title)
	}
	return out
}

// emittedSeries are the metrics sandprobe's exporter really emits, each with
// its label names (and cluster, the push's grouping label), gathered from
// report.Metrics after a run that has one of everything the dashboard
// shows: a passing and a failing check on nodes of a pool, a reopened, an
// unreachable and an unproven egress destination, an unprobed node, drift.
func emittedSeries(t *testing.T) map[string]map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := report.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	const w1, w2 = "namespace/sandboxes/node/worker-1", "namespace/sandboxes/node/worker-2"
	// Where a finding was made is typed (the runner sets it); the target
	// is its string form.
	at1, at2 := report.Location{Namespace: "sandboxes", Node: "worker-1"}, report.Location{Namespace: "sandboxes", Node: "worker-2"}
	m.Observe(report.Run{Findings: []report.Finding{{Check: "identity.uid", Target: w1, Where: at1, Status: report.Pass}}}, time.Now())
	m.Observe(report.Run{Policy: "p", Version: "v", Seconds: 3, Phases: map[string]float64{"probe": 2, "drift": 1}, DeclaredNamespaces: 1, Findings: []report.Finding{
		{Check: "identity.uid", Target: w1, Where: at1, Namespace: "sandboxes", Status: report.Pass, Severity: report.High},
		{Check: "escape.runtime-socket", Subject: "/run/containerd/containerd.sock", Target: w1, Where: at1, Namespace: "sandboxes", Status: report.Fail, Severity: report.Critical},
		{Check: "egress.must-fail", Subject: "10.0.0.1:443", Target: w1, Where: at1, Namespace: "sandboxes", Status: report.Fail, Class: report.ClassAnswered, Severity: report.Critical},
		{Check: "egress.must-fail", Subject: "10.0.0.2:443", Target: w1, Where: at1, Namespace: "sandboxes", Status: report.Inconclusive, Deny: report.DenyUnproven, Severity: report.Critical},
		{Check: "egress.allowed", Subject: "api.example:443", Target: w1, Where: at1, Namespace: "sandboxes", Status: report.Fail, Severity: report.Medium},
		{Check: "drift.pod.runtime-class", Target: "pod/sandboxes/a", Namespace: "sandboxes", Status: report.Fail, Severity: report.High},
		{Check: report.CheckProbeRun, Subject: "node-cordoned", Target: w2, Where: at2, Namespace: "sandboxes", Status: report.Error},
	}}, time.Now())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]bool{}
	for _, mf := range mfs {
		names := map[string]bool{"cluster": true}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				names[lp.GetName()] = true
			}
		}
		out[mf.GetName()] = names
	}
	return out
}

var (
	// grouping is a PromQL aggregation's by (...) clause.
	grouping = regexp.MustCompile(`\bby\s*\(([^)]*)\)`)
	// selector is a metric name and its {...} matchers.
	selector = regexp.MustCompile(`\b(sandprobe_[a-z_]+)\s*(?:\{([^}]*)\})?`)
	matcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
)

// checkQueriedLabels fails a panel's query that names a metric the exporter
// does not emit, matches on a label the metric does not carry, or groups
// by a label none of its metrics carries (a renamed label must not leave a
// panel silently empty).
func checkQueriedLabels(t *testing.T, panel, expr string, emitted map[string]map[string]bool) {
	t.Helper()
	queried := map[string]bool{}
	for _, sm := range selector.FindAllStringSubmatch(expr, -1) {
		labels, ok := emitted[sm[1]]
		if !ok {
			t.Errorf("panel %q: queries %s, which sandprobe does not emit", panel, sm[1])
			continue
		}
		for k := range labels {
			queried[k] = true
		}
		for _, mm := range matcher.FindAllStringSubmatch(sm[2], -1) {
			if !labels[mm[1]] {
				t.Errorf("panel %q: matches %s on label %s, which it does not carry", panel, sm[1], mm[1])
			}
		}
	}
	for _, g := range grouping.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !queried[l] {
				t.Errorf("panel %q: groups by %s, which no metric it queries carries", panel, l)
			}
		}
	}
}

// TestDashboardShowsWhatPages: the dashboard has a panel for each thing that
// pages: failing checks by node and severity, unprobed nodes, unproven
// denies, reopened egress and drift by severity.
func TestDashboardShowsWhatPages(t *testing.T) {
	d := loadDashboard(t)
	want := map[string][]string{
		report.MetricCheckSuccess:         {"node", "severity"},
		report.MetricNodeUnprobed:         {"node", "reason"},
		report.MetricEgressDeniesUnproven: {"node"},
		report.MetricEgressUnexpectedOpen: {"node"},
		report.MetricDriftFindings:        {"rule", "severity"},
	}
	for metric, by := range want {
		found := false
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				g := grouping.FindStringSubmatch(tg.Expr)
				if !strings.Contains(tg.Expr, metric) || g == nil {
					continue
				}
				all := true
				for _, l := range by {
					all = all && slices.Contains(strings.Split(strings.ReplaceAll(g[1], " ", ""), ","), l)
				}
				found = found || all
			}
		}
		if !found {
			t.Errorf("no panel shows %s by %v", metric, by)
		}
	}
}

// TestDashboardConfigMap: the component makes a ConfigMap with the label
// Grafana's sidecar watches, carrying the dashboard file byte for byte.
func TestDashboardConfigMap(t *testing.T) {
	overlay := t.TempDir()
	base, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(overlay, base)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(fmt.Sprintf(
		"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%s]\ncomponents: [%s]\n",
		rel, filepath.Join(rel, dashboardDir))), 0o644)
	objs, _ := documents(t, kustomize(t, overlay))
	cm, ok := objs["ConfigMap sandprobe-system/sandprobe-grafana-dashboard"]
	if !ok {
		t.Fatalf("no dashboard ConfigMap in the overlay")
	}
	var c struct {
		Metadata struct{ Labels map[string]string }
		Data     map[string]string
	}
	b, _ := yaml.Marshal(cm)
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(dashboardFile)
	if c.Metadata.Labels["grafana_dashboard"] != "1" || c.Data["sandprobe-dashboard.json"] != string(want) {
		t.Fatalf("ConfigMap labels %v, data keys %v: want grafana_dashboard=1 and the dashboard file", c.Metadata.Labels, keys(c.Data))
	}
	baseObjs, _ := documents(t, kustomize(t, "."))
	if _, inBase := baseObjs["ConfigMap sandprobe-system/sandprobe-grafana-dashboard"]; inBase {
		t.Error("the base carries the dashboard: it is an opt-in component")
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// labRuns are the runs the dashboard is tested on, by the cluster label
// they were pushed under, each with its JSON report and when it was pushed.
type labRuns map[string]struct {
	run                   report.Run
	pushedAfter, pushedBy time.Time
}

// sample is one series of an instant query.
type sample struct {
	labels map[string]string
	value  float64
}

// panelClaims says, for each panel, what its query must return over the
// real runs: each is checked at every cluster (the $cluster variable set to
// it) and at All.
var panelClaims = map[string]func(t *testing.T, runs labRuns, cluster string, got []sample){
	// Per probe location, the must-fail destinations that answered: the
	// reopened lab's node appears with exactly the run's open findings; a
	// healthy node is there with 0; an outage is not reopened egress.
	"Egress reopened, by node": func(t *testing.T, runs labRuns, cluster string, got []sample) {
		perNode(t, runs, cluster, got, report.UnexpectedlyOpen, map[string]bool{"reopened": true})
	},
	"Allowed hosts unreachable, by node": func(t *testing.T, runs labRuns, cluster string, got []sample) {
		perNode(t, runs, cluster, got, func(f report.Finding) bool {
			return f.Check == report.CheckEgressAllowed && f.Status == report.Fail
		}, map[string]bool{"outage": true})
	},
	// Per probe location, the denies nobody could prove, exactly as the
	// run's report counts them: the run with no control vantage has every
	// direct deny unproven; with the allowed hosts down, a few go unproven
	// too (the report says which); the healthy and the reopened runs prove
	// theirs (0).
	"Denies unproven, by node": func(t *testing.T, runs labRuns, cluster string, got []sample) {
		perNode(t, runs, cluster, got, func(f report.Finding) bool {
			return f.Deny == report.DenyUnproven
		}, map[string]bool{"unproven": true, "outage": true})
		if r, ok := runs["unproven"]; ok && (cluster == ".*" || cluster == "unproven") {
			direct := 0
			for _, f := range r.run.Findings {
				if f.Deny == report.DenyUnproven && !strings.HasSuffix(f.Subject, " via proxy") {
					direct++
				}
			}
			if direct < 10 {
				t.Errorf("the run without a control has only %d direct denies unproven", direct)
			}
		}
	},
	// Only the rules with findings, per namespace, with their counts; the
	// clean files list nothing.
	"Drift findings, by rule, namespace and severity": func(t *testing.T, runs labRuns, cluster string, got []sample) {
		want := map[string]float64{}
		for c, r := range runs {
			if cluster != ".*" && c != cluster {
				continue
			}
			for _, f := range r.run.Findings {
				if strings.HasPrefix(f.Check, "drift.") && (f.Status == report.Fail || f.Status == report.Inconclusive) {
					want[c+" "+f.Check+" "+f.Namespace]++
				}
			}
		}
		have := map[string]float64{}
		for _, s := range got {
			have[s.labels["cluster"]+" "+s.labels["rule"]+" "+s.labels["namespace"]] = s.value
			if sev := s.labels["severity"]; sev == "" || report.Severity(sev).Rank() < 0 {
				t.Errorf("cluster %s rule %s: severity %q", cluster, s.labels["rule"], sev)
			}
		}
		if fmt.Sprint(have) != fmt.Sprint(want) {
			t.Errorf("cluster %s: %v, want %v", cluster, have, want)
		}
		if cluster == "drift-bad" && want["drift-bad drift.pod.privileged sandboxes"] != 1 {
			t.Errorf("the lazy pods' privileged pod is not counted: %v", want)
		}
	},
	// Per probe location and severity, the checks that did not pass, as
	// the run's report lists them (each check and subject once): the
	// reopened lab's node has its answered destinations at their severity,
	// the pool's broken node its critical runtime socket and medium
	// seccomp, and nothing for the healthy nodes and runs.
	"Failing checks, by node and severity": func(t *testing.T, runs labRuns, cluster string, got []sample) {
		want := map[string]float64{}
		for c, r := range runs {
			if (cluster != ".*" && clusterLabel(c) != cluster) || c == "stale-ok" || c == "stale-failed" {
				continue
			}
			seen := map[string]bool{}
			for _, f := range r.run.Findings {
				if strings.HasPrefix(f.Check, "drift.") || f.Status == report.Pass || f.Status == report.Skip {
					continue
				}
				series := f.Check + " " + f.Subject + " " + report.NodeLabel(f) + " " + f.Namespace
				if !seen[series] {
					seen[series] = true
					want[clusterLabel(c)+" "+report.NodeLabel(f)+" "+f.Namespace+" "+string(f.Severity)]++
				}
			}
		}
		have := map[string]float64{}
		for _, s := range got {
			have[s.labels["cluster"]+" "+s.labels["node"]+" "+s.labels["namespace"]+" "+s.labels["severity"]] = s.value
		}
		if fmt.Sprint(have) != fmt.Sprint(want) {
			t.Errorf("cluster %s: %v, want %v", cluster, have, want)
		}
		if (cluster == ".*" || cluster == "pool") && (have["pool worker-2 sandboxes critical"] != 1 || have["pool worker-2 sandboxes medium"] != 1) {
			t.Errorf("the pool's broken node: %v", have)
		}
		if (cluster == ".*" || cluster == "reopened") && have["reopened "+labNode(runs)+"  critical"] == 0 {
			t.Errorf("the reopened lab's answered destination is not a failing critical check: %v", have)
		}
	},
	// The pool nodes the run could not probe, with the reason; nothing for
	// a run that probed every node.
	"Unprobed nodes": func(t *testing.T, runs labRuns, cluster string, got []sample) {
		want := map[string]bool{}
		for c, r := range runs {
			if (cluster != ".*" && clusterLabel(c) != cluster) || c == "stale-ok" || c == "stale-failed" {
				continue
			}
			for _, f := range r.run.Findings {
				if report.NodeUnprobed(f) {
					want[clusterLabel(c)+" "+report.NodeLabel(f)+" "+f.Namespace+" "+f.Subject] = true
				}
			}
		}
		have := map[string]bool{}
		for _, s := range got {
			have[s.labels["cluster"]+" "+s.labels["node"]+" "+s.labels["namespace"]+" "+s.labels["reason"]] = s.value == 1
		}
		if fmt.Sprint(have) != fmt.Sprint(want) {
			t.Errorf("cluster %s: %v, want %v", cluster, have, want)
		}
		if (cluster == ".*" || cluster == "pool") && !have["pool worker-3 sandboxes node-cordoned"] {
			t.Errorf("the pool's cordoned node is not listed: %v", have)
		}
	},
	// Seconds since the last conformant run (exit 0): about the time since
	// its push, and for the cluster whose last run could not run, since the
	// run before (the CronJob's metrics carry the last success across); none
	// for a cluster that was never conformant.
	"Probe freshness": func(t *testing.T, runs labRuns, cluster string, got []sample) {
		for c, r := range runs {
			if (cluster != ".*" && c != cluster) || c == "stale-failed" {
				continue
			}
			ref := r
			if c == "stale" {
				ref = runs["stale-ok"]
			}
			if c == "stale-ok" {
				continue // the same cluster label as stale
			}
			v, ok := valueOf(got, map[string]string{"cluster": clusterLabel(c)})
			if !ref.run.Succeeded() {
				// Never conformant in this lab: no success to count from.
				if ok {
					t.Errorf("cluster %s: freshness %.1fs from a run that was no success (exit %d)", c, v, ref.run.ExitCode())
				}
				continue
			}
			lo, hi := time.Since(ref.pushedBy).Seconds()-2, time.Since(ref.pushedAfter).Seconds()+2
			if !ok || v < lo || v > hi {
				t.Errorf("cluster %s: freshness %.1fs (present %v), want %.1f–%.1fs", c, v, ok, lo, hi)
			}
			if c == "stale" && v < time.Since(runs["stale-failed"].pushedAfter).Seconds() {
				t.Errorf("cluster stale: %.1fs: counted from the run that could not check", v)
			}
		}
	},
	"Could check": func(t *testing.T, runs labRuns, cluster string, got []sample) {
		for c := range runs {
			if (cluster != ".*" && clusterLabel(c) != cluster) || c == "stale-ok" || c == "stale-failed" {
				continue
			}
			want := 1.0
			if c == "stale" {
				want = 0
			}
			if v, ok := valueOf(got, map[string]string{"cluster": c}); !ok || v != want {
				t.Errorf("cluster %s: %v (present %v), want %v", c, v, ok, want)
			}
		}
	},
	// Per phase and in total, what the run's own report says it took.
	"Run duration": func(t *testing.T, runs labRuns, cluster string, got []sample) {
		for c, r := range runs {
			if (cluster != ".*" && clusterLabel(c) != cluster) || c == "stale-ok" {
				continue
			}
			phases := map[string]float64{"total": r.run.Seconds}
			for p, s := range r.run.Phases {
				phases[p] = s
			}
			for p, s := range phases {
				v, ok := valueOf(got, map[string]string{"cluster": clusterLabel(c), "phase": p})
				if !ok || math.Abs(v-s) > 1e-6 {
					t.Errorf("cluster %s phase %s: %v (present %v), want %v", c, p, v, ok, s)
				}
			}
		}
	},
}

// labNode is the node label of the lab's local runs.
func labNode(runs labRuns) string {
	for _, f := range runs["reopened"].run.Findings {
		return report.NodeLabel(f)
	}
	return ""
}

// poolRun is a Kubernetes run over a pool of three nodes, as the kube
// backend reports it: worker-1 healthy, worker-2 with its container
// runtime socket reachable (critical) and no seccomp filter (medium),
// worker-3 cordoned (no probe reached it).
func poolRun(now time.Time) report.Run {
	r := report.Run{Policy: "lab", Version: "test", Backend: "kube", StartedAt: now, Seconds: 4, Phases: map[string]float64{"probe": 4}, DeclaredNamespaces: 1}
	for _, n := range []string{"worker-1", "worker-2"} {
		at := "namespace/sandboxes/node/" + n
		where := report.Location{Namespace: "sandboxes", Node: n}
		r.Findings = append(r.Findings,
			report.Finding{Check: "identity.uid", Target: at, Where: where, Namespace: "sandboxes", Status: report.Pass, Severity: report.High},
			report.Finding{Check: "egress.must-fail", Subject: "10.99.20.10:443", Target: at, Where: where, Namespace: "sandboxes", Status: report.Pass, Class: "refused", Deny: report.DenyProven, Severity: report.Critical})
	}
	w2 := "namespace/sandboxes/node/worker-2"
	at2 := report.Location{Namespace: "sandboxes", Node: "worker-2"}
	r.Findings = append(r.Findings,
		report.Finding{Check: "escape.runtime-socket", Subject: "/run/containerd/containerd.sock", Target: w2, Where: at2, Namespace: "sandboxes", Status: report.Fail, Severity: report.Critical},
		report.Finding{Check: "caps.seccomp", Target: w2, Where: at2, Namespace: "sandboxes", Status: report.Fail, Severity: report.Medium},
		report.Finding{Check: report.CheckProbeRun, Subject: "node-cordoned", Target: "namespace/sandboxes/node/worker-3", Where: report.Location{Namespace: "sandboxes", Node: "worker-3"}, Namespace: "sandboxes", Status: report.Error, Severity: report.High},
	)
	return r
}

// pushPool pushes poolRun as cluster "pool": a pool of nodes with one
// broken and one cordoned, through the exporter and the push the CLI uses
// (the lab's local backend has no nodes to leave unprobed).
func pushPool(t *testing.T, gw string, runs labRuns) {
	t.Helper()
	pool := poolRun(time.Now())
	reg := prometheus.NewRegistry()
	m, err := report.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	m.Observe(pool, time.Now())
	if err := report.PushMetrics(context.Background(), http.DefaultClient, gw, "pool", reg); err != nil {
		t.Fatal(err)
	}
	runs["pool"] = struct {
		run                   report.Run
		pushedAfter, pushedBy time.Time
	}{pool, after, time.Now()}
}

// clusterLabel is the cluster a run was pushed as: the stale cluster's two
// runs share one.
func clusterLabel(run string) string {
	if strings.HasPrefix(run, "stale") {
		return "stale"
	}
	return run
}

// perNode checks a per-node count against the runs' findings: every probe
// location of every run (of the cluster) is present, with exactly the
// findings count that the predicate selects, which is above zero exactly for
// the runs in regressed.
func perNode(t *testing.T, runs labRuns, cluster string, got []sample, count func(report.Finding) bool, regressed map[string]bool) {
	t.Helper()
	for c, r := range runs {
		if (cluster != ".*" && c != cluster) || r.run.Backend != "local" || c == "stale-ok" || c == "stale" {
			continue
		}
		want := map[string]float64{}
		for _, f := range r.run.Findings {
			if report.Area(f.Check) != "egress" {
				continue
			}
			node := report.NodeLabel(f)
			want[node] += 0
			if count(f) {
				want[node]++
			}
		}
		for node, n := range want {
			v, ok := valueOf(got, map[string]string{"cluster": c, "node": node})
			if !ok || v != n {
				t.Errorf("cluster %s node %s: %v (present %v), want %v", c, node, v, ok, n)
			}
			if (n > 0) != regressed[c] {
				t.Errorf("cluster %s node %s: %v: the lab runs did not regress as planned", c, node, n)
			}
		}
	}
}

func valueOf(got []sample, labels map[string]string) (float64, bool) {
next:
	for _, s := range got {
		for k, v := range labels {
			if s.labels[k] != v {
				continue next
			}
		}
		return s.value, true
	}
	return 0, false
}

// TestDashboardQueries runs every panel's query against a real Prometheus
// that scraped a real Pushgateway, to which sandprobe pushed real runs, the
// way the CronJob does (--pushgateway, one cluster label each): the local
// backend in the network lab healthy, with one CNI rule flushed (egress
// reopened), with the allowed hosts down and with no control vantage
// (every deny unproven); drift over clean and lazy
// files; and a cluster whose last run could not check after one that could.
// Each query returns what its panel claims, per cluster and for All.
func TestDashboardQueries(t *testing.T) {
	d := loadDashboard(t)
	lab := testenv.Lab(t)
	bin := testenv.Binary(t)
	gw := testenv.Pushgateway(t)
	labPolicy := filepath.Join(testenv.ModuleRoot(t), "fixtures", "lab-policy.yaml")
	driftPolicy := filepath.Join(testenv.ModuleRoot(t), "fixtures", "policy.yaml")
	labRun := []string{"run", "--backend", "local", "--netns", "sp-sandbox", "--control-netns", "sp-control", "--policy", labPolicy}
	runs := labRuns{}
	push := func(name string, wantExit int, args ...string) {
		t.Helper()
		jsonFile := filepath.Join(t.TempDir(), "run.json")
		after := time.Now()
		code, stdout, stderr := testenv.Exec(t, bin, append(args, "-o", "json", "--json", jsonFile, "--pushgateway", gw, "--cluster", clusterLabel(name))...)
		if code != wantExit {
			t.Fatalf("%s: exit %d, want %d\n%s\n%s", name, code, wantExit, stdout, stderr)
		}
		data, err := os.ReadFile(jsonFile)
		if err != nil {
			t.Fatal(err)
		}
		var r report.Run
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
		catalogue.Fill(r.Findings) // a report read back carries no roles
		runs[name] = struct {
			run                   report.Run
			pushedAfter, pushedBy time.Time
		}{r, after, time.Now()}
	}
	labDo := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(lab, args...).CombinedOutput(); err != nil {
			t.Fatalf("lab %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	push("stale-ok", 0, labRun...)
	push("healthy", 0, labRun...)
	labDo("break", "flush-rule", "deny-raw-reset")
	push("reopened", 1, labRun...)
	labDo("heal")
	labDo("break", "allowed-down")
	push("outage", 1, labRun...)
	labDo("heal")
	// The same sandbox with no control vantage: every direct deny holds
	// and none is proven (inconclusive, exit 1).
	push("unproven", 1, "run", "--backend", "local", "--netns", "sp-sandbox", "--policy", labPolicy)
	push("drift-clean", 0, "drift", "--policy", driftPolicy, "-f", filepath.Join(testenv.ModuleRoot(t), "fixtures", "drift", "hardened.yaml"))
	push("drift-bad", 1, "drift", "--policy", driftPolicy, "-f", filepath.Join(testenv.ModuleRoot(t), "fixtures", "drift", "pods.yaml"))
	push("stale-failed", 3, "run", "--backend", "local", "--netns", "sandprobe-no-such-netns", "--policy", labPolicy)
	// The "stale" cluster as Prometheus sees it is its last push.
	runs["stale"] = runs["stale-failed"]
	pushPool(t, gw, runs)

	prom := testenv.Prometheus(t, fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: pushgateway
    honor_labels: true
    static_configs: [{targets: [%q]}]
`, strings.TrimPrefix(gw, "http://")))
	clusters := []string{"healthy", "reopened", "outage", "unproven", "drift-clean", "drift-bad", "stale", "pool"}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := instantQuery(prom, `count by (cluster) (sandprobe_up)`)
		if err == nil && len(got) == len(clusters) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus has not scraped the %d clusters: %v %v", len(clusters), got, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	for _, p := range d.Panels {
		claim := panelClaims[p.Title]
		if claim == nil {
			t.Errorf("panel %q: no claim to test", p.Title)
			continue
		}
		t.Run(p.Title, func(t *testing.T) {
			for _, cluster := range append([]string{".*"}, clusters...) {
				for _, tg := range p.Targets {
					q := strings.ReplaceAll(tg.Expr, "$cluster", cluster)
					if strings.Contains(q, "$") {
						t.Fatalf("%q: a variable the test does not set", tg.Expr)
					}
					got, err := instantQuery(prom, q)
					if err != nil {
						t.Fatalf("%s: %v", q, err)
					}
					claim(t, runs, cluster, got)
				}
			}
		})
	}
}

// instantQuery evaluates a PromQL expression now through the HTTP API.
func instantQuery(prom, q string) ([]sample, error) {
	resp, err := http.Get(prom + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status, Error string
		Data          struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" || body.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: %s %s (%s)", q, body.Status, body.Error, body.Data.ResultType)
	}
	var out []sample
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %v", q, r.Value[1])
		}
		out = append(out, sample{labels: r.Metric, value: v})
	}
	return out, nil
}
