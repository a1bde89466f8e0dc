package render_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
)

// TestInClusterPeers: the factory's brokers are allowed where they run —
// a NetworkPolicy peer (namespace and pods) and a Cilium toEndpoints rule
// on the port the pods listen on — never by a toFQDNs rule for their
// Service name, which Cilium cannot match on ClusterIP traffic.
func TestInClusterPeers(t *testing.T) {
	p := load(t, "factory-policy.yaml")
	if err := render.CheckEgress(p, render.KindCilium); err != nil {
		t.Fatalf("the factory policy does not render for Cilium: %v", err)
	}
	// The package hosts are names: a NetworkPolicy cannot hold them, the brokers it can.
	err := render.CheckEgress(p, render.KindNetworkPolicy)
	if err == nil || strings.Contains(err.Error(), "broker") || !strings.Contains(err.Error(), "registry.npmjs.org") {
		t.Errorf("CheckEgress(networkpolicy) = %v, want only the package hosts named", err)
	}
	np := render.NetworkPolicy(p, "factory-sandboxes")
	found := 0
	for _, r := range np.Spec.Egress {
		for _, peer := range r.To {
			if peer.NamespaceSelector == nil || peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "factory" {
				continue
			}
			if peer.PodSelector == nil || !strings.HasSuffix(peer.PodSelector.MatchLabels["app"], "-broker") {
				t.Errorf("a broker peer that is every pod of its namespace: %+v", peer)
			}
			if len(r.Ports) != 1 || r.Ports[0].Port.IntValue() != 8080 {
				t.Errorf("broker rule on %v, want the pods' port 8080 only", r.Ports)
			}
			found++
		}
	}
	if found != 2 {
		t.Errorf("%d broker peers in the NetworkPolicy, want 2", found)
	}
	var b bytes.Buffer
	if err := render.WriteYAML(&b, render.CiliumNetworkPolicy(p, "factory-sandboxes")); err != nil {
		t.Fatal(err)
	}
	y := b.String()
	for _, want := range []string{"k8s:app: model-broker", "k8s:app: git-broker", "port: \"8080\"", "matchName: model-broker.factory.svc.cluster.local"} {
		if !strings.Contains(y, want) {
			t.Errorf("CiliumNetworkPolicy lacks %q:\n%s", want, y)
		}
	}
	if strings.Contains(y, "toServices") || strings.Count(y, "toFQDNs") != 3 {
		t.Errorf("a broker allowed by name or by toServices:\n%s", y)
	}
}

// TestServiceLocationNeedsPods: a Service alone cannot be rendered (a
// NetworkPolicy selects pods; Cilium's toServices matches only Services
// without a selector): render refuses, naming the field.
func TestServiceLocationNeedsPods(t *testing.T) {
	p, err := policy.Load([]byte(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: t}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  egress:
    allow: [{host: model-broker.factory.svc, port: 80, reason: r, location: {namespace: factory, service: model-broker}}]
    dns: {resolverLocation: {namespace: kube-system, podSelector: {matchLabels: {k8s-app: kube-dns}}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []render.EgressKind{render.KindNetworkPolicy, render.KindCilium} {
		err := render.CheckEgress(p, kind)
		if err == nil || !strings.Contains(err.Error(), "spec.egress.allow[0].location.podSelector") {
			t.Errorf("%s: %v, want the missing podSelector named", kind, err)
		}
	}
}

// TestDNSRuleAllowsSearchExpansions: a sandbox pod's C library asks for
// each search-list expansion of a name before the name itself, and stops
// at a REFUSED one; the Cilium DNS rule allows them, in the namespace it
// is rendered for and the declared cluster domain.
func TestDNSRuleAllowsSearchExpansions(t *testing.T) {
	p := load(t, "factory-policy.yaml")
	for _, c := range []struct{ domain, want string }{
		{"", "registry.npmjs.org.factory-sandboxes.svc.cluster.local"},
		{"corp.k8s", "registry.npmjs.org.factory-sandboxes.svc.corp.k8s"},
	} {
		p.Spec.Egress.DNS.ClusterDomain = c.domain
		var b bytes.Buffer
		if err := render.WriteYAML(&b, render.CiliumNetworkPolicy(p, "factory-sandboxes")); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"matchName: " + c.want, "matchName: registry.npmjs.org\n", "matchPattern: '*.nuget.org.svc."} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("clusterDomain %q: the DNS rule lacks %q", c.domain, want)
			}
		}
	}
}

// TestDirectHostsByAddress: with no proxy, a NetworkPolicy allows a named
// host by the addresses the policy gives for it (one ipBlock each, on its
// port); the Cilium policy still allows it by name. Behind a proxy the
// addresses are what the proxy-bypass check dials: never allowed directly.
func TestDirectHostsByAddress(t *testing.T) {
	p, err := policy.Load([]byte(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: t}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  egress:
    allow:
      - {host: registry.npmjs.org, port: 443, addresses: [104.16.0.34, "2606:4700::6810:22"], reason: npm}
    dns: {resolverLocation: {cidrs: [10.96.0.10/32]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := render.CheckEgress(p, render.KindNetworkPolicy, render.KindCilium); err != nil {
		t.Fatalf("a named host with its addresses does not render: %v", err)
	}
	var b bytes.Buffer
	if err := render.WriteYAML(&b, render.NetworkPolicy(p, "agents")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cidr: 104.16.0.34/32", "cidr: 2606:4700::6810:22/128", "port: 443"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("NetworkPolicy lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "not-expressible") {
		t.Errorf("the host is marked not expressible:\n%s", b.String())
	}
	b.Reset()
	if err := render.WriteYAML(&b, render.CiliumNetworkPolicy(p, "agents")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "matchName: registry.npmjs.org") {
		t.Errorf("CiliumNetworkPolicy does not allow the host by name:\n%s", b.String())
	}
	p.Spec.Egress.Proxy = "http://10.96.0.20:3128"
	b.Reset()
	if err := render.WriteYAML(&b, render.NetworkPolicy(p, "agents")); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "104.16.0.34") {
		t.Errorf("behind a proxy, the host's address is allowed directly:\n%s", b.String())
	}
	p.Spec.Egress.Proxy = ""
	p.Spec.Egress.Allow[0].Addresses = nil
	if err := render.CheckEgress(p, render.KindNetworkPolicy); err == nil || !strings.Contains(err.Error(), "spec.egress.allow[0].host") {
		t.Errorf("a named host without addresses: %v, want spec.egress.allow[0].host named", err)
	}
}
