package drift_test

import (
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/policy"
)

// TestEgressPolicies: which egress policies select a pod, as the kube
// runner's parity check asks it: NetworkPolicies by labels (matchLabels and
// expressions, an empty selector for everyone), ingress-only ones left out,
// Cilium rules with their source prefixes, namespace and service-account
// keys, cluster-wide ones everywhere; and the label keys they look at.
func TestEgressPolicies(t *testing.T) {
	p, _, err := policy.LoadFile("../fixtures/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e, err := drift.NewEngine(p)
	if err != nil {
		t.Fatal(err)
	}
	egress := []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	for _, np := range []*networkingv1.NetworkPolicy{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "sb", Name: "deny"}, Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"sandbox": "true"}}, PolicyTypes: egress}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "sb", Name: "team-a"}, Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"sandbox": "true", "team": "a"}}, PolicyTypes: egress}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "sb", Name: "all"}, Spec: networkingv1.NetworkPolicySpec{PolicyTypes: egress}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "sb", Name: "not-gpu"}, Spec: networkingv1.NetworkPolicySpec{PolicyTypes: egress,
			PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "gpu", Operator: metav1.LabelSelectorOpDoesNotExist}}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "sb", Name: "ingress-only"}, Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "deny"}, Spec: networkingv1.NetworkPolicySpec{PolicyTypes: egress}},
	} {
		if err := e.AddNetworkPolicy(np); err != nil {
			t.Fatal(err)
		}
	}
	cilium := func(kind, ns, name string, sel map[string]any) *unstructured.Unstructured {
		md := map[string]any{"name": name}
		if ns != "" {
			md["namespace"] = ns
		}
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cilium.io/v2", "kind": kind, "metadata": md,
			"spec": map[string]any{"endpointSelector": map[string]any{"matchLabels": sel}, "egress": []any{map[string]any{"toFQDNs": []any{map[string]any{"matchName": "api.anthropic.com"}}}}}}}
	}
	for _, cp := range []*unstructured.Unstructured{
		cilium(drift.CiliumNetworkPolicyKind, "sb", "fqdn", map[string]any{"k8s:sandbox": "true"}),
		cilium(drift.CiliumNetworkPolicyKind, "sb", "by-sa", map[string]any{"io.cilium.k8s.policy.serviceaccount": "agent"}),
		cilium(drift.CiliumClusterwideNetworkPolicyKind, "", "everywhere", map[string]any{"k8s:io.kubernetes.pod.namespace": "sb"}),
	} {
		if err := e.AddCiliumPolicy(cp); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name, sa string
		labels   map[string]string
		want     []string
	}{
		{"a sandbox", "default", map[string]string{"sandbox": "true"},
			[]string{"ciliumclusterwidenetworkpolicy/everywhere", "ciliumnetworkpolicy/sb/fqdn", "networkpolicy/sb/all", "networkpolicy/sb/deny", "networkpolicy/sb/not-gpu"}},
		{"a sandbox of team a", "default", map[string]string{"sandbox": "true", "team": "a"},
			[]string{"ciliumclusterwidenetworkpolicy/everywhere", "ciliumnetworkpolicy/sb/fqdn", "networkpolicy/sb/all", "networkpolicy/sb/deny", "networkpolicy/sb/not-gpu", "networkpolicy/sb/team-a"}},
		{"an unlabelled gpu pod as the agent account", "agent", map[string]string{"gpu": "1"},
			[]string{"ciliumclusterwidenetworkpolicy/everywhere", "ciliumnetworkpolicy/sb/by-sa", "networkpolicy/sb/all"}},
	}
	for _, c := range cases {
		if got := e.EgressPolicies("sb", c.labels, c.sa); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if got := e.EgressPolicies("elsewhere", map[string]string{"sandbox": "true"}, ""); len(got) != 0 {
		t.Errorf("in a namespace of its own: %v, want none", got)
	}
	if got, want := e.SelectorKeys("sb"), []string{"gpu", "sandbox", "team"}; !slices.Equal(got, want) {
		t.Errorf("selector keys %v, want %v (no Cilium namespace or service-account key, no ingress-only policy's)", got, want)
	}
}

// TestReadCilium: what drift reads of a pod's egress under Cilium, for the
// comparison with the agent's endpoint (hack/e2e/e2etool cilium-view). A
// rule that only turns on default deny (egress: [{}]) puts the pod under
// enforcement but derives no rule; enableDefaultDeny egress: false adds
// rules without enforcement; toFQDNs become "HOST PORT" (0: every port).
func TestReadCilium(t *testing.T) {
	p, _, err := policy.LoadFile("../fixtures/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cnp := func(name string, spec map[string]any) *unstructured.Unstructured {
		spec["endpointSelector"] = map[string]any{"matchLabels": map[string]any{"sandbox": "true"}}
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cilium.io/v2", "kind": drift.CiliumNetworkPolicyKind,
			"metadata": map[string]any{"name": name, "namespace": "sb"}, "spec": spec}}
	}
	deny := cnp("deny-only", map[string]any{"egress": []any{map[string]any{}}})
	names := cnp("names", map[string]any{"egress": []any{
		map[string]any{"toFQDNs": []any{map[string]any{"matchName": "api.example.com"}, map[string]any{"matchPattern": "*.git.example.com"}},
			"toPorts": []any{map[string]any{"ports": []any{map[string]any{"port": "443", "protocol": "TCP"}}}}},
		map[string]any{"toFQDNs": []any{map[string]any{"matchName": "any-port.example.com"}}},
	}})
	off := cnp("no-default-deny", map[string]any{"enableDefaultDeny": map[string]any{"egress": false},
		"egress": []any{map[string]any{"toEntities": []any{"world"}}}})
	sandbox := map[string]string{"sandbox": "true"}
	for _, c := range []struct {
		name      string
		policies  []*unstructured.Unstructured
		deny      bool
		withRules []string
		names     []string
	}{
		{"deny only", []*unstructured.Unstructured{deny}, true, nil, nil},
		{"names", []*unstructured.Unstructured{deny, names}, true, []string{"ciliumnetworkpolicy/sb/names"},
			[]string{"*.git.example.com 443", "any-port.example.com 0", "api.example.com 443"}},
		{"no default deny", []*unstructured.Unstructured{off}, false, []string{"ciliumnetworkpolicy/sb/no-default-deny"}, nil},
	} {
		e, err := drift.NewEngine(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, cp := range c.policies {
			if err := e.AddCiliumPolicy(cp.DeepCopy()); err != nil {
				t.Fatal(err)
			}
		}
		rd := e.ReadCilium("sb", sandbox, "default")
		if rd.DefaultDeny != c.deny || !slices.Equal(rd.WithRules, c.withRules) || !slices.Equal(rd.Names, c.names) {
			t.Errorf("%s: read %+v, want default deny %v, rules from %v, names %v", c.name, rd, c.deny, c.withRules, c.names)
		}
		if other := e.ReadCilium("sb", map[string]string{"app": "x"}, "default"); other.DefaultDeny || len(other.Policies) > 0 {
			t.Errorf("%s: a pod no rule selects reads %+v", c.name, other)
		}
	}
}
