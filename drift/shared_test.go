package drift_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/report"
)

// TestOneFindingPerPolicyObject: 100 sandboxes under a NetworkPolicy that
// opens the world and every destination on port 53 are two findings, one
// per broken rule of that one object, each naming the 100 sandboxes it
// affects — not 200 — in the report, the text and the metrics; the pods'
// own findings stay theirs; every sandbox still counts as drifted. Read
// whole and streamed alike.
func TestOneFindingPerPolicyObject(t *testing.T) {
	p := loadPolicy(t, "policy.yaml")
	ns := p.Spec.Namespaces[0]
	wide := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: "wide", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"sandbox": "true"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{To: []networkingv1.NetworkPolicyPeer{ipPeer("0.0.0.0/0")}},
				{Ports: []networkingv1.NetworkPolicyPort{port(53, "UDP")}},
			},
		},
	}
	objs := append(egressBase(p, false), wide)
	const n = 100
	for i := range n {
		pod := hardenedPod(p, ns, fmt.Sprintf("agent-%d", i))
		if i == 7 {
			pod.Spec.Containers[0].SecurityContext.Privileged = ptr(true)
		}
		objs = append(objs, pod)
	}
	_, col := checkYAML(t, p, toYAML(t, objs))
	col.Summary(p)
	run := report.Run{Policy: p.Metadata.Name, Backend: "drift", Scanned: col.Scanned, Findings: col.Findings, Phases: map[string]float64{"drift": 1}}

	shared := map[string]report.Finding{}
	for _, f := range col.Findings {
		if f.Status == report.Fail && strings.HasPrefix(f.Check, "drift.netpol.") {
			if _, twice := shared[f.Check]; twice {
				t.Errorf("%s reported twice: %s and %s", f.Check, shared[f.Check].Target, f.Target)
			}
			shared[f.Check] = f
		}
	}
	for _, check := range []string{drift.NetpolWorld, drift.NetpolAnyDestination} {
		f, ok := shared[check]
		if !ok {
			t.Fatalf("no %s among %v", check, shared)
		}
		if f.Target != "networkpolicy/"+ns+"/wide" || f.Namespace != ns || len(f.Affects) != n ||
			f.Affects[0] != "pod/"+ns+"/agent-0" || !strings.Contains(f.Evidence, "it applies to 100 sandboxes") || f.File == "" || f.Line == 0 {
			t.Errorf("%s: target %s namespace %s, %d affected (%v…), evidence %q, at %s:%d", check, f.Target, f.Namespace, len(f.Affects), f.Affects[:min(2, len(f.Affects))], f.Evidence, f.File, f.Line)
		}
	}
	if len(shared) != 2 {
		t.Errorf("policy findings %v, want world and any-destination", shared)
	}
	if col.Drifted != n {
		t.Errorf("drifted %d, want every sandbox the policy opens (%d)", col.Drifted, n)
	}
	if got := checksByTarget(col.Findings)["pod/"+ns+"/agent-7"]; !slicesEqual(got, []string{drift.NetpolAnyDestination, drift.NetpolWorld, drift.PodPrivileged}) {
		t.Errorf("agent-7: %v", got)
	}

	path := filepath.Join(t.TempDir(), "wide.yaml")
	if err := os.WriteFile(path, toYAML(t, objs), 0o644); err != nil {
		t.Fatal(err)
	}
	scol, sp, err := streamed(t, p, []string{path}, nil, "", 4)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := sp.Slice()
	if err != nil {
		t.Fatal(err)
	}
	streamedShared := 0
	for _, f := range fs {
		if f.Status == report.Fail && strings.HasPrefix(f.Check, "drift.netpol.") {
			streamedShared++
			if len(f.Affects) != n || f.Target != "networkpolicy/"+ns+"/wide" {
				t.Errorf("streamed %s: target %s, %d affected", f.Check, f.Target, len(f.Affects))
			}
		}
	}
	if streamedShared != 2 || scol.Drifted != n {
		t.Errorf("streamed: %d policy findings, %d drifted", streamedShared, scol.Drifted)
	}

	var text bytes.Buffer
	if err := (report.Text{}).Write(&text, run); err != nil {
		t.Fatal(err)
	}
	if c := strings.Count(text.String(), drift.NetpolWorld); c != 1 {
		t.Errorf("the text report names %s %d times, want once:\n%s", drift.NetpolWorld, c, text.String())
	}
	if !strings.Contains(text.String(), "affects: pod/"+ns+"/agent-0, pod/"+ns+"/agent-1, pod/"+ns+"/agent-2, pod/"+ns+"/agent-3, pod/"+ns+"/agent-4 and 95 more") {
		t.Errorf("the text report does not name the affected sandboxes:\n%s", text.String())
	}

	reg := prometheus.NewRegistry()
	m, err := report.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(run, run.StartedAt)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != report.MetricDriftFindings {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if lp.GetName() == "rule" && (lp.GetValue() == drift.NetpolWorld || lp.GetValue() == drift.NetpolAnyDestination) && mt.GetGauge().GetValue() != 1 {
					t.Errorf("%s %s = %v, want 1 (one policy object)", report.MetricDriftFindings, lp.GetValue(), mt.GetGauge().GetValue())
				}
			}
		}
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }
