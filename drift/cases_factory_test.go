package drift_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// factoryCases break the in-cluster peers of fixtures/factory-policy.yaml
// (no proxy; two brokers in namespace factory, allowed where they run):
// the conventional rules a cluster already holds for its brokers are no
// drift, a broker rule widened to every pod of its namespace is, and so is
// one whose podSelector no longer names the broker. Every pod is also
// selected by the rendered NetworkPolicy and CiliumNetworkPolicy.
func factoryCases() []egressCase {
	brokerNS := &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "factory"}}
	toBroker := func(pods map[string]string) networkingv1.NetworkPolicyEgressRule {
		peer := networkingv1.NetworkPolicyPeer{NamespaceSelector: brokerNS}
		if pods != nil {
			peer.PodSelector = &metav1.LabelSelector{MatchLabels: pods}
		}
		return networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{peer}, Ports: []networkingv1.NetworkPolicyPort{port(8080, corev1.ProtocolTCP)}}
	}
	endpoints := func(labels map[string]any, ports []any) map[string]any {
		sel := map[string]any{"k8s:io.kubernetes.pod.namespace": "factory"}
		for k, v := range labels {
			sel["k8s:"+k] = v
		}
		r := map[string]any{"toEndpoints": []any{map[string]any{"matchLabels": sel}}}
		if ports != nil {
			r["toPorts"] = ports
		}
		return r
	}
	service := func(name string) map[string]any {
		return map[string]any{"toServices": []any{map[string]any{"k8sService": map[string]any{"serviceName": name, "namespace": "factory"}}}}
	}
	return []egressCase{
		// What render wrote, alone: zero drift.
		{"factory-rendered", nil, "", func(string) []any { return nil }},
		{"factory-conventional", nil, "", func(ns string) []any {
			// What a cluster holds for its brokers besides sandprobe's:
			// a NetworkPolicy peer, toEndpoints, toServices (no toPorts),
			// and the old toFQDNs rule for a Service name.
			return []any{
				netpol(ns, "allow-brokers-conventional", "factory-conventional", toBroker(map[string]string{"app": "model-broker"}), toBroker(map[string]string{"app": "git-broker", "tier": "edge"})),
				cnp(ns, "to-brokers-conventional", "factory-conventional",
					endpoints(map[string]any{"app": "git-broker"}, ciliumPorts("8080")),
					service("model-broker"),
					map[string]any{"toFQDNs": []any{map[string]any{"matchName": "model-broker.factory.svc.cluster.local"}}, "toPorts": ciliumPorts("80")}),
			}
		}},
		{"broker-every-pod", []string{drift.NetpolPeer}, "", func(ns string) []any {
			return []any{netpol(ns, "allow-brokers-every-pod", "broker-every-pod", toBroker(nil))}
		}},
		{"broker-every-pod-cilium", []string{drift.CiliumPeer}, "", func(ns string) []any {
			return []any{cnp(ns, "to-brokers-every-pod-cilium", "broker-every-pod-cilium", endpoints(nil, ciliumPorts("8080")))}
		}},
		{"broker-typo", []string{drift.NetpolPeer}, "", func(ns string) []any {
			return []any{netpol(ns, "allow-brokers-typo", "broker-typo", toBroker(map[string]string{"app": "model-brokr"}))}
		}},
		{"broker-all-ports", []string{drift.CiliumPeer}, "", func(ns string) []any {
			return []any{cnp(ns, "to-brokers-all-ports", "broker-all-ports", endpoints(map[string]any{"app": "model-broker"}, nil))}
		}},
		{"broker-service-ports", []string{drift.CiliumPeer}, "", func(ns string) []any {
			r := service("model-broker")
			r["toPorts"] = ciliumPorts("80")
			return []any{cnp(ns, "to-brokers-service-ports", "broker-service-ports", r)}
		}},
	}
}

func factoryObjects(p *policy.Policy, prefix string) []any {
	out := egressBase(p, true)
	for _, c := range factoryCases() {
		ns := caseNamespace(p, prefix, c.ns)
		out = append(out, c.objects(ns)...)
		out = append(out, c.pod(p, prefix))
	}
	return out
}

// TestAdminPeerToBroker: an admin network policy that allows the
// sandboxes their broker's pods on its port is no drift; one that allows
// every pod of the broker's namespace is named as widened.
func TestAdminPeerToBroker(t *testing.T) {
	p := loadPolicy(t, "factory-policy.yaml")
	anp := func(name string, pods map[string]any) *unstructured.Unstructured {
		return admin(drift.AdminNetworkPolicyKind, name, map[string]any{
			"priority": int64(10), "subject": nsSubject("factory-sandboxes"),
			"egress": []any{egressRule("Allow", []any{map[string]any{"pods": map[string]any{
				"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "factory"}},
				"podSelector":       map[string]any{"matchLabels": pods},
			}}}, portNumber(8080))},
		})
	}
	for _, c := range []struct {
		name string
		pods map[string]any
		want int
	}{
		{"the broker's pods", map[string]any{"app": "model-broker"}, 0},
		{"every pod of the broker's namespace", map[string]any{}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := append(declaredNamespaces(p), anp("to-broker", c.pods), hardenedPod(p, "factory-sandboxes", "agent"))
			objs = append(objs, egressBase(p, true)...)
			_, col := checkYAML(t, p, toYAML(t, objs))
			n := 0
			for _, f := range col.Findings {
				if f.Check == drift.ANPPeer && f.Status == report.Fail {
					n++
					if !strings.Contains(f.Actual, "every pod of namespace factory") || !strings.Contains(f.Fix, "app=model-broker") {
						t.Errorf("a widened admin peer must say so and name the broker's labels: %+v", f)
					}
				}
			}
			if n != c.want {
				t.Errorf("%d %s findings, want %d: %+v", n, drift.ANPPeer, c.want, col.Findings)
			}
		})
	}
}
