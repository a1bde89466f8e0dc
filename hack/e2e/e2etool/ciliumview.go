package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/policy"
)

// ciliumView compares drift's reading of the cluster's egress policies
// with the Cilium agent's own view of each pod's endpoint (issue 28,
// item 3): for every running pod Cilium manages, whether its egress is
// enforced, which policies the agent derived its egress rules from, and
// which toFQDNs selectors (host and port) it allows. drift reads the
// objects as documents; the agent compiled them into the datapath. A
// difference is a finding against drift's reading of Cilium's semantics —
// or, with no spec changed, Cilium not enforcing what its specs say
// (--enable-policy=never). Exit 1 on any difference.
//
//	kubectl get namespaces,pods,networkpolicies,ciliumnetworkpolicies,ciliumclusterwidenetworkpolicies -A -o json >objects.json
//	cilium-dbg endpoint list -o json >endpoints.json
//	e2etool cilium-view --policy P --objects objects.json --endpoints endpoints.json [--cluster NAME]
func ciliumView(args []string, w io.Writer) (int, error) {
	fs := flag.NewFlagSet("cilium-view", flag.ContinueOnError)
	policyFile := fs.String("policy", "", "the sandprobe policy (drift's declared side)")
	objects := fs.String("objects", "", "kubectl get … -A -o json: namespaces, pods and the egress policies")
	endpoints := fs.String("endpoints", "", "cilium-dbg endpoint list -o json")
	cluster := fs.String("cluster", "default", "the Cilium cluster name")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if *policyFile == "" || *objects == "" || *endpoints == "" {
		return 2, errors.New("--policy, --objects and --endpoints are required")
	}
	p, _, err := policy.LoadFile(*policyFile)
	if err != nil {
		return 2, err
	}
	e, err := drift.NewEngine(p)
	if err != nil {
		return 2, err
	}
	e.SetCiliumCluster(*cluster)
	pods, err := loadObjects(e, *objects)
	if err != nil {
		return 2, fmt.Errorf("%s: %w", *objects, err)
	}
	eps, err := loadEndpoints(*endpoints)
	if err != nil {
		return 2, fmt.Errorf("%s: %w", *endpoints, err)
	}
	byIP := map[string]*corev1.Pod{}
	for _, pod := range pods {
		if pod.Status.Phase == corev1.PodRunning && !pod.Spec.HostNetwork && pod.Status.PodIP != "" {
			byIP[pod.Status.PodIP] = pod
		}
	}
	diffs := 0
	seen := map[*corev1.Pod]bool{}
	for _, ep := range eps {
		pod := ep.pod(byIP)
		if pod == nil {
			continue // the host, the health endpoint, a pod gone since
		}
		seen[pod] = true
		rd := e.ReadCilium(pod.Namespace, pod.Labels, pod.Spec.ServiceAccountName)
		name := pod.Namespace + "/" + pod.Name
		diffs += compareEndpoint(w, name, rd, ep)
	}
	for _, pod := range pods {
		if byIP[pod.Status.PodIP] == pod && !seen[pod] {
			fmt.Fprintf(w, "DIFF %s/%s: running at %s, but the agent has no endpoint for it\n", pod.Namespace, pod.Name, pod.Status.PodIP)
			diffs++
		}
	}
	if diffs > 0 {
		return 1, nil
	}
	return 0, nil
}

// compareEndpoint prints one pod's comparison and returns its differences.
func compareEndpoint(w io.Writer, name string, rd drift.CiliumReading, ep endpoint) int {
	enforced := ep.Status.Policy.Realized.Enabled == "egress" || ep.Status.Policy.Realized.Enabled == "both"
	derived, names := ep.egress()
	var withRules []string
	for _, id := range rd.WithRules {
		if !strings.HasPrefix(id, "adminnetworkpolicy/") && !strings.HasPrefix(id, "baselineadminnetworkpolicy/") {
			withRules = append(withRules, id) // Cilium does not implement admin network policies
		}
	}
	var out []string
	if rd.DefaultDeny != enforced {
		out = append(out, fmt.Sprintf("drift reads egress %s (selected by %s); the agent: egress %s (policy-enabled %s)",
			onOff(rd.DefaultDeny), listText(rd.Policies), onOff(enforced), ep.Status.Policy.Realized.Enabled))
	}
	if !slices.Equal(withRules, derived) {
		out = append(out, fmt.Sprintf("egress rules from: drift reads %s; Cilium derived them from %s", listText(withRules), listText(derived)))
	}
	if !slices.Equal(rd.Names, names) {
		out = append(out, fmt.Sprintf("toFQDNs (host port): drift reads %s; Cilium allows %s", listText(rd.Names), listText(names)))
	}
	for _, d := range out {
		fmt.Fprintf(w, "DIFF %s: %s\n", name, d)
	}
	if len(out) == 0 {
		fmt.Fprintf(w, "agree %s: egress %s, rules from %s, %d toFQDNs selectors\n", name, onOff(enforced), listText(derived), len(names))
	}
	return len(out)
}

func onOff(b bool) string {
	if b {
		return "enforced"
	}
	return "not enforced"
}

func listText(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// loadObjects adds the namespaces and egress policies of a kubectl list to
// the engine and returns its pods.
func loadObjects(e *drift.Engine, file string) ([]*corev1.Pod, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, err
	}
	var pods []*corev1.Pod
	conv := runtime.DefaultUnstructuredConverter
	for _, item := range list.Items {
		obj := &unstructured.Unstructured{Object: item}
		switch obj.GetKind() {
		case "Namespace":
			e.SetNamespace(obj.GetName(), obj.GetLabels())
		case "Pod":
			pod := &corev1.Pod{}
			if err := conv.FromUnstructured(item, pod); err != nil {
				return nil, fmt.Errorf("pod %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
			}
			pods = append(pods, pod)
		case "NetworkPolicy":
			np := &networkingv1.NetworkPolicy{}
			if err := conv.FromUnstructured(item, np); err != nil {
				return nil, fmt.Errorf("networkpolicy %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
			}
			if err := e.AddNetworkPolicy(np); err != nil {
				return nil, err
			}
		case drift.CiliumNetworkPolicyKind, drift.CiliumClusterwideNetworkPolicyKind:
			if err := e.AddCiliumPolicy(obj); err != nil {
				return nil, err
			}
		}
	}
	return pods, nil
}

// endpoint is the part of the agent's endpoint model compared.
type endpoint struct {
	ID     int `json:"id"`
	Status struct {
		Networking struct {
			Addressing []struct {
				IPv4 string `json:"ipv4"`
				IPv6 string `json:"ipv6"`
			} `json:"addressing"`
		} `json:"networking"`
		Policy struct {
			Realized struct {
				Enabled string `json:"policy-enabled"`
				L4      struct {
					Egress []struct {
						DerivedFrom [][]string `json:"derived-from-rules"`
						Rule        string     `json:"rule"`
					} `json:"egress"`
				} `json:"l4"`
			} `json:"realized"`
		} `json:"policy"`
	} `json:"status"`
}

func loadEndpoints(file string) ([]endpoint, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var eps []endpoint
	return eps, json.Unmarshal(b, &eps)
}

func (ep endpoint) pod(byIP map[string]*corev1.Pod) *corev1.Pod {
	for _, a := range ep.Status.Networking.Addressing {
		for _, ip := range []string{a.IPv4, a.IPv6} {
			if pod := byIP[ip]; ip != "" && pod != nil {
				return pod
			}
		}
	}
	return nil
}

// egress reads the endpoint's realized egress policy: the policies its L4
// entries were derived from (as drift names them) and its toFQDNs
// selectors as "HOST PORT", each sorted and once.
func (ep endpoint) egress() (derived, names []string) {
	for _, l4 := range ep.Status.Policy.Realized.L4.Egress {
		for _, labels := range l4.DerivedFrom {
			if id := policyID(labels); id != "" {
				derived = append(derived, id)
			}
		}
		var rule struct {
			Port    int                          `json:"port"`
			L7Rules []map[string]json.RawMessage `json:"l7-rules"`
		}
		if json.Unmarshal([]byte(l4.Rule), &rule) != nil {
			continue
		}
		for _, sel := range rule.L7Rules {
			for key := range sel {
				if name, pattern, ok := fqdnSelector(key); ok {
					names = append(names, drift.CiliumFQDNHost(name, pattern)+" "+strconv.Itoa(rule.Port))
				}
			}
		}
	}
	slices.Sort(derived)
	slices.Sort(names)
	return slices.Compact(derived), slices.Compact(names)
}

// policyID names the policy a rule was derived from, from its labels
// ("k8s:io.cilium.k8s.policy.derived-from=CiliumNetworkPolicy", ….name=,
// ….namespace=), as drift's EgressPolicies does.
func policyID(labels []string) string {
	var kind, name, ns string
	for _, l := range labels {
		k, v, _ := strings.Cut(strings.TrimPrefix(l, "k8s:"), "=")
		switch k {
		case "io.cilium.k8s.policy.derived-from":
			kind = v
		case "io.cilium.k8s.policy.name":
			name = v
		case "io.cilium.k8s.policy.namespace":
			ns = v
		}
	}
	switch kind {
	case "":
		return ""
	case drift.CiliumClusterwideNetworkPolicyKind:
		return "ciliumclusterwidenetworkpolicy/" + name
	}
	return strings.ToLower(kind) + "/" + ns + "/" + name
}

// fqdnSelector parses the agent's text of an FQDN selector,
// "MatchName: NAME, MatchPattern: PATTERN".
func fqdnSelector(key string) (name, pattern string, ok bool) {
	rest, ok := strings.CutPrefix(key, "MatchName: ")
	if !ok {
		return "", "", false
	}
	name, pattern, ok = strings.Cut(rest, ", MatchPattern: ")
	return name, pattern, ok
}
