// Package manifests holds sandprobe's Kubernetes manifests (the kustomize
// base); its tests apply the base to a real kube-apiserver and prove its
// RBAC, admission policies and Pod Security, keep it in step with what
// `sandprobe render` makes of the policy, and keep the alert rules valid,
// unit-tested, documented and in step with both the metrics sandprobe
// exposes and the PrometheusRule object.
package manifests

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/report"
)

var update = flag.Bool("update", false, "rewrite prometheusrule.yaml from alerts/sandprobe.rules.yml")

const (
	rulesFile       = "alerts/sandprobe.rules.yml"
	rulesTestFile   = "alerts/sandprobe.rules_test.yml"
	prometheusRule  = "components/prometheus-rule/prometheusrule.yaml"
	runbookURLBase  = "https://github.com/sandprobe/sandprobe/blob/main/docs/runbooks/"
	runbooksDirPath = "../docs/runbooks"
)

// The alerts DESIGN.md promises, each with a runbook.
var wantAlerts = []string{
	"SandboxEgressReopened", "SandboxAllowedHostUnreachable", "SandboxIsolationBroken",
	"SandboxDrift", "SandboxProbeFailing", "SandboxProbeStale",
	// Issue 12: credentials page someone; nothing found is not conformant.
	"SandboxCredentialsExposed", "SandboxNoneFound",
	// Issue 10: a deny nobody could prove, a probe not placed like the sandboxes.
	"SandboxEgressUnproven",
	// Issue 15: one node of the pool that could not be probed, named.
	"SandboxNodeUnprobed",
	// Issue 23: every check pages by its severity; medium and low warn.
	"SandboxCheckFailing",
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type ruleGroups struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

func loadRules(t *testing.T) (ruleGroups, []rule) {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var g ruleGroups
	if err := yaml.Unmarshal(data, &g); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var all []rule
	for _, grp := range g.Groups {
		all = append(all, grp.Rules...)
	}
	return g, all
}

// renderPrometheusRule wraps the plain rules file in a PrometheusRule, so
// the two can never hold different rules.
func renderPrometheusRule(rules []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`# Generated from alerts/sandprobe.rules.yml by ` + "`go test ./manifests -update`" + `: edit that file, not this one.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: sandprobe
  namespace: sandprobe-system
  labels:
    app.kubernetes.io/name: sandprobe
    app.kubernetes.io/component: alerting
spec:
`)
	body := string(rules)
	body = body[strings.Index(body, "groups:"):]
	for _, line := range strings.SplitAfter(body, "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	return b.Bytes()
}

// TestPrometheusRuleMatchesRulesFile: the PrometheusRule holds exactly the
// rules of the plain file, textually and once parsed.
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	want := renderPrometheusRule(rules)
	if *update {
		if err := os.WriteFile(prometheusRule, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(prometheusRule)
	if err != nil {
		t.Fatalf("%v (run go test ./manifests -update)", err)
	}
	if !bytes.Equal(have, want) {
		t.Fatalf("%s differs from %s: run go test ./manifests -update", prometheusRule, rulesFile)
	}
	var obj struct {
		APIVersion string     `yaml:"apiVersion"`
		Kind       string     `yaml:"kind"`
		Spec       ruleGroups `yaml:"spec"`
	}
	if err := yaml.Unmarshal(have, &obj); err != nil {
		t.Fatal(err)
	}
	plain, _ := loadRules(t)
	if obj.Kind != "PrometheusRule" || obj.APIVersion != "monitoring.coreos.com/v1" {
		t.Errorf("kind %s apiVersion %s", obj.Kind, obj.APIVersion)
	}
	a, _ := yaml.Marshal(obj.Spec)
	b, _ := yaml.Marshal(plain)
	if !bytes.Equal(a, b) {
		t.Errorf("parsed rules differ:\n%s\n---\n%s", a, b)
	}
}

// TestPromtoolRules: promtool accepts the rules (the plain file and the
// PrometheusRule's spec) and every unit test in alerts/*_test.yml passes.
func TestPromtoolRules(t *testing.T) {
	promtool := testenv.Promtool(t)
	var obj struct {
		Spec map[string]any `yaml:"spec"`
	}
	data, err := os.ReadFile(prometheusRule)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	spec, _ := yaml.Marshal(obj.Spec)
	fromCR := filepath.Join(t.TempDir(), "from-prometheusrule.yml")
	if err := os.WriteFile(fromCR, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, _ := filepath.Glob("alerts/*_test.yml")
	if len(tests) == 0 {
		t.Fatal("no promtool unit tests in alerts/")
	}
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"check", "rules", fromCR},
		append([]string{"test", "rules"}, tests...),
	} {
		start := time.Now()
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			continue
		}
		t.Logf("promtool %s: ok in %v", strings.Join(args[:2], " "), time.Since(start).Round(time.Millisecond))
	}
}

// TestAlertsDocumented: each promised alert exists once with a severity, a
// summary, a description and a runbook_url whose runbook says what the
// alert means, how to confirm it and how to fix it.
func TestAlertsDocumented(t *testing.T) {
	_, rules := loadRules(t)
	var names []string
	for _, r := range rules {
		names = append(names, r.Alert)
		t.Run(r.Alert, func(t *testing.T) {
			if sev := r.Labels["severity"]; sev != "critical" && sev != "warning" {
				t.Errorf("severity %q, want critical or warning", sev)
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("no %s annotation", a)
				}
			}
			if got, want := r.Annotations["runbook_url"], runbookURLBase+r.Alert+".md"; got != want {
				t.Errorf("runbook_url %q, want %q", got, want)
			}
			book, err := os.ReadFile(filepath.Join(runbooksDirPath, r.Alert+".md"))
			if err != nil {
				t.Fatalf("runbook: %v", err)
			}
			for _, section := range []string{"## What it means", "## How to confirm", "## How to fix", "sandprobe run"} {
				if !bytes.Contains(book, []byte(section)) {
					t.Errorf("runbook lacks %q", section)
				}
			}
			if !bytes.Contains(book, []byte(r.Alert)) {
				t.Error("runbook does not name its alert")
			}
		})
	}
	slices.Sort(names)
	names = slices.Compact(names) // SandboxDrift: one rule per severity
	want := slices.Clone(wantAlerts)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("alerts %v, want %v", names, want)
	}
	books, _ := filepath.Glob(filepath.Join(runbooksDirPath, "*.md"))
	for _, b := range books {
		if name := strings.TrimSuffix(filepath.Base(b), ".md"); !slices.Contains(names, name) && name != "README" {
			t.Errorf("runbook %s has no alert", b)
		}
	}
}

var metricName = regexp.MustCompile(`\bsandprobe_[a-z_]+\b`)

// TestAlertsQueryRealMetrics: every metric an alert queries is one that
// sandprobe exposes (a renamed metric must not silently mute an alert).
func TestAlertsQueryRealMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := report.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	// A conformant run (the last success), then one that touches every
	// series: a probe check, egress, drift.
	m.Observe(report.Run{Findings: []report.Finding{{Check: "identity.uid", Target: "node/n", Where: report.Location{Node: "n"}, Status: report.Pass}}}, time.Now())
	m.Observe(report.Run{Policy: "p", Version: "v", Phases: map[string]float64{"drift": 1}, DeclaredNamespaces: 1, Findings: []report.Finding{
		{Check: "identity.uid", Target: "node/n", Where: report.Location{Node: "n"}, Status: report.Pass},
		{Check: "egress.allowed", Subject: "api.example:443", Target: "node/n", Where: report.Location{Node: "n"}, Status: report.Pass},
		{Check: "drift.pod.runtime-class", Target: "pod/ns/a", Namespace: "ns", Status: report.Fail},
		{Check: report.CheckProbeRun, Subject: "node-cordoned", Target: "namespace/ns/node/m", Where: report.Location{Namespace: "ns", Node: "m"}, Status: report.Error},
	}}, time.Now())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exposed := map[string]bool{}
	for _, mf := range mfs {
		exposed[mf.GetName()] = true
	}
	if len(exposed) != 16 {
		t.Fatalf("want the 12 metrics DESIGN.md lists, the skip and push-failure counters, sandprobe_policy_namespaces, sandprobe_egress_denies_unproven and sandprobe_node_unprobed, got %d: %v", len(exposed), exposed)
	}
	_, rules := loadRules(t)
	for _, r := range rules {
		used := metricName.FindAllString(r.Expr, -1)
		if len(used) == 0 {
			t.Errorf("%s: queries no sandprobe metric", r.Alert)
		}
		for _, name := range used {
			if !exposed[name] {
				t.Errorf("%s: queries %s, which sandprobe does not expose", r.Alert, name)
			}
		}
	}
}

// TestEveryAlertHasFiringAndSilentTests: the unit tests show each alert both
// firing and staying silent.
func TestEveryAlertHasFiringAndSilentTests(t *testing.T) {
	data, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Tests []struct {
			Name  string `yaml:"name"`
			Evals []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]int{}, map[string]int{}
	for _, tc := range file.Tests {
		for _, e := range tc.Evals {
			if len(e.ExpAlerts) > 0 {
				fires[e.Alertname]++
			} else {
				silent[e.Alertname]++
			}
		}
	}
	for _, a := range wantAlerts {
		if fires[a] == 0 || silent[a] == 0 {
			t.Errorf("%s: %d firing and %d silent evaluations, want at least one of each", a, fires[a], silent[a])
		}
	}
}
