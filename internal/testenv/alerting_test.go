package testenv

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sourcegraph/conc"
)

// TestAlerting: the harness itself, against a loopback target whose
// gauges the test sets (the real sandprobe serve is the subject of
// runner/kube's watch test and bench): a healthy target raises no alert at
// the receiver, a reopened egress arrives as SandboxEgressReopened naming
// the node and namespace, and the undo arrives as its resolve.
func TestAlerting(t *testing.T) {
	reg := prometheus.NewRegistry()
	open := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sandprobe_egress_unexpected_open"}, []string{"node", "namespace"})
	lastSuccess := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandprobe_last_success_timestamp_seconds"})
	up := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandprobe_up"})
	reg.MustRegister(open, lastSuccess, up)
	open.WithLabelValues("node-a", "sandboxes").Set(0)
	lastSuccess.SetToCurrentTime()
	up.Set(1)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	var serving conc.WaitGroup
	serving.Go(func() { srv.Serve(ln) })
	t.Cleanup(func() { srv.Close(); serving.Wait() })

	a := Alerting(t, AlertingConfig{Target: ln.Addr().String()})
	if d := a.RuleFor(t, "SandboxEgressReopened"); d != 0 {
		t.Logf("SandboxEgressReopened has for: %s", d)
	}

	// Healthy: scraped (Prometheus holds the gauge at 0), and nothing at
	// the receiver for a few evaluations.
	healthy := time.Now()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		s, err := a.Samples(`sandprobe_egress_unexpected_open{node="node-a"}`)
		if err == nil && len(s) == 1 && s[0].Value == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus never scraped the target: %v %v", s, err)
		}
	}
	time.Sleep(3 * time.Second)
	if got := a.Arrivals(); len(got) > 0 {
		t.Fatalf("alerts while healthy: %v", got)
	}

	open.WithLabelValues("node-a", "sandboxes").Set(2)
	reopened := time.Now()
	want := map[string]string{"node": "node-a", "namespace": "sandboxes", "severity": "critical"}
	fired, ok := a.Wait(reopened, 30*time.Second, Firing("SandboxEgressReopened", want))
	if !ok {
		t.Fatalf("SandboxEgressReopened never arrived; arrivals: %v", a.Arrivals())
	}
	t.Logf("healthy for %s; reopen → alert at the receiver in %s: %s", reopened.Sub(healthy).Round(time.Millisecond), fired.At.Sub(reopened).Round(time.Millisecond), fired)

	open.WithLabelValues("node-a", "sandboxes").Set(0)
	undone := time.Now()
	resolved, ok := a.Wait(undone, 30*time.Second, Resolved("SandboxEgressReopened", want))
	if !ok {
		t.Fatalf("SandboxEgressReopened never resolved; arrivals: %v", a.Arrivals())
	}
	t.Logf("undo → resolved in %s", resolved.At.Sub(undone).Round(time.Millisecond))
	for _, al := range a.Arrivals() {
		if al.Name != "SandboxEgressReopened" {
			t.Errorf("unexpected alert: %s", al)
		}
	}
}

// TestRuleFor: the `for:` of a shipped rule is read, not assumed; a rule
// that is not there is an error naming it.
func TestRuleFor(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "rules.yml")
	if err := os.WriteFile(f, []byte("groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    for: 1m30s\n  - alert: B\n    expr: up == 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		alert string
		want  time.Duration
		err   string
	}{
		{"A", 90 * time.Second, ""},
		{"B", 0, ""},
		{"C", 0, "no alert C"},
	} {
		got, err := ruleFor(f, c.alert)
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("ruleFor(%s) = %s, %v; want %s, %q", c.alert, got, err, c.want, c.err)
		}
	}
	// The shipped rules parse, and SandboxEgressReopened is there.
	if _, err := ruleFor(filepath.Join(ModuleRoot(t), ShippedRules), "SandboxEgressReopened"); err != nil {
		t.Error(err)
	}
}
