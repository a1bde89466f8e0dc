package drift_test

import (
	"path/filepath"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
)

// TestDirectTopology: the factory as make e2e runs it (no proxy; brokers
// where they run; package hosts reached directly, by address): what render
// writes is no drift, and the breaks users make are named — a broker's
// podSelector typo, a host's block widened. Behind a proxy, an ipBlock
// for an allowed host's address is a way around the proxy: drift.
func TestDirectTopology(t *testing.T) {
	p, _, err := policy.LoadFile(filepath.Join(repoRoot(), "hack", "e2e", "factory-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ns := p.Spec.Namespaces[0]
	proxied := *p
	proxied.Spec.Egress.Proxy = "http://10.99.31.28:3128"
	cases := []struct {
		name  string
		p     *policy.Policy
		edit  func(np *networkingv1.NetworkPolicy)
		check string // "" = no finding
		about string
	}{
		{"as rendered", p, func(*networkingv1.NetworkPolicy) {}, "", ""},
		{"a broker's podSelector typo", p, func(np *networkingv1.NetworkPolicy) {
			np.Spec.Egress[1].To[0].PodSelector.MatchLabels["app"] = "model-brokr"
		}, drift.NetpolPeer, "app=model-brokr"},
		{"a package host's block widened", p, func(np *networkingv1.NetworkPolicy) {
			np.Spec.Egress[3].To[0].IPBlock.CIDR = "10.99.10.0/24"
		}, drift.NetpolIPBlock, "10.99.10.0/24"},
		{"behind a proxy, the host's address allowed", &proxied, func(np *networkingv1.NetworkPolicy) {
			direct := render.NetworkPolicy(p, ns)
			np.Spec.Egress = append(np.Spec.Egress, direct.Spec.Egress[3])
		}, drift.NetpolIPBlock, "10.99.10.10/32"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			np := render.NetworkPolicy(c.p, ns)
			c.edit(np)
			got := netpolDrift(t, c.p, ns, np)
			switch {
			case c.check == "" && len(got) > 0:
				t.Errorf("rendered direct topology drifts: %v", got)
			case c.check != "" && (len(got) != 1 || !strings.HasPrefix(got[0], c.check) || !strings.Contains(got[0], c.about)):
				t.Errorf("findings %v, want one %s about %s", got, c.check, c.about)
			}
		})
	}
}
