package drift

import (
	"fmt"
	"maps"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

// netpolIndex holds the NetworkPolicies by namespace, indexed so that
// finding the policies that select a pod costs a map lookup per pod label
// instead of a selector match per policy: 500 policies in a namespace must
// not make every pod 500 times slower.
type netpolIndex struct {
	byNS  map[string]*nsNetpols
	count int
}

type nsNetpols struct {
	// scan holds policies whose selector cannot be indexed (empty, or with
	// expressions): they are matched against every pod.
	scan []*compiledNetpol
	// byLabel indexes policies by one of their matchLabels pairs: a pod can
	// only be selected by policies indexed under one of its own labels.
	byLabel map[string]map[string][]*compiledNetpol
	// names are the policies' names.
	names map[string]bool
}

type compiledNetpol struct {
	ns, name string
	selector labels.Selector
	egress   bool
	// rules: it has egress rules (beyond default deny).
	rules bool
	// findings are the policy's unexplained egress rules. They do not depend
	// on the pod, so they are computed once.
	findings []ruleFinding
}

func newNetpolIndex() *netpolIndex { return &netpolIndex{byNS: map[string]*nsNetpols{}} }

// AddNetworkPolicy adds a policy to the union the egress rules check.
func (e *Engine) AddNetworkPolicy(np *networkingv1.NetworkPolicy) error {
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		return fmt.Errorf("networkpolicy %s/%s: spec.podSelector: %w", np.Namespace, np.Name, err)
	}
	c := &compiledNetpol{ns: np.Namespace, name: np.Name, selector: sel, egress: hasEgressType(np)}
	c.rules = c.egress && len(np.Spec.Egress) > 0
	if c.egress {
		c.findings = e.egress.netpolFindings(np)
		ev := fmt.Sprintf("networkpolicy %s/%s selects the pod (podSelector %s); network policies add up, so its rules open egress whatever else denies",
			np.Namespace, np.Name, labelSelectorText(&np.Spec.PodSelector, "every pod in the namespace"))
		if from := np.Annotations[renderedFromAnnotation]; from != "" {
			ev += "; " + from
		}
		if fix := np.Annotations[renderedFixAnnotation]; fix != "" {
			for i := range c.findings {
				c.findings[i].fix = fix
			}
		}
		for i := range c.findings {
			if c.findings[i].evidence == "" {
				c.findings[i].evidence = ev
			} else {
				c.findings[i].evidence = ev + "; " + c.findings[i].evidence
			}
		}
	}
	idx := e.net
	nsp := idx.byNS[np.Namespace]
	if nsp == nil {
		nsp = &nsNetpols{byLabel: map[string]map[string][]*compiledNetpol{}, names: map[string]bool{}}
		idx.byNS[np.Namespace] = nsp
	}
	if ml := np.Spec.PodSelector.MatchLabels; len(ml) > 0 {
		k := sortedKeys(ml)[0]
		if nsp.byLabel[k] == nil {
			nsp.byLabel[k] = map[string][]*compiledNetpol{}
		}
		nsp.byLabel[k][ml[k]] = append(nsp.byLabel[k][ml[k]], c)
	} else {
		nsp.scan = append(nsp.scan, c)
	}
	nsp.names[np.Name] = true
	idx.count++
	return nil
}

// hasNetworkPolicy reports whether the engine holds the NetworkPolicy.
func (e *Engine) hasNetworkPolicy(namespace, name string) bool {
	nsp := e.net.byNS[namespace]
	return nsp != nil && nsp.names[name]
}

// AddSandboxTemplatePolicy adds the NetworkPolicy the agent-sandbox
// controller keeps for a SandboxTemplate (SandboxTemplateNetworkPolicy)
// unless the engine holds it already (read from the cluster or the files).
// It reports whether it added one.
func (e *Engine) AddSandboxTemplatePolicy(obj *unstructured.Unstructured) (bool, error) {
	np, err := SandboxTemplateNetworkPolicy(obj)
	if err != nil || np == nil || e.hasNetworkPolicy(np.Namespace, np.Name) {
		return false, err
	}
	return true, e.AddNetworkPolicy(np)
}

// NetworkPolicies is how many NetworkPolicies the engine holds.
func (e *Engine) NetworkPolicies() int { return e.net.count }

// hasEgressType applies the API's defaulting: without policyTypes a policy
// is an Egress policy exactly when it has egress rules.
func hasEgressType(np *networkingv1.NetworkPolicy) bool {
	if len(np.Spec.PolicyTypes) == 0 {
		return len(np.Spec.Egress) > 0
	}
	for _, t := range np.Spec.PolicyTypes {
		if t == networkingv1.PolicyTypeEgress {
			return true
		}
	}
	return false
}

// namespaceNameLabel is the label the API server puts on every namespace.
const namespaceNameLabel = "kubernetes.io/metadata.name"

// selecting calls fn for every policy in ns that selects the labels.
func (idx *netpolIndex) selecting(ns string, podLabels map[string]string, fn func(*compiledNetpol)) {
	nsp := idx.byNS[ns]
	if nsp == nil {
		return
	}
	set := labels.Set(podLabels)
	for _, c := range nsp.scan {
		if c.selector.Matches(set) {
			fn(c)
		}
	}
	if len(nsp.byLabel) == 0 {
		return
	}
	for k, v := range podLabels {
		for _, c := range nsp.byLabel[k][v] {
			if c.selector.Matches(set) {
				fn(c)
			}
		}
	}
}

// checkEgress judges what the pod may send, in the order the cluster
// decides it: the admin tier (AdminNetworkPolicies by priority; an Allow
// there overrides every NetworkPolicy, a Deny of everything ends it), then
// the union of the NetworkPolicies selecting the pod, then — only for a pod
// no egress NetworkPolicy selects — the baseline tier. Cilium policies add
// up with all of them. An Allow that traffic can no longer reach (behind a
// Deny of everything) is not a reopen.
func (e *Engine) checkEgress(c *podCheck, pod *corev1.Pod) {
	if pod.Spec.HostNetwork {
		return // reported as host-network: no network policy applies there anyway
	}
	nsLabels, nsKnown := e.namespaceLabels(pod.Namespace)
	restricted := false
	first := len(c.out)
	stamp := func(rfs []ruleFinding) {
		for _, rf := range rfs {
			c.out = append(c.out, rf.on(c.ensureTarget(), c.ns))
		}
	}
	stampHits := func(hits []tierHit) {
		for _, h := range hits {
			for _, rf := range h.rule.findings {
				f := rf.on(c.ensureTarget(), c.ns)
				if h.tie != "" {
					f.Evidence = appendEvidence(f.Evidence, h.tie)
				}
				c.out = append(c.out, f)
			}
		}
	}
	// und is what may select the pod or not: its namespace's labels are
	// unknown (files without its Namespace object).
	var und undetermined
	var admin tierVerdict
	if e.anp.known() {
		var sel []*adminPolicy
		sel, und.admin = e.anp.selecting(tierAdmin, pod.Namespace, nsLabels, nsKnown, pod.Labels)
		admin = walkTier(sel)
		stampHits(admin.hits)
	}
	und.adminEnd, und.adminEnded = admin.endPriority, admin.denyAll != "" || admin.passAll != ""
	if admin.denyAll != "" {
		restricted = true
	} else {
		npSelected := false
		var hits []*compiledNetpol
		e.net.selecting(pod.Namespace, pod.Labels, func(np *compiledNetpol) {
			if np.egress {
				npSelected = true
				if len(np.findings) > 0 {
					hits = append(hits, np)
				}
			}
		})
		// Several policies may contribute; report them in a stable order.
		sort.Slice(hits, func(i, j int) bool { return hits[i].name < hits[j].name })
		for _, np := range hits {
			stamp(np.findings)
		}
		restricted = npSelected
		if !npSelected && e.anp.known() {
			// The baseline tier decides only for a pod no NetworkPolicy selects.
			sel, baseUnd := e.anp.selecting(tierBaseline, pod.Namespace, nsLabels, nsKnown, pod.Labels)
			und.baseline = baseUnd
			base := walkTier(sel)
			stampHits(base.hits)
			restricted = base.denyAll != ""
		}
	}
	tiers := len(c.out)
	cilRestricts, cilUnd := e.cil.checkPod(c, pod, nsLabels, nsKnown, e.ciliumCluster)
	und.cilium = cilUnd
	if cilRestricts {
		restricted = true
	}
	if !restricted {
		e.failUnrestricted(c, pod)
	}
	if !und.empty() {
		e.judgeUndetermined(c, pod.Namespace, und, first, tiers)
	}
}

// failUnrestricted fails egress-unrestricted for a pod no egress policy
// selects.
func (e *Engine) failUnrestricted(c *podCheck, pod *corev1.Pod) {
	known := fmt.Sprintf("%d NetworkPolicies", e.net.count)
	if e.anp.known() {
		known += fmt.Sprintf(", %d admin network policies", len(e.anp.policies))
	}
	c.fail(NetpolEgressUnrestricted, "networkpolicies", "a NetworkPolicy with policyTypes [Egress] (or a Cilium egress policy, or an admin network policy denying everything else) selecting the pod",
		"no egress policy selects the pod: every destination is reachable",
		e.unrestrictedFix(c, pod), fmt.Sprintf("pod labels: %s; %s known", labelsText(pod.Labels), known))
}

// unrestrictedFix is the fix for a pod no egress policy selects. When a
// policy in its namespace would select it if it carried the sandbox
// selector's labels, the labels are what is missing, not a policy: applying
// another one would change nothing for this pod.
func (e *Engine) unrestrictedFix(c *podCheck, pod *corev1.Pod) string {
	want := e.p.Spec.Selector.MatchLabels
	if missing := missingLabels(want, pod.Labels); missing != "" {
		labelled := maps.Clone(pod.Labels)
		if labelled == nil {
			labelled = map[string]string{}
		}
		maps.Copy(labelled, want)
		if pols := e.EgressPolicies(pod.Namespace, labelled, pod.Spec.ServiceAccountName); len(pols) > 0 {
			return fmt.Sprintf("add labels %s to %s.labels: %s in namespace %s already restricts the egress of pods that carry them (this pod: %s)",
				selectorText(want), c.view.meta, strings.Join(pols, ", "), pod.Namespace, missing)
		}
	}
	return fmt.Sprintf("apply the NetworkPolicy from `sandprobe render --format egress --policy …` in namespace %s (podSelector %s, policyTypes [Egress])", pod.Namespace, selectorText(want))
}

func labelsText(m map[string]string) string {
	if len(m) == 0 {
		return "none"
	}
	return selectorText(m)
}

// netpolFindings judges every egress rule of one policy against the model.
func (m *egressModel) netpolFindings(np *networkingv1.NetworkPolicy) []ruleFinding {
	var out []ruleFinding
	obj := "networkpolicy/" + np.Name
	where := "networkpolicy " + np.Namespace + "/" + np.Name
	for i, rule := range np.Spec.Egress {
		ports := netpolPorts(rule.Ports)
		field := fmt.Sprintf("spec.egress[%d]", i)
		if len(rule.To) == 0 {
			out = append(out, ruleFinding{
				check: NetpolAnyDestination, subject: obj + " " + field + ".to",
				expected: "the allowed destinations listed in to",
				actual:   "to is empty: every destination, in and outside the cluster, on " + portsText(ports),
				fix:      fmt.Sprintf("list the allowed destinations in %s of %s (an empty to allows everything)", field+".to", where),
			})
			continue
		}
		for j, peer := range rule.To {
			pfield := fmt.Sprintf("%s.to[%d]", field, j)
			if peer.IPBlock != nil {
				out = append(out, m.ipBlockFinding(obj, where, field, pfield, peer.IPBlock, ports)...)
				continue
			}
			if m.selectorPeerExplained(peer.NamespaceSelector, ports) {
				continue
			}
			ns, known := netpolPeerNamespace(peer.NamespaceSelector, np.Namespace)
			var podLabels map[string]string
			if peer.PodSelector != nil {
				podLabels = peer.PodSelector.MatchLabels
			}
			switch v := m.judgePeer(ns, known, podLabels, ports); {
			case v.explained:
				continue
			case v.widened != nil:
				out = append(out, widenedFinding(NetpolPeer, obj+" "+pfield, peerText(peer)+" on "+portsText(ports), where, pfield, v.widened))
				continue
			}
			out = append(out, ruleFinding{
				check: NetpolPeer, subject: obj + " " + pfield,
				expected: m.peerExpected(),
				actual:   peerText(peer) + " on " + portsText(ports),
				fix:      fmt.Sprintf("remove %s from %s, or narrow it to cluster DNS (port 53), the proxy or a declared in-cluster peer", pfield, where),
			})
		}
	}
	return out
}

func (m *egressModel) ipBlockFinding(obj, where, field, pfield string, b *networkingv1.IPBlock, ports []portSpec) []ruleFinding {
	subject := obj + " " + pfield + ".ipBlock"
	pfx, err := parsePrefix(b.CIDR)
	if err != nil {
		return []ruleFinding{{check: NetpolIPBlock, subject: subject, expected: "a declared address", actual: "unparsable cidr " + b.CIDR,
			fix: fmt.Sprintf("remove %s from %s", pfield, where)}}
	}
	actual := "ipBlock " + b.CIDR
	if len(b.Except) > 0 {
		actual += " except " + strings.Join(b.Except, ", ")
	}
	actual += " on " + portsText(ports)
	if pfx.Bits() == 0 {
		return []ruleFinding{{check: NetpolWorld, subject: subject, expected: "only declared destinations (the declared list never includes the whole internet)",
			actual:   actual + " — the whole internet",
			fix:      fmt.Sprintf("remove %s from %s; network policies add up, so this reopens egress whatever default-deny exists", pfield, where),
			evidence: "network policies are a union: one allowing rule is enough"}}
	}
	reason, known := m.explainPrefix(pfx, ports)
	switch {
	case reason != "":
		return nil
	case known:
		return []ruleFinding{{check: NetpolPort, subject: subject, expected: m.declaredPorts(pfx), actual: actual,
			fix: fmt.Sprintf("list only the declared port in %s.ports of %s", field, where)}}
	}
	return []ruleFinding{{check: NetpolIPBlock, subject: subject, expected: "only declared addresses: " + m.ipsText(), actual: actual,
		fix: fmt.Sprintf("remove %s from %s, or declare the address in spec.egress.allow with a reason", pfield, where)}}
}

func (m *egressModel) ipsText() string {
	var parts []string
	for _, ip := range m.ips {
		parts = append(parts, fmt.Sprintf("%s:%d", ip.addr, ip.port))
	}
	if m.proxy != nil && m.proxy.ip.IsValid() {
		parts = append(parts, fmt.Sprintf("%s:%d (proxy)", m.proxy.ip, m.proxy.port))
	}
	return quoteList(parts)
}

// selectorPeerExplained: an in-cluster peer is fine for cluster DNS (port
// 53 only) or, in the proxy's namespace, on the proxy port.
func (m *egressModel) selectorPeerExplained(nsSel *metav1.LabelSelector, ports []portSpec) bool {
	if dnsOnly(ports) {
		return true
	}
	if m.proxy == nil || m.proxy.ns == "" || !onlyPort(ports, m.proxy.port) || nsSel == nil {
		return false
	}
	return selectsOnlyNamespace(nsSel, m.proxy.ns)
}

func (m *egressModel) peerExpected() string {
	if m.proxy != nil && m.proxy.ns != "" {
		return fmt.Sprintf("in-cluster peers only for DNS (port 53) or the proxy (namespace %s, port %d)", m.proxy.ns, m.proxy.port) + m.peersText()
	}
	return "in-cluster peers only for DNS (port 53)" + m.peersText()
}

// selectsOnlyNamespace reports whether a namespaceSelector pins exactly one
// namespace by its kubernetes.io/metadata.name label.
func selectsOnlyNamespace(sel *metav1.LabelSelector, ns string) bool {
	const key = namespaceNameLabel
	if v, ok := sel.MatchLabels[key]; ok {
		return v == ns
	}
	for _, r := range sel.MatchExpressions {
		if r.Key == key && r.Operator == metav1.LabelSelectorOpIn && len(r.Values) == 1 && r.Values[0] == ns {
			return true
		}
	}
	return false
}

func peerText(p networkingv1.NetworkPolicyPeer) string {
	var parts []string
	if p.NamespaceSelector != nil {
		parts = append(parts, "namespaceSelector "+labelSelectorText(p.NamespaceSelector, "every namespace"))
	}
	if p.PodSelector != nil {
		parts = append(parts, "podSelector "+labelSelectorText(p.PodSelector, "every pod"))
	}
	return strings.Join(parts, " ")
}

func labelSelectorText(s *metav1.LabelSelector, empty string) string {
	if len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0 {
		return "{} (" + empty + ")"
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return "invalid"
	}
	return "{" + sel.String() + "}"
}

func netpolPorts(ps []networkingv1.NetworkPolicyPort) []portSpec {
	out := make([]portSpec, 0, len(ps))
	for _, p := range ps {
		s := portSpec{proto: "TCP"}
		if p.Protocol != nil {
			s.proto = string(*p.Protocol)
		}
		if p.Port != nil {
			if p.Port.IntVal != 0 || p.Port.StrVal == "" {
				s.port = int(p.Port.IntVal)
			} else {
				s.named = p.Port.StrVal
			}
		}
		if p.EndPort != nil {
			s.end = int(*p.EndPort)
		}
		out = append(out, s)
	}
	return out
}
