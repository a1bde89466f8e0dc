package report

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

var finishedAt = time.Date(2026, 11, 29, 10, 0, 5, 0, time.UTC)

func healthyRun() Run {
	return Run{
		Policy: "agent-sandbox", Version: "test", Backend: "kube",
		StartedAt: finishedAt.Add(-5 * time.Second), Seconds: 4.5,
		Phases:  map[string]float64{"probe": 3.5, "drift": 1},
		Scanned: 12,
		Findings: []Finding{
			{Check: "identity.uid", Target: "node/worker-1", Where: Location{Node: "worker-1"}, Status: Pass},
			{Check: "caps.sets", Subject: "CapEff", Target: "node/worker-1", Where: Location{Node: "worker-1"}, Status: Pass},
			{Check: "caps.sets", Subject: "CapBnd", Target: "node/worker-1", Where: Location{Node: "worker-1"}, Status: Pass},
			{Check: "fs.root-readonly", Subject: "/", Target: "node/worker-1", Where: Location{Node: "worker-1"}, Status: Pass},
			{Check: "egress.allowed", Role: RoleAllowance, Subject: "api.anthropic.com:443", Target: "node/worker-1", Where: Location{Node: "worker-1"}, Status: Pass, Class: "answered"},
			{Check: "egress.must-fail", Role: RoleMustFail, Subject: "example.com:443", Target: "node/worker-1", Where: Location{Node: "worker-1"}, Status: Pass, Class: "timeout", Control: "answered", Deny: DenyProven},
			{Check: "egress.metadata", Role: RoleMetadata, Subject: "169.254.169.254:80", Target: "node/worker-1", Where: Location{Node: "worker-1"}, Status: Pass, Class: "refused", Control: "answered", Deny: DenyProven},
			{Check: "tools.run", Subject: "chromium", Target: "node/worker-1", Where: Location{Node: "worker-1"}, Status: Skip},
			{Check: "drift.pod.runtime-class", Target: "pod/sandboxes/a", Namespace: "sandboxes", Status: Pass},
		},
	}
}

// brokenRun is the report tests' sample run plus drift and a reopened egress.
func brokenRun() Run {
	run := sampleRun()
	run.Phases = map[string]float64{"probe": 0.03, "drift": 0.012}
	run.Scanned = 3
	run.Findings = append(run.Findings,
		Finding{Check: "egress.metadata", Role: RoleMetadata, Subject: "169.254.169.254:80", Target: "node/worker-1", Where: Location{Node: "worker-1"}, Status: Fail, Class: "answered"},
		Finding{Check: "egress.dns-exfil", Role: RoleDNSChannel, Subject: "random-name", Target: "node/worker-1", Where: Location{Node: "worker-1"}, Status: Fail},
		Finding{Check: "egress.must-fail", Role: RoleMustFail, Subject: "10.99.20.1:443", Target: "node/worker-1", Where: Location{Node: "worker-1"}, Status: Inconclusive, Class: "timeout", Control: "refused", Deny: DenyUnproven},
		Finding{Check: "probe.run", Subject: "deadline-exceeded", Target: "node/worker-3", Where: Location{Node: "worker-3"}, Status: Error, Severity: Medium},
		Finding{Check: "drift.pod.runtime-class", Target: "pod/sandboxes/a", Namespace: "sandboxes", Status: Fail, Severity: Critical},
		Finding{Check: "drift.pod.runtime-class", Target: "pod/sandboxes/b", Namespace: "sandboxes", Status: Fail, Severity: Critical},
		Finding{Check: "drift.netpol.egress-open", Target: "networkpolicy/team-a/allow-all", Namespace: "team-a", Status: Fail},
		Finding{Check: "drift.docker.cap-drop", Target: "container/abc", Status: Fail},
	)
	return run
}

// samples flattens what g gathers into "name{label="value",…}" → value.
func samples(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				if l.GetName() == "severity" && l.GetValue() == "" {
					continue // PromQL reads an empty label as none; most runs here carry no severity
				}
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			key := mf.GetName()
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

func observed(t *testing.T, runs ...Run) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range runs {
		m.Observe(r, finishedAt.Add(time.Duration(i)*time.Minute))
	}
	return m, reg
}

// absent marks a series that must not exist.
const absent = -1

func TestMetricsSeries(t *testing.T) {
	cs := func(check, target, node string) string {
		return fmt.Sprintf("sandprobe_check_success{check=%q,namespace=\"\",node=%q,target=%q}", check, node, target)
	}
	manyEnv := Run{Policy: "p", Version: "v"}
	for i := range maxTargetsPerCheck + 1 {
		manyEnv.Findings = append(manyEnv.Findings, Finding{Check: "creds.env-secrets", Subject: fmt.Sprintf("X%d_KEY", i), Target: "local/sandbox", Status: Pass})
	}
	manyEnv.Findings[7].Status = Fail
	cases := []struct {
		name string
		run  Run
		want map[string]float64
	}{
		{"healthy", healthyRun(), map[string]float64{
			"sandprobe_up":                                                                   1,
			cs("identity.uid", "", "worker-1"):                                               1,
			cs("caps.sets", "CapBnd", "worker-1"):                                            1,
			cs("egress.allowed", "api.anthropic.com:443", "worker-1"):                        1,
			cs("tools.run", "chromium", "worker-1"):                                          absent, // skipped: not evaluated
			`sandprobe_egress_unexpected_open{namespace="",node="worker-1"}`:                 0,
			`sandprobe_egress_allowed_unreachable{namespace="",node="worker-1"}`:             0,
			`sandprobe_drift_findings{namespace="sandboxes",rule="drift.pod.runtime-class"}`: 0,
			cs("drift.pod.runtime-class", "", "pod/sandboxes/a"):                             absent, // drift never names pods
			"sandprobe_sandboxes_scanned":                                                    12,
			`sandprobe_run_duration_seconds{phase="probe"}`:                                  3.5,
			`sandprobe_run_duration_seconds{phase="drift"}`:                                  1,
			`sandprobe_run_duration_seconds{phase="total"}`:                                  4.5,
			"sandprobe_last_run_timestamp_seconds":                                           float64(finishedAt.Unix()),
			"sandprobe_last_success_timestamp_seconds":                                       float64(finishedAt.Unix()),
			`sandprobe_runs_total{result="pass"}`:                                            1,
			`sandprobe_runs_total{result="fail"}`:                                            0,
			`sandprobe_runs_total{result="error"}`:                                           0,
			"sandprobe_runs_skipped_total":                                                   0,
			"sandprobe_push_failures_total":                                                  0,
			`sandprobe_info{build_date="",commit="",policy="agent-sandbox",version="test"}`:  1,
		}},
		{"broken", brokenRun(), map[string]float64{
			"sandprobe_up":                                             0, // a probe.run error: could not run
			cs("fs.root-readonly", "", "sandbox"):                      absent,
			cs("fs.root-readonly", "", "local/sandbox"):                0,
			cs("egress.must-fail", "blocked.lab.test:443", "worker-1"): 0, // inconclusive is not a pass
			`sandprobe_check_success{check="probe.run",namespace="",node="worker-3",severity="medium",target="deadline-exceeded"}`: 0,
			cs("probe.result", "", "worker-2"): 0,
			// metadata answered + a DNS name resolved; the inconclusive must-fail is not "open".
			`sandprobe_egress_unexpected_open{namespace="",node="worker-1"}`:                                     2,
			`sandprobe_egress_allowed_unreachable{namespace="",node="worker-1"}`:                                 1,
			`sandprobe_egress_unexpected_open{namespace="",node="local/sandbox"}`:                                absent,
			`sandprobe_drift_findings{namespace="sandboxes",rule="drift.pod.runtime-class",severity="critical"}`: 2,
			`sandprobe_drift_findings{namespace="team-a",rule="drift.netpol.egress-open"}`:                       1,
			`sandprobe_drift_findings{namespace="",rule="drift.docker.cap-drop"}`:                                1,
			`sandprobe_runs_total{result="error"}`:                                                               1,
			"sandprobe_last_success_timestamp_seconds":                                                           absent, // never succeeded
		}},
		{"pinned failure class is still closed; bypass and fronting are open", Run{Findings: []Finding{
			{Check: "egress.must-fail", Role: RoleMustFail, Subject: "1.1.1.1:443", Target: "node/n", Where: Location{Node: "n"}, Status: Fail, Class: "refused"},
			{Check: "egress.proxy-bypass", Role: RoleProxyBypass, Subject: "example.com:80", Target: "node/n", Where: Location{Node: "n"}, Status: Fail, Class: "answered"},
			// fronting: a must-fail name reached through the proxy counts too
			{Check: "egress.sni-mismatch", Role: RoleFronting, Subject: "evil.example via api.example:443", Target: "node/n", Where: Location{Node: "n"}, Status: Fail, Class: "answered"},
			{Check: "egress.sni-mismatch", Role: RoleFronting, Subject: "x.invalid via api.example:443", Target: "node/n", Where: Location{Node: "n"}, Status: Inconclusive, Class: "error"},
		}}, map[string]float64{
			"sandprobe_up": 1,
			`sandprobe_egress_unexpected_open{namespace="",node="n"}`: 2,
			cs("egress.must-fail", "1.1.1.1:443", "n"):                0,
		}},
		{"kube: node and sandbox namespace", Run{Findings: []Finding{
			{Check: "egress.must-fail", Role: RoleMustFail, Subject: "1.1.1.1:443", Target: "namespace/sandboxes/node/w1", Where: Location{Namespace: "sandboxes", Node: "w1"}, Namespace: "sandboxes", Status: Fail, Class: "answered"},
			{Check: "egress.must-fail", Role: RoleMustFail, Subject: "1.1.1.1:443", Target: "namespace/team-b/node/w1", Where: Location{Namespace: "team-b", Node: "w1"}, Namespace: "team-b", Status: Pass, Class: "timeout"},
			{Check: "probe.run", Subject: "unschedulable", Target: "namespace/team-c", Where: Location{Namespace: "team-c"}, Status: Error},
			{Check: "egress.must-fail", Role: RoleMustFail, Subject: "10.0.0.1:443", Target: "namespace/sandboxes/node/w1/as/forgot-its-label", Where: Location{Namespace: "sandboxes", Node: "w1", Stray: "forgot-its-label"}, Namespace: "sandboxes", Status: Fail, Class: "answered"},
		}}, map[string]float64{
			`sandprobe_egress_unexpected_open{namespace="sandboxes",node="w1"}`:                                      2,
			`sandprobe_egress_unexpected_open{namespace="team-b",node="w1"}`:                                         0,
			`sandprobe_check_success{check="egress.must-fail",namespace="sandboxes",node="w1",target="1.1.1.1:443"}`: 0,
			`sandprobe_check_success{check="egress.must-fail",namespace="team-b",node="w1",target="1.1.1.1:443"}`:    1,
			cs("probe.run", "unschedulable", "namespace/team-c"):                                                     0,
		}},
		{"denies the control could not prove", Run{Findings: []Finding{
			{Check: "egress.must-fail", Role: RoleMustFail, Subject: "10.99.20.1:443", Target: "namespace/sb/node/w1", Where: Location{Namespace: "sb", Node: "w1"}, Namespace: "sb", Status: Inconclusive, Class: "timeout", Control: "refused", Deny: DenyUnproven},
			{Check: "egress.must-fail", Role: RoleMustFail, Subject: "10.99.20.2:443", Target: "namespace/sb/node/w1", Where: Location{Namespace: "sb", Node: "w1"}, Namespace: "sb", Status: Inconclusive, Class: "refused", Deny: DenyUnproven},
			{Check: "egress.metadata", Role: RoleMetadata, Subject: "169.254.169.254:80", Target: "namespace/sb/node/w1", Where: Location{Namespace: "sb", Node: "w1"}, Namespace: "sb", Status: Pass, Class: "timeout", Control: "answered", Deny: DenyProven},
			{Check: "egress.must-fail", Role: RoleMustFail, Subject: "10.99.20.1:443", Target: "namespace/sb/node/w2", Where: Location{Namespace: "sb", Node: "w2"}, Namespace: "sb", Status: Pass, Class: "timeout", Control: "answered", Deny: DenyProven},
		}}, map[string]float64{
			`sandprobe_egress_denies_unproven{namespace="sb",node="w1"}`:                                         2,
			`sandprobe_egress_denies_unproven{namespace="sb",node="w2"}`:                                         0,
			`sandprobe_egress_unexpected_open{namespace="sb",node="w1"}`:                                         0, // unproven is not open
			`sandprobe_check_success{check="egress.must-fail",namespace="sb",node="w1",target="10.99.20.1:443"}`: 0,
			`sandprobe_check_success{check="egress.must-fail",namespace="sb",node="w2",target="10.99.20.1:443"}`: 1,
		}},
		{"duplicate subjects: one failure fails the series", Run{Findings: []Finding{
			{Check: "fs.writable", Subject: "/tmp", Target: "image/alpine:3", Status: Pass},
			{Check: "fs.writable", Subject: "/tmp", Target: "image/alpine:3", Status: Fail},
		}}, map[string]float64{cs("fs.writable", "/tmp", "image/alpine:3"): 0}},
		{"subjects from the sandbox fold past the bound", manyEnv, map[string]float64{
			cs("creds.env-secrets", "", "local/sandbox"):       0,
			cs("creds.env-secrets", "X1_KEY", "local/sandbox"): absent,
		}},
		{"invalid UTF-8 in a subject", Run{Findings: []Finding{
			{Check: "creds.env-secrets", Subject: "A\xffB_KEY", Target: "local/x", Status: Fail},
		}}, map[string]float64{cs("creds.env-secrets", "A\uFFFDB_KEY", "local/x"): 0}},
		{"no findings proves nothing", Run{}, map[string]float64{"sandprobe_up": 0}},
		// sandprobe_sandboxes_scanned says how many a drift phase compared:
		// a run without one (or one that could not run it) must not look
		// like "none found", or the alert on 0 would page for nothing.
		{"no drift phase, no sandbox count", Run{DeclaredNamespaces: 2, Phases: map[string]float64{"probe": 1}, Findings: []Finding{
			{Check: "identity.uid", Target: "local/sandbox", Status: Pass},
		}}, map[string]float64{"sandprobe_sandboxes_scanned": absent, "sandprobe_policy_namespaces": 2}},
		{"nothing found", Run{DeclaredNamespaces: 1, Phases: map[string]float64{"drift": 0.2}, Findings: []Finding{
			{Check: "drift.scan.sandboxes-found", Target: "drift", Status: Fail},
		}}, map[string]float64{"sandprobe_sandboxes_scanned": 0, "sandprobe_policy_namespaces": 1,
			`sandprobe_drift_findings{namespace="",rule="drift.scan.sandboxes-found"}`: 1}},
		{"drift could not list", Run{DeclaredNamespaces: 1, Phases: map[string]float64{"drift": 0.2}, Findings: []Finding{
			{Check: "drift.run", Target: "drift", Status: Error},
		}}, map[string]float64{"sandprobe_sandboxes_scanned": absent, "sandprobe_up": 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, reg := observed(t, c.run)
			got := samples(t, reg)
			for k, want := range c.want {
				v, ok := got[k]
				switch {
				case want == absent && ok:
					t.Errorf("%s = %v, want no such series", k, v)
				case want != absent && !ok:
					t.Errorf("%s missing; have:\n%s", k, keys(got))
				case want != absent && v != want:
					t.Errorf("%s = %v, want %v", k, v, want)
				}
			}
		})
	}
}

func keys(m map[string]float64) string {
	var ks []string
	for k, v := range m {
		ks = append(ks, fmt.Sprintf("  %s %v", k, v))
	}
	sort.Strings(ks)
	return strings.Join(ks, "\n")
}

// TestMetricsStaleSeriesDisappear: a check, a node or a drift rule that the
// next run no longer evaluates is gone, not stuck at its old value.
func TestMetricsStaleSeriesDisappear(t *testing.T) {
	second := healthyRun()
	second.Findings = second.Findings[:1] // only identity.uid on worker-1
	second.Phases = nil
	_, reg := observed(t, brokenRun(), second)
	got := samples(t, reg)
	for k := range got {
		if strings.Contains(k, "worker-3") || strings.Contains(k, "fs.root-readonly") ||
			strings.HasPrefix(k, "sandprobe_drift_findings") || strings.HasPrefix(k, "sandprobe_egress_") ||
			strings.Contains(k, `phase="probe"`) {
			t.Errorf("stale series survived the next run: %s", k)
		}
	}
	if got["sandprobe_up"] != 1 || got[`sandprobe_runs_total{result="error"}`] != 1 || got[`sandprobe_runs_total{result="pass"}`] != 1 {
		t.Errorf("want up 1 and one error and one pass run counted:\n%s", keys(got))
	}
	if got["sandprobe_last_success_timestamp_seconds"] != float64(finishedAt.Add(time.Minute).Unix()) {
		t.Errorf("last success not the second run's: %v", got["sandprobe_last_success_timestamp_seconds"])
	}
}

// TestMetricsLastSuccessSurvivesFailures: a failing run keeps the last
// success, in-process and carried from an earlier metrics file.
func TestMetricsLastSuccessSurvivesFailures(t *testing.T) {
	_, reg := observed(t, healthyRun(), brokenRun())
	if got := samples(t, reg); got["sandprobe_last_success_timestamp_seconds"] != float64(finishedAt.Unix()) || got["sandprobe_up"] != 0 {
		t.Fatalf("last success %v up %v, want the first run's %v and 0", got["sandprobe_last_success_timestamp_seconds"], got["sandprobe_up"], finishedAt.Unix())
	}
	path := filepath.Join(t.TempDir(), "sandprobe.prom")
	if err := WriteMetricsFile(path, reg); err != nil {
		t.Fatal(err)
	}
	// A new process (the next CronJob run) that fails.
	next, nextReg := observed(t)
	when, ok, err := LastSuccessInFile(path)
	if err != nil || !ok || !when.Equal(finishedAt) {
		t.Fatalf("LastSuccessInFile = %v %v %v", when, ok, err)
	}
	next.RememberSuccess(when)
	next.Observe(brokenRun(), finishedAt.Add(time.Hour))
	if got := samples(t, nextReg)["sandprobe_last_success_timestamp_seconds"]; got != float64(finishedAt.Unix()) {
		t.Fatalf("carried last success %v, want %v", got, finishedAt.Unix())
	}
	if _, ok, err := LastSuccessInFile(filepath.Join(t.TempDir(), "none.prom")); ok || err != nil {
		t.Fatalf("missing file: ok %v err %v", ok, err)
	}
}

// TestMetricsGolden keeps the exposition reviewable: testdata/metrics.prom.golden.
func TestMetricsGolden(t *testing.T) {
	_, reg := observed(t, brokenRun())
	var buf bytes.Buffer
	if err := WriteMetrics(&buf, reg); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "metrics.prom.golden")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("exposition differs from %s (run with -update):\n%s", golden, buf.String())
	}
}

// TestPromtoolCheckMetrics: promtool accepts the exposition of a healthy
// and of a broken run, read from the metrics file sandprobe writes.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool := testenv.Promtool(t)
	for _, c := range []struct {
		name string
		runs []Run
	}{
		{"healthy", []Run{healthyRun()}},
		{"broken", []Run{brokenRun()}},
		{"broken after healthy", []Run{healthyRun(), brokenRun()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, reg := observed(t, c.runs...)
			path := filepath.Join(t.TempDir(), "sandprobe.prom")
			if err := WriteMetricsFile(path, reg); err != nil {
				t.Fatal(err)
			}
			data, _ := os.ReadFile(path)
			cmd := exec.Command(promtool, "check", "metrics")
			cmd.Stdin = bytes.NewReader(data)
			out, err := cmd.CombinedOutput()
			if err != nil || len(bytes.TrimSpace(out)) > 0 {
				t.Fatalf("promtool check metrics: %v\n%s\non:\n%s", err, out, data)
			}
		})
	}
}

// TestMetricsFileAtomic: a reader polling the file while runs rewrite it
// always parses a complete exposition, and a failed write leaves the old
// file and no temporary behind.
func TestMetricsFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sandprobe.prom")
	m, reg := observed(t, healthyRun())
	if err := WriteMetricsFile(path, reg); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	reads, torn := 0, 0
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			data, err := os.ReadFile(path)
			if err != nil {
				torn++
				continue
			}
			reads++
			parser := expfmt.NewTextParser(model.LegacyValidation)
			mfs, err := parser.TextToMetricFamilies(bytes.NewReader(data))
			// Every run has these two; the file's last family is the info line.
			if err != nil || mfs[MetricUp] == nil || mfs[MetricInfo] == nil {
				torn++
			}
		}
	})
	for i := range 200 {
		r := healthyRun()
		if i%2 == 1 {
			r = brokenRun()
		}
		m.Observe(r, finishedAt.Add(time.Duration(i)*time.Second))
		if err := WriteMetricsFile(path, reg); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	if torn > 0 || reads == 0 {
		t.Fatalf("%d of %d reads saw a partial or missing file", torn, reads)
	}
	t.Logf("%d concurrent reads, none partial", reads)

	before, _ := os.ReadFile(path)
	failing := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return nil, io.ErrUnexpectedEOF })
	if err := WriteMetricsFile(path, failing); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("a failed gather: err %v, want one naming %s", err, path)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("a failed write changed the file")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
}

// TestConcurrentScrapeSeesOneRun: a scrape racing Observe sees one run's
// series whole, never a mix of two.
func TestConcurrentScrapeSeesOneRun(t *testing.T) {
	runFor := func(target string) Run {
		r := Run{Policy: "p", Version: "v"}
		for i := range 50 {
			r.Findings = append(r.Findings, Finding{Check: fmt.Sprintf("fs.c%d", i), Target: target, Status: Pass})
		}
		return r
	}
	a, b := runFor("node/a"), runFor("node/b")
	m, reg := observed(t, a)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 500 {
			if i%2 == 0 {
				m.Observe(b, finishedAt)
			} else {
				m.Observe(a, finishedAt)
			}
		}
	})
	for range 200 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		nodes := map[string]int{}
		for _, mf := range mfs {
			if mf.GetName() != MetricCheckSuccess {
				continue
			}
			for _, mm := range mf.GetMetric() {
				for _, l := range mm.GetLabel() {
					if l.GetName() == "node" {
						nodes[l.GetValue()]++
					}
				}
			}
		}
		if len(nodes) != 1 {
			t.Fatalf("one scrape saw series from two runs: %v", nodes)
		}
	}
	wg.Wait()
}

// TestPushgatewayRoundTrip pushes to a real Pushgateway on loopback and reads
// the group back over HTTP: values, grouping labels, and a check that the
// next run no longer evaluates gone from the group.
func TestPushgatewayRoundTrip(t *testing.T) {
	gw := testenv.Pushgateway(t)
	ctx := context.Background()
	client := &http.Client{Timeout: 5 * time.Second}
	m, reg := observed(t, brokenRun())

	start := time.Now()
	if err := PushMetrics(ctx, client, gw, "lab-1", reg); err != nil {
		t.Fatal(err)
	}
	got := scrape(t, client, gw+"/metrics")
	t.Logf("push and read back: %v", time.Since(start))
	grouped := func(name, labels string) string {
		all := []string{`cluster="lab-1"`, `instance=""`, `job="sandprobe"`}
		if labels != "" {
			all = append(all, strings.Split(labels, ",")...)
		}
		sort.Strings(all)
		return name + "{" + strings.Join(all, ",") + "}"
	}
	for k, want := range map[string]float64{
		grouped("sandprobe_up", ""): 0,
		grouped("sandprobe_egress_unexpected_open", `namespace="",node="worker-1"`):                                                       2,
		grouped("sandprobe_check_success", `check="probe.run",namespace="",node="worker-3",severity="medium",target="deadline-exceeded"`): 0,
		grouped("sandprobe_drift_findings", `namespace="sandboxes",rule="drift.pod.runtime-class",severity="critical"`):                   2,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
	if _, ok, err := LastSuccessAtGateway(ctx, client, gw, "lab-1"); ok || err != nil {
		t.Errorf("no success yet: ok %v err %v", ok, err)
	}

	m.Observe(healthyRun(), finishedAt.Add(time.Minute))
	if err := PushMetrics(ctx, client, gw, "lab-1", reg); err != nil {
		t.Fatal(err)
	}
	got = scrape(t, client, gw+"/metrics")
	for k := range got {
		if strings.Contains(k, "worker-3") || strings.Contains(k, "drift.netpol") {
			t.Errorf("a series the last push no longer holds is still on the gateway: %s", k)
		}
	}
	if got[grouped("sandprobe_up", "")] != 1 {
		t.Errorf("up after a healthy push: %v", got[grouped("sandprobe_up", "")])
	}
	when, ok, err := LastSuccessAtGateway(ctx, client, gw, "lab-1")
	if err != nil || !ok || !when.Equal(finishedAt.Add(time.Minute)) {
		t.Errorf("LastSuccessAtGateway = %v %v %v", when, ok, err)
	}
	if _, ok, _ := LastSuccessAtGateway(ctx, client, gw, "other-cluster"); ok {
		t.Error("another cluster's group must not lend its last success")
	}
}

// TestPushFailsLoudly: a gateway that is down or refuses the push is an
// error naming the gateway, never a silent loss.
func TestPushFailsLoudly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	refusing := newStatusServer(t, http.StatusBadRequest)
	_, reg := observed(t, healthyRun())
	client := &http.Client{Timeout: 2 * time.Second}
	for _, gw := range []string{down, refusing} {
		err := PushMetrics(context.Background(), client, gw, "c", reg)
		if err == nil || !strings.Contains(err.Error(), gw) {
			t.Errorf("push to %s: err %v, want one naming the gateway", gw, err)
		}
	}
}

func newStatusServer(t *testing.T, code int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", code)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// scrape reads a text exposition over HTTP into "name{labels}" → value.
func scrape(t *testing.T, client *http.Client, url string) map[string]float64 {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var list []*dto.MetricFamily
	for _, mf := range mfs {
		list = append(list, mf)
	}
	return samples(t, prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return list, nil }))
}
