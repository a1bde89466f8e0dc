package drift

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/labels"
)

// What governs a pod's egress, for the kube runner's parity check: the
// probe stands where the sandboxes stand only if exactly the same egress
// policies select it. The engine's policy index answers it, so the runner
// and drift can never disagree about which policy selects which pod.

// EgressPolicies lists the egress policies that select a pod with these
// labels and service account in namespace ns: NetworkPolicies whose
// policyTypes include Egress ("networkpolicy/NS/NAME") and Cilium rules
// with egress or egressDeny rules ("ciliumnetworkpolicy/NS/NAME",
// "ciliumclusterwidenetworkpolicy/NAME"), sorted, each once. A policy that
// selects the pod for ingress only does not govern its egress and is left
// out.
func (e *Engine) EgressPolicies(ns string, podLabels map[string]string, serviceAccount string) []string {
	var out []string
	e.net.selecting(ns, podLabels, func(np *compiledNetpol) {
		if np.egress {
			out = append(out, "networkpolicy/"+np.ns+"/"+np.name)
		}
	})
	nsLabels, known := e.namespaceLabels(ns)
	sel, _ := e.cil.selecting(ns, podLabels, serviceAccount, nsLabels, known, e.ciliumCluster)
	for _, r := range sel {
		// enableDefaultDeny {egress: false} denies nothing, but its allows
		// still govern the pod's egress.
		if r.egress || r.noDefaultDeny {
			out = append(out, r.id)
		}
	}
	// Admin network policies select by namespace labels and pod labels.
	for _, tier := range []adminTier{tierAdmin, tierBaseline} {
		sel, _ := e.anp.selecting(tier, ns, nsLabels, known, podLabels)
		for _, ap := range sel {
			if len(ap.rules) > 0 {
				out = append(out, ap.id)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// SelectorKeys lists the pod label keys that the selectors of the egress
// policies able to select pods in ns look at (with Cilium's source prefix
// and its own namespace and service-account keys left out), sorted. A pod
// keeps its place under those policies with only these labels.
func (e *Engine) SelectorKeys(ns string) []string {
	keys := map[string]bool{}
	add := func(sel labels.Selector, egress bool) {
		if !egress {
			return
		}
		reqs, _ := sel.Requirements()
		for _, r := range reqs {
			if k := r.Key(); k != ciliumNamespaceLabel && k != ciliumServiceAccountLabel {
				keys[k] = true
			}
		}
	}
	if nsp := e.net.byNS[ns]; nsp != nil {
		for _, c := range nsp.scan {
			add(c.selector, c.egress)
		}
		for _, vals := range nsp.byLabel {
			for _, cs := range vals {
				for _, c := range cs {
					add(c.selector, c.egress)
				}
			}
		}
	}
	for _, r := range append(slices.Clone(e.cil.byNS[ns]), e.cil.cluster...) {
		add(r.selector, r.egress)
	}
	return sortedKeys(keys)
}

// CiliumReading is drift's reading of what Cilium enforces on one pod's
// egress, for comparing with the agent's own view of the pod's endpoint
// (hack/e2e's Cilium story: a semantics test of drift against Cilium).
type CiliumReading struct {
	// Policies are the egress policies selecting the pod (EgressPolicies).
	Policies []string
	// WithRules are those of them that put rules into the pod's egress
	// policy (not only default deny), Cilium's and NetworkPolicies: the
	// ones Cilium derives some rule of the endpoint from.
	WithRules []string
	// DefaultDeny: a selecting NetworkPolicy with policyTypes Egress, or a
	// Cilium rule with egress or egressDeny (and no enableDefaultDeny
	// egress: false), puts the pod's egress under enforcement.
	DefaultDeny bool
	// Names are the toFQDNs selectors of the selecting Cilium rules as
	// drift matches them, "HOST PORT" (port 0: every port), sorted, each once.
	Names []string
}

// ReadCilium is drift's CiliumReading of a pod with these labels and
// service account in namespace ns.
func (e *Engine) ReadCilium(ns string, podLabels map[string]string, serviceAccount string) CiliumReading {
	rd := CiliumReading{Policies: e.EgressPolicies(ns, podLabels, serviceAccount)}
	e.net.selecting(ns, podLabels, func(np *compiledNetpol) {
		rd.DefaultDeny = rd.DefaultDeny || np.egress
		if np.rules {
			rd.WithRules = append(rd.WithRules, "networkpolicy/"+np.ns+"/"+np.name)
		}
	})
	nsLabels, known := e.namespaceLabels(ns)
	sel, _ := e.cil.selecting(ns, podLabels, serviceAccount, nsLabels, known, e.ciliumCluster)
	for _, r := range sel {
		rd.DefaultDeny = rd.DefaultDeny || r.egress
		if r.rules {
			rd.WithRules = append(rd.WithRules, r.id)
		}
		for _, f := range r.fqdns {
			if len(f.ports) == 0 {
				rd.Names = append(rd.Names, f.rule.Host+" 0")
			}
			for _, p := range f.ports {
				rd.Names = append(rd.Names, fmt.Sprintf("%s %d", f.rule.Host, p.port))
			}
		}
	}
	slices.Sort(rd.WithRules)
	rd.WithRules = slices.Compact(rd.WithRules)
	slices.Sort(rd.Names)
	rd.Names = slices.Compact(rd.Names)
	return rd
}

// CiliumFQDNHost is the host a toFQDNs selector (matchName or
// matchPattern) covers, as drift matches it: "*.example.com" for a
// pattern under example.com, "*" for one it cannot bound.
func CiliumFQDNHost(matchName, matchPattern string) string {
	return fqdnRule(matchName, matchPattern).Host
}
