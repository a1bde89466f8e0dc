package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// severityRun is a privileged StatefulSet's drift as `drift -f` reports
// it: the findings in the pod's order, the worst not first.
func severityRun() Run {
	return Run{Policy: "p", Version: "v", Findings: []Finding{
		{Check: "drift.pod.memory-limit", Target: "statefulset/ns/db", Status: Fail, Severity: Low, Expected: "a memory limit", Actual: "none", File: "db.yaml", Line: 20},
		{Check: "drift.pod.run-as-non-root", Target: "statefulset/ns/db", Status: Fail, Severity: High, Expected: "true", Actual: "unset", File: "db.yaml", Line: 21},
		{Check: "drift.pod.privileged", Target: "statefulset/ns/db", Status: Fail, Severity: Critical, Expected: "false", Actual: "true", File: "db.yaml", Line: 22},
		{Check: "drift.pod.seccomp", Target: "statefulset/ns/db", Status: Pass, Severity: Medium},
		{Check: "drift.pod.host-path", Target: "statefulset/ns/db", Status: Fail, Severity: Critical, Subject: "/var/run/docker.sock", Expected: "no hostPath", Actual: "hostPath /var/run/docker.sock", File: "db.yaml", Line: 30},
	}}
}

// TestTextWorstFirst: the text report lists a target's findings worst
// first, each with its severity; equal ones stay in the order found.
func TestTextWorstFirst(t *testing.T) {
	var b bytes.Buffer
	if err := (Text{}).Write(&b, severityRun()); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, line := range strings.Split(b.String(), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && (f[0] == "FAIL" || f[0] == "ok") && strings.HasPrefix(f[2], "drift.") {
			order = append(order, f[1]+" "+f[2])
		}
	}
	want := []string{"critical drift.pod.privileged", "critical drift.pod.host-path", "high drift.pod.run-as-non-root", "low drift.pod.memory-limit"}
	if strings.Join(order, "|") != strings.Join(want, "|") {
		t.Fatalf("order %q, want %q\n%s", order, want, b.String())
	}
}

// TestSeverityInJSONJUnitSARIF: JSON and JUnit carry each finding's
// severity; SARIF's rules carry security-severity in the bands code
// scanning reads (critical ≥ 9.0, high 7.0–8.9, medium 4.0–6.9, low < 4).
func TestSeverityInJSONJUnitSARIF(t *testing.T) {
	run := severityRun()
	var js bytes.Buffer
	if err := (JSON{}).Write(&js, run); err != nil {
		t.Fatal(err)
	}
	var doc struct{ Findings []Finding }
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for i, f := range doc.Findings {
		if f.Severity != run.Findings[i].Severity {
			t.Errorf("JSON %s: severity %q, want %q", f.Check, f.Severity, run.Findings[i].Severity)
		}
	}
	var ju bytes.Buffer
	if err := (JUnit{}).Write(&ju, run); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ju.String(), `<testcase name="drift.pod.privileged" classname="sandprobe.drift" time="0.000" file="db.yaml" line="22" severity="critical">`) {
		t.Errorf("JUnit lacks the severity attribute:\n%s", ju.String())
	}
	var sa bytes.Buffer
	rules := []SARIFRule{{ID: "drift.pod.privileged", Proves: "p", Fix: "f", Severity: Critical}}
	if err := (SARIF{Rules: rules}).Write(&sa, run); err != nil {
		t.Fatal(err)
	}
	var log struct {
		Runs []struct {
			Tool struct {
				Driver struct {
					Rules []struct {
						ID         string         `json:"id"`
						Properties map[string]any `json:"properties"`
					} `json:"rules"`
				} `json:"driver"`
			} `json:"tool"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(sa.Bytes(), &log); err != nil {
		t.Fatal(err)
	}
	band := map[string][2]float64{"drift.pod.privileged": {9, 10}, "drift.pod.host-path": {9, 10}, "drift.pod.run-as-non-root": {7, 8.9}, "drift.pod.memory-limit": {0, 3.9}}
	seen := 0
	for _, r := range log.Runs[0].Tool.Driver.Rules {
		b, ok := band[r.ID]
		if !ok {
			continue
		}
		seen++
		s, _ := r.Properties["security-severity"].(string)
		var v float64
		if err := json.Unmarshal([]byte(s), &v); err != nil || v < b[0] || v > b[1] {
			t.Errorf("SARIF rule %s: security-severity %q, want within %v", r.ID, s, b)
		}
	}
	if seen != len(band) {
		t.Errorf("SARIF has %d of the %d rules", seen, len(band))
	}
}

// TestMetricsSeverityAndSuccess: the check and drift series carry the
// severity label the alerts route on, and only a conformant run (exit 0)
// moves the last success: a run that exits 1 keeps the staleness alert's
// clock running.
func TestMetricsSeverityAndSuccess(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_800_000_000, 0)
	m.Observe(Run{Findings: []Finding{{Check: "identity.uid", Target: "node/n", Where: Location{Node: "n"}, Status: Pass, Severity: High}}}, t0)
	m.Observe(Run{Findings: []Finding{
		{Check: "escape.runtime-socket", Target: "node/n", Where: Location{Node: "n"}, Status: Fail, Severity: Critical},
		{Check: "drift.pod.privileged", Target: "pod/ns/a", Namespace: "ns", Status: Fail, Severity: Critical},
	}}, t0.Add(30*time.Minute))
	got := samples(t, reg)
	for k, want := range map[string]float64{
		`sandprobe_check_success{check="escape.runtime-socket",namespace="",node="n",severity="critical",target=""}`: 0,
		`sandprobe_drift_findings{namespace="ns",rule="drift.pod.privileged",severity="critical"}`:                   1,
		"sandprobe_last_success_timestamp_seconds":                                                                   float64(t0.Unix()),
		"sandprobe_up":                         1,
		`sandprobe_runs_total{result="fail"}`:  1,
		`sandprobe_runs_total{result="pass"}`:  1,
		`sandprobe_runs_total{result="error"}`: 0,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
}

// TestJSONSummary: a JSON report names its schema and carries the verdict a
// reader would otherwise tally: the counts, what did not pass by
// severity, the verdict and the exit code the run exits with.
func TestJSONSummary(t *testing.T) {
	for _, c := range []struct {
		name    string
		run     Run
		verdict string
		exit    int
	}{
		{"not conformant", severityRun(), VerdictNotConformant, ExitNonConformant},
		{"conformant", Run{Findings: []Finding{{Check: "identity.uid", Target: "node/a", Where: Location{Node: "a"}, Status: Pass, Severity: High}}}, VerdictConformant, ExitOK},
		{"an unprobed node", Run{Findings: []Finding{
			{Check: "identity.uid", Target: "node/a", Where: Location{Node: "a"}, Status: Pass, Severity: High},
			{Check: CheckProbeRun, Subject: "node-cordoned", Target: "node/b", Where: Location{Node: "b"}, Status: Error, Severity: Medium},
		}}, VerdictCouldNotCheck, ExitCouldNotRun},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := (JSON{}).Write(&b, c.run); err != nil {
				t.Fatal(err)
			}
			var doc map[string]json.RawMessage
			if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			if string(doc["schema"]) != `"`+ReportSchema+`"` {
				t.Errorf("schema %s", doc["schema"])
			}
			var s Summary
			if err := json.Unmarshal(doc["summary"], &s); err != nil {
				t.Fatalf("summary %s: %v", doc["summary"], err)
			}
			cnt := c.run.Counts()
			if s.Verdict != c.verdict || s.ExitCode != c.exit || s.ExitCode != c.run.ExitCode() || s.Findings != cnt.Total() || s.Pass != cnt.Pass || s.Fail != cnt.Fail || s.Error != cnt.Error {
				t.Errorf("summary %+v, want verdict %s, exit %d, counts %+v", s, c.verdict, c.exit, cnt)
			}
			if c.name == "not conformant" && (s.BySeverity["critical"] != 2 || s.BySeverity["high"] != 1 || s.BySeverity["low"] != 1 || s.BySeverity["medium"] != 0) {
				t.Errorf("by severity %v", s.BySeverity)
			}
			if c.name == "an unprobed node" && s.Unprobed != 1 {
				t.Errorf("unprobed %d, want 1", s.Unprobed)
			}
		})
	}
}
