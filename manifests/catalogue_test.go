package manifests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sandprobe/sandprobe/internal/catalogue"
	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/report"
)

// failingRun is a run in which entry e fails the way it fails for real:
// a probe check on a node (a must-fail destination that answered), a
// drift rule on a pod, the runner's could-not-run as an error.
func failingRun(e catalogue.Entry) report.Run {
	f := report.Finding{Check: e.ID, Target: "node/worker-1", Where: report.Location{Node: "worker-1"}, Namespace: "sandboxes", Status: report.Fail, Severity: e.Severity, Role: e.Role}
	run := report.Run{Policy: "p", Version: "v", DeclaredNamespaces: 1}
	switch {
	case e.Source == catalogue.SourceDrift:
		f.Target = "pod/sandboxes/agent-1"
		run.Phases, run.Scanned = map[string]float64{"drift": 1}, 1
	case e.Source == catalogue.SourceRunner && e.ID != "parity.policies" && e.ID != "parity.runtime-class" && e.ID != "parity.node-pool" && e.ID != "parity.strays":
		f.Status = report.Error // probe.run, probe.truncated, control.vantage, drift.run: could not check
	default:
		f.Class = report.ClassAnswered
	}
	run.Findings = []report.Finding{f}
	if f.Status != report.Error {
		// Another node passed: the run could check.
		run.Findings = append(run.Findings, report.Finding{Check: "identity.uid", Target: "node/worker-2", Where: report.Location{Node: "worker-2"}, Namespace: "sandboxes", Status: report.Pass, Severity: report.High})
	}
	return run
}

// exposition is the run's series as promtool input lines (name{labels}),
// as sandprobe would expose them.
func exposition(t *testing.T, run report.Run) []string {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := report.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(run, time.Unix(1_800_000_000, 0))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				if l.GetValue() != "" {
					labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
			}
			v := s.GetGauge().GetValue()
			if mf.GetType() == dto.MetricType_COUNTER {
				v = s.GetCounter().GetValue()
			}
			out = append(out, fmt.Sprintf("%s{%s} %v", mf.GetName(), strings.Join(labels, ","), v))
		}
	}
	return out
}

var firedLine = regexp.MustCompile(`(?m)^\s*alertname: (\w+), time: (\w+),`)

// firedAlerts evaluates every alert against each entry's failing run with
// promtool: one test step of 10 minutes per entry, each alert expected
// silent, so promtool names every alert that fires and when. The staleness
// alert is left out: it fires on a missing success, which these runs are
// not about.
func firedAlerts(t *testing.T, entries []catalogue.Entry) map[string][]string {
	t.Helper()
	promtool := testenv.Promtool(t)
	_, rules := loadRules(t)
	var names []string
	for _, r := range rules {
		if !slices.Contains(names, r.Alert) && r.Alert != "SandboxProbeStale" {
			names = append(names, r.Alert)
		}
	}
	series := map[string][]string{} // series → value per step ("_" when absent)
	var order []string
	for i, e := range entries {
		for _, line := range exposition(t, failingRun(e)) {
			name, v, _ := strings.Cut(line, " ")
			if series[name] == nil {
				series[name] = slices.Repeat([]string{"_"}, len(entries))
				order = append(order, name)
			}
			series[name][i] = v
		}
	}
	var b strings.Builder
	abs, _ := filepath.Abs(rulesFile)
	fmt.Fprintf(&b, "rule_files: [%q]\nevaluation_interval: 10m\ntests:\n  - interval: 10m\n    input_series:\n", abs)
	for _, name := range order {
		fmt.Fprintf(&b, "      - series: '%s'\n        values: '%s'\n", name, strings.Join(series[name], " "))
	}
	b.WriteString("    alert_rule_test:\n")
	for i := range entries {
		for _, a := range names {
			fmt.Fprintf(&b, "      - eval_time: %dm\n        alertname: %s\n", i*10, a)
		}
	}
	file := filepath.Join(t.TempDir(), "catalogue_test.yml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command(promtool, "test", "rules", file).CombinedOutput()
	fired := map[string][]string{}
	for _, m := range firedLine.FindAllStringSubmatch(string(out), -1) {
		d, err := time.ParseDuration(m[2])
		if err != nil {
			t.Fatalf("promtool time %q: %v\n%s", m[2], err, out)
		}
		id := entries[int(d/(10*time.Minute))].ID
		fired[id] = append(fired[id], m[1])
	}
	if len(fired) == 0 {
		t.Fatalf("no alert fired for any entry:\n%s", out)
	}
	return fired
}

// alertSeverity is each alert's severity label; an alert with rules of
// both (SandboxDrift) counts as critical when a critical rule fires it,
// which firedCritical tells from the entry's severity.
func criticalAlerts(t *testing.T) map[string]bool {
	_, rules := loadRules(t)
	out := map[string]bool{}
	for _, r := range rules {
		out[r.Alert] = out[r.Alert] || r.Labels["severity"] == "critical"
	}
	return out
}

// TestEveryCheckPages walks the catalogue — every probe check, drift rule,
// admission, egress-record, cache and runner check — and proves each has a
// severity, fires an alert when it fails (promtool over the metrics
// sandprobe really exposes for that failure), pages critical when its
// severity is critical or high, and is named in the runbook of every alert
// it fires (the generated table; -update rewrites it).
func TestEveryCheckPages(t *testing.T) {
	entries := catalogue.All()
	seen := map[string]bool{}
	for _, e := range entries {
		if seen[e.ID] {
			t.Errorf("%s listed twice", e.ID)
		}
		seen[e.ID] = true
		if e.Severity.Rank() > report.Low.Rank() {
			t.Errorf("%s (%s): no severity", e.ID, e.Source)
		}
	}
	fired := firedAlerts(t, entries)
	critical := criticalAlerts(t)
	byAlert := map[string][]catalogue.Entry{}
	for _, e := range entries {
		alerts := fired[e.ID]
		if len(alerts) == 0 {
			t.Errorf("%s (%s, %s): a failure fires no alert", e.ID, e.Source, e.Severity)
			continue
		}
		pages := slices.ContainsFunc(alerts, func(a string) bool { return critical[a] })
		if e.Severity.Rank() <= report.High.Rank() && !pages {
			t.Errorf("%s is %s but fires only %v, none critical", e.ID, e.Severity, alerts)
		}
		for _, a := range slices.Compact(slices.Sorted(slices.Values(alerts))) {
			byAlert[a] = append(byAlert[a], e)
		}
	}
	for alert, es := range byAlert {
		path := filepath.Join(runbooksDirPath, alert+".md")
		book, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v", alert, err)
			continue
		}
		want := withCheckTable(book, es)
		if *update && !bytes.Equal(book, want) {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			book = want
		}
		if !bytes.Equal(book, want) {
			t.Errorf("%s: its table of the checks that fire it is stale (go test ./manifests -run TestEveryCheckPages -update)", path)
		}
	}
}

const (
	tableStart = "<!-- checks: generated by `go test ./manifests -run TestEveryCheckPages -update` -->"
	tableEnd   = "<!-- end of checks -->"
)

// withCheckTable is the runbook with its table of the checks that fire the
// alert (worst first), between the markers, appended when it has none.
func withCheckTable(book []byte, es []catalogue.Entry) []byte {
	es = slices.Clone(es)
	sort.SliceStable(es, func(i, j int) bool { return es[i].Severity.Rank() < es[j].Severity.Rank() })
	var b bytes.Buffer
	b.WriteString(tableStart + "\n\n")
	b.WriteString("| check | severity | what to do |\n|---|---|---|\n")
	for _, e := range es {
		do := e.Fix
		if do == "" {
			do = "see below: it proves " + e.Proves
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", e.ID, e.Severity, strings.ReplaceAll(do, "|", "\\|"))
	}
	b.WriteString("\n" + tableEnd)
	s := string(book)
	i, j := strings.Index(s, tableStart), strings.Index(s, tableEnd)
	if i < 0 || j < i {
		return []byte(strings.TrimRight(s, "\n") + "\n\n## Checks that fire it\n\n" + b.String() + "\n")
	}
	return []byte(s[:i] + b.String() + s[j+len(tableEnd):])
}
