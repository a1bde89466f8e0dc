package drift_test

import (
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
)

// TestDeclaredLocations: the proxy and resolver locations a policy declares
// explain exactly their rules — the place on its port — and nothing near
// them: the resolver's address on another port, a wider block around it, or
// another namespace on the proxy port is drift.
func TestDeclaredLocations(t *testing.T) {
	p := loadPolicy(t, "located-policy.yaml")
	ns := p.Spec.Namespaces[0]
	base := render.NetworkPolicy(p, ns)
	port443 := intstr.FromInt32(443)
	cases := []struct {
		name  string
		edit  func(np *networkingv1.NetworkPolicy)
		check string // "" = no finding
		about string
	}{
		{"as rendered", func(*networkingv1.NetworkPolicy) {}, "", ""},
		{"resolver address on 443", func(np *networkingv1.NetworkPolicy) {
			np.Spec.Egress[0].Ports[1].Port = &port443
		}, drift.NetpolPort, "169.254.20.10/32"},
		{"a block around the resolver", func(np *networkingv1.NetworkPolicy) {
			np.Spec.Egress[0].To[0].IPBlock.CIDR = "169.254.20.0/24"
		}, drift.NetpolIPBlock, "169.254.20.0/24"},
		{"the proxy port in another namespace", func(np *networkingv1.NetworkPolicy) {
			np.Spec.Egress[1].To[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] = "default"
		}, drift.NetpolPeer, "podSelector"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			np := base.DeepCopy()
			c.edit(np)
			got := netpolDrift(t, p, ns, np)
			switch {
			case c.check == "" && len(got) > 0:
				t.Errorf("rendered locations drift: %v", got)
			case c.check != "" && (len(got) != 1 || !strings.HasPrefix(got[0], c.check) || !strings.Contains(got[0], c.about)):
				t.Errorf("findings %v, want one %s about %s", got, c.check, c.about)
			}
		})
	}
}

// netpolDrift is what drift says of a hardened sandbox agent-1 in ns under
// p with np its only egress policy: "CHECK ACTUAL" per drift.netpol finding.
func netpolDrift(t *testing.T, p *policy.Policy, ns string, np *networkingv1.NetworkPolicy) []string {
	t.Helper()
	e, err := drift.NewEngine(p)
	if err != nil {
		t.Fatal(err)
	}
	e.SetEgressKnown(true)
	if err := e.AddNetworkPolicy(np); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range e.CheckPod(hardenedPod(p, ns, "agent-1")) {
		if strings.HasPrefix(f.Check, "drift.netpol.") {
			got = append(got, f.Check+" "+f.Actual)
		}
	}
	return got
}
