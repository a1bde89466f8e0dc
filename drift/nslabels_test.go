package drift_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
)

// statusesByCheck is each check on the target with its status
// ("drift.anp.world=inconclusive").
func statusesByCheck(fs []report.Finding, target string) []string {
	var out []string
	for _, f := range fs {
		if slices.Contains(targetsOf(f), target) {
			out = append(out, f.Check+"="+string(f.Status))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestNamespaceLabelsUnknown: drift -f with a cluster-wide policy that
// selects the sandbox namespace by a label, without the namespace's
// Namespace object. Its labels are unknown, so whether the policy applies
// cannot be told: the verdicts it could change are inconclusive (never a
// silent pass, never a plain fail), the run says which selectors could not
// be judged, and the labels given with --namespace-labels (or the
// Namespace object) settle it either way.
func TestNamespaceLabelsUnknown(t *testing.T) {
	p := loadPolicy(t, "policy.yaml")
	const ns, target = "sandboxes", "pod/sandboxes/agent"
	byTeam := map[string]any{"namespaces": map[string]any{"matchLabels": map[string]any{"team": "agents"}}}
	world := []any{networks("0.0.0.0/0", "::/0")}
	ccnp := func(name string, sel map[string]any, egress ...any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "cilium.io/v2", "kind": drift.CiliumClusterwideNetworkPolicyKind, "metadata": map[string]any{"name": name},
			"spec": map[string]any{"endpointSelector": map[string]any{"matchLabels": sel}, "egress": egress},
		}}
	}
	netpol := render.NetworkPolicy(p, ns)
	pod := hardenedPod(p, ns, "agent")
	for _, c := range []struct {
		name    string
		objects []any
		// want: the pod's checks with their status, with the namespace's
		// labels unknown, labelled team=agents, and labelled otherwise.
		unknown, labelled, other []string
		selector                 string // named in the note when unknown
	}{
		{"anp allows the world", []any{netpol, pod, admin(drift.AdminNetworkPolicyKind, "team-open", map[string]any{
			"priority": int64(20), "subject": byTeam, "egress": []any{egressRule("Allow", world)}})},
			[]string{drift.ANPWorld + "=inconclusive"}, []string{drift.ANPWorld + "=fail"}, nil, "adminnetworkpolicy/team-open"},
		{"ccnp allows the world", []any{netpol, pod, ccnp("team-world", map[string]any{"k8s:io.cilium.k8s.namespace.labels.team": "agents"},
			map[string]any{"toEntities": []any{"world"}})},
			[]string{drift.CiliumWorld + "=inconclusive"}, []string{drift.CiliumWorld + "=fail"}, nil, "ciliumclusterwidenetworkpolicy/team-world"},
		// Healthy: the only egress policy is a cluster-wide default deny by
		// namespace label. Unknown labels must not become a plain fail.
		{"ccnp default deny, no netpol", []any{pod, ccnp("team-deny", map[string]any{"k8s:io.cilium.k8s.namespace.labels.team": "agents"},
			map[string]any{"toEndpoints": []any{map[string]any{"matchLabels": map[string]any{"k8s:io.kubernetes.pod.namespace": "kube-system", "k8s-app": "kube-dns"}}},
				"toPorts": []any{map[string]any{"ports": []any{map[string]any{"port": "53", "protocol": "UDP"}}}}})},
			[]string{drift.NetpolEgressUnrestricted + "=inconclusive"}, nil, []string{drift.NetpolEgressUnrestricted + "=fail"}, "ciliumclusterwidenetworkpolicy/team-deny"},
		{"anp deny everything shadows the netpol", []any{pod, ipWorldNetpol(p, ns), admin(drift.AdminNetworkPolicyKind, "team-deny", map[string]any{
			"priority": int64(5), "subject": byTeam, "egress": []any{egressRule("Deny", world)}})},
			[]string{drift.NetpolWorld + "=inconclusive"}, nil, []string{drift.NetpolWorld + "=fail"}, "adminnetworkpolicy/team-deny"},
		// Selected by the name label alone: judged without the Namespace.
		{"anp by name", []any{netpol, pod, admin(drift.AdminNetworkPolicyKind, "by-name", map[string]any{
			"priority": int64(20), "subject": map[string]any{"namespaces": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}}},
			"egress": []any{egressRule("Allow", world)}})},
			[]string{drift.ANPWorld + "=fail"}, []string{drift.ANPWorld + "=fail"}, []string{drift.ANPWorld + "=fail"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := toYAML(t, append(declaredNamespacesBut(p, ns), c.objects...))
			for _, v := range []struct {
				what   string
				labels map[string]map[string]string
				want   []string
			}{
				{"unknown", nil, c.unknown},
				{"team=agents", map[string]map[string]string{ns: {"team": "agents"}}, c.labelled},
				{"team=other", map[string]map[string]string{ns: {"team": "other"}}, c.other},
			} {
				col := checkWithLabels(t, p, data, v.labels)
				if got := statusesByCheck(col.Findings, target); !slices.Equal(got, v.want) {
					t.Errorf("%s: checks %v, want %v\n%s", v.what, got, v.want, findingsFor(col.Findings, target))
				}
				noted := slices.ContainsFunc(col.Notes, func(n string) bool {
					return strings.Contains(n, "namespace "+ns+": its labels are unknown") && strings.Contains(n, c.selector)
				})
				if want := v.labels == nil && c.selector != ""; noted != want {
					t.Errorf("%s: note naming %s: %v, want %v (%q)", v.what, c.selector, noted, want, col.Notes)
				}
				// Streamed, the same.
				path := filepath.Join(t.TempDir(), "in.yaml")
				if err := os.WriteFile(path, data, 0o644); err != nil {
					t.Fatal(err)
				}
				e, err := drift.NewEngine(p)
				if err != nil {
					t.Fatal(err)
				}
				scol := drift.NewCollector()
				if err := (&drift.FileScan{Engine: e, Paths: []string{path}, NamespaceLabels: v.labels, Workers: 2}).Run(scol); err != nil {
					t.Fatal(err)
				}
				if got := statusesByCheck(scol.Findings, target); !slices.Equal(got, v.want) {
					t.Errorf("%s, streamed: checks %v, want %v", v.what, got, v.want)
				}
			}
		})
	}
}

// declaredNamespacesBut are the policy's Namespace objects but one.
func declaredNamespacesBut(p *policy.Policy, but string) []any {
	var out []any
	for _, ns := range p.Spec.Namespaces {
		if ns != but {
			out = append(out, namespaceObject(ns, nil))
		}
	}
	return out
}

// ipWorldNetpol is the rendered NetworkPolicy plus a rule to 0.0.0.0/0.
func ipWorldNetpol(p *policy.Policy, ns string) any {
	np := render.NetworkPolicy(p, ns)
	np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{ipPeer("0.0.0.0/0")}})
	return np
}

func checkWithLabels(t *testing.T, p *policy.Policy, data []byte, nsLabels map[string]map[string]string) *drift.Collector {
	t.Helper()
	m := drift.Manifests{NamespaceLabels: nsLabels}
	if err := m.DecodeManifests(strings.NewReader(string(data)), "test"); err != nil {
		t.Fatal(err)
	}
	e, err := drift.NewEngine(p)
	if err != nil {
		t.Fatal(err)
	}
	col := drift.NewCollector()
	if err := drift.CheckManifests(e, &m, col); err != nil {
		t.Fatal(err)
	}
	return col
}
