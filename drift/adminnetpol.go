package drift

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	anpv1alpha1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"
	anpv1alpha2 "sigs.k8s.io/network-policy-api/apis/v1alpha2"

	"github.com/sandprobe/sandprobe/policy"
)

// The cluster-wide network policies of sigs.k8s.io/network-policy-api:
// AdminNetworkPolicy and BaselineAdminNetworkPolicy (v1alpha1), and their
// successor ClusterNetworkPolicy (v1alpha2, tier Admin or Baseline).
const (
	PolicyAPIGroup                 = "policy.networking.k8s.io"
	AdminNetworkPolicyKind         = "AdminNetworkPolicy"
	BaselineAdminNetworkPolicyKind = "BaselineAdminNetworkPolicy"
	ClusterNetworkPolicyKind       = "ClusterNetworkPolicy"
)

// adminTier orders the tiers: the admin tier is consulted before
// NetworkPolicies, the baseline tier only for traffic no NetworkPolicy
// covers.
type adminTier int

const (
	tierAdmin adminTier = iota
	tierBaseline
)

type adminAction string

const (
	actionAllow adminAction = "Allow" // Accept in v1alpha2
	actionDeny  adminAction = "Deny"
	actionPass  adminAction = "Pass"
)

// adminPolicy is one ANP, BANP or ClusterNetworkPolicy, compiled.
type adminPolicy struct {
	id       string // "adminnetworkpolicy/allow-world"
	tier     adminTier
	priority int32
	// subject: namespaces (by their labels), and optionally pods in them.
	nsSel  labels.Selector
	podSel labels.Selector // nil: every pod of the selected namespaces
	// podKey/podValue index the policy by one of its pod matchLabels.
	podKey, podValue string
	// nsLabelDep: the namespace selector reads labels other than the
	// name label, so it cannot be judged for a namespace whose labels are
	// unknown (files without its Namespace object); nsNameSel is the part
	// of it that reads the name label.
	nsLabelDep bool
	nsNameSel  labels.Selector
	pos        int // place in the evaluation order
	rules      []adminRule
}

type adminRule struct {
	action adminAction
	// coversAll: every destination on every port (networks 0.0.0.0/0 and
	// ::/0, no ports): a Deny or Pass of it ends the tier for everything.
	coversAll bool
	// findings are the rule's unexplained destinations (Allow rules only).
	findings []ruleFinding
}

type adminIndex struct {
	policies []*adminPolicy // sorted: tier, priority, name
	sorted   bool
	// byNS caches, per namespace and tier, the policies whose namespace
	// selector matches it: namespaces' labels do not change during a scan.
	byNS map[string]*[2]adminLookup
	// mu guards sorted and byNS, filled on first use by pods checked in
	// parallel (FileScan).
	mu sync.Mutex
}

// adminLookup finds the policies that may select a pod by one of its labels.
type adminLookup struct {
	scan    []*adminPolicy
	byLabel map[string]map[string][]*adminPolicy
	// undetermined are the policies whose namespace selector reads labels
	// the namespace (unknown) may or may not carry.
	undetermined []*adminPolicy
}

// AddAdminNetworkPolicy adds an AdminNetworkPolicy, BaselineAdminNetworkPolicy
// or ClusterNetworkPolicy (read with the dynamic client or from files).
func (e *Engine) AddAdminNetworkPolicy(obj *unstructured.Unstructured) error {
	ap, err := e.egress.compileAdmin(obj)
	if err != nil {
		return err
	}
	if ap != nil {
		e.anp.policies = append(e.anp.policies, ap)
		e.anp.sorted, e.anp.byNS = false, nil
	}
	return nil
}

// AdminNetworkPolicies is how many cluster-wide policies the engine holds.
func (e *Engine) AdminNetworkPolicies() int { return len(e.anp.policies) }

// adminRuleSource is one egress rule of any of the three kinds, in a
// common shape.
type adminRuleSource struct {
	action adminAction
	peers  []adminPeerSource
	ports  []portSpec
	// portsSet is false when the rule names no ports (every port).
	portsSet bool
}

type adminPeerSource struct {
	namespaces, nodes *metav1.LabelSelector
	pods              *anpv1alpha1.NamespacedPod
	networks          []string
	domains           []string
}

func (m *egressModel) compileAdmin(obj *unstructured.Unstructured) (*adminPolicy, error) {
	kind, name := obj.GetKind(), obj.GetName()
	id := strings.ToLower(kind) + "/" + name
	ap := &adminPolicy{id: id}
	var subject anpv1alpha1.AdminNetworkPolicySubject
	var rules []adminRuleSource
	var err error
	switch kind {
	case AdminNetworkPolicyKind:
		subject, rules, err = anpSource(obj, ap)
	case BaselineAdminNetworkPolicyKind:
		subject, rules, err = banpSource(obj, ap)
	case ClusterNetworkPolicyKind:
		subject, rules, err = cnpSource(obj, ap)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", id, err)
	}
	if err := ap.selectSubject(subject); err != nil {
		return nil, fmt.Errorf("%s: %w", id, err)
	}
	ap.nsNameSel, ap.nsLabelDep = splitNameLabel(ap.nsSel)
	tierText := "the admin tier: it is judged before any NetworkPolicy, and its Allow overrides them all"
	if ap.tier == tierBaseline {
		tierText = "the baseline tier: it decides the traffic no NetworkPolicy selects the pod for"
	}
	for i, rs := range rules {
		ar := adminRule{action: rs.action}
		field := fmt.Sprintf("spec.egress[%d]", i)
		ar.coversAll = !rs.portsSet && coversEveryAddress(rs.peers)
		if rs.action == actionAllow {
			ar.findings = m.adminFindings(id, field, rs)
			ev := fmt.Sprintf("%s (priority %d) selects the pod; it is in %s", id, ap.priority, tierText)
			if ap.tier == tierBaseline {
				ev = fmt.Sprintf("%s selects the pod; it is in %s", id, tierText)
			}
			for j := range ar.findings {
				ar.findings[j].evidence = appendEvidence(ev, ar.findings[j].evidence)
			}
		}
		ap.rules = append(ap.rules, ar)
	}
	return ap, nil
}

// anpSource reads an AdminNetworkPolicy: its tier and priority into ap,
// its subject and egress rules out.
func anpSource(obj *unstructured.Unstructured, ap *adminPolicy) (anpv1alpha1.AdminNetworkPolicySubject, []adminRuleSource, error) {
	var o anpv1alpha1.AdminNetworkPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &o); err != nil {
		return o.Spec.Subject, nil, err
	}
	ap.tier, ap.priority = tierAdmin, o.Spec.Priority
	var rules []adminRuleSource
	for _, r := range o.Spec.Egress {
		rs := adminRuleSource{action: adminAction(r.Action)}
		rs.ports, rs.portsSet = anpPorts(r.Ports)
		for _, p := range r.To {
			rs.peers = append(rs.peers, adminPeerSource{namespaces: p.Namespaces, nodes: p.Nodes, pods: p.Pods, networks: cidrStrings(p.Networks), domains: domainStrings(p.DomainNames)})
		}
		rules = append(rules, rs)
	}
	return o.Spec.Subject, rules, nil
}

// banpSource reads a BaselineAdminNetworkPolicy as anpSource does.
func banpSource(obj *unstructured.Unstructured, ap *adminPolicy) (anpv1alpha1.AdminNetworkPolicySubject, []adminRuleSource, error) {
	var o anpv1alpha1.BaselineAdminNetworkPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &o); err != nil {
		return o.Spec.Subject, nil, err
	}
	ap.tier = tierBaseline
	var rules []adminRuleSource
	for _, r := range o.Spec.Egress {
		rs := adminRuleSource{action: adminAction(r.Action)}
		rs.ports, rs.portsSet = anpPorts(r.Ports)
		for _, p := range r.To {
			rs.peers = append(rs.peers, adminPeerSource{namespaces: p.Namespaces, nodes: p.Nodes, pods: p.Pods, networks: cidrStrings(p.Networks)})
		}
		rules = append(rules, rs)
	}
	return o.Spec.Subject, rules, nil
}

// cnpSource reads a ClusterNetworkPolicy (v1alpha2: one kind for both
// tiers, Accept for Allow) as anpSource does.
func cnpSource(obj *unstructured.Unstructured, ap *adminPolicy) (anpv1alpha1.AdminNetworkPolicySubject, []adminRuleSource, error) {
	var subject anpv1alpha1.AdminNetworkPolicySubject
	var o anpv1alpha2.ClusterNetworkPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &o); err != nil {
		return subject, nil, err
	}
	ap.tier, ap.priority = tierAdmin, o.Spec.Priority
	if o.Spec.Tier == anpv1alpha2.BaselineTier {
		ap.tier = tierBaseline
	}
	subject.Namespaces = o.Spec.Subject.Namespaces
	if p := o.Spec.Subject.Pods; p != nil {
		subject.Pods = &anpv1alpha1.NamespacedPod{NamespaceSelector: p.NamespaceSelector, PodSelector: p.PodSelector}
	}
	var rules []adminRuleSource
	for _, r := range o.Spec.Egress {
		action := adminAction(r.Action)
		if r.Action == anpv1alpha2.ClusterNetworkPolicyRuleActionAccept {
			action = actionAllow
		}
		rs := adminRuleSource{action: action}
		rs.ports, rs.portsSet = cnpProtocols(r.Protocols)
		for _, p := range r.To {
			ps := adminPeerSource{namespaces: p.Namespaces, nodes: p.Nodes, networks: cidrStrings2(p.Networks)}
			for _, d := range p.DomainNames {
				ps.domains = append(ps.domains, string(d))
			}
			if p.Pods != nil {
				ps.pods = &anpv1alpha1.NamespacedPod{NamespaceSelector: p.Pods.NamespaceSelector, PodSelector: p.Pods.PodSelector}
			}
			rs.peers = append(rs.peers, ps)
		}
		rules = append(rules, rs)
	}
	return subject, rules, nil
}

// selectSubject compiles the policy's subject into ap's selectors.
func (ap *adminPolicy) selectSubject(subject anpv1alpha1.AdminNetworkPolicySubject) error {
	var err error
	switch {
	case subject.Namespaces != nil:
		if ap.nsSel, err = metav1.LabelSelectorAsSelector(subject.Namespaces); err != nil {
			return fmt.Errorf("spec.subject.namespaces: %w", err)
		}
	case subject.Pods != nil:
		if ap.nsSel, err = metav1.LabelSelectorAsSelector(&subject.Pods.NamespaceSelector); err != nil {
			return fmt.Errorf("spec.subject.pods.namespaceSelector: %w", err)
		}
		if ap.podSel, err = metav1.LabelSelectorAsSelector(&subject.Pods.PodSelector); err != nil {
			return fmt.Errorf("spec.subject.pods.podSelector: %w", err)
		}
		if ml := subject.Pods.PodSelector.MatchLabels; len(ml) > 0 {
			ap.podKey = sortedKeys(ml)[0]
			ap.podValue = ml[ap.podKey]
		}
	default:
		return fmt.Errorf("spec.subject: neither namespaces nor pods")
	}
	return nil
}

func cidrStrings(cs []anpv1alpha1.CIDR) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c)
	}
	return out
}

func cidrStrings2(cs []anpv1alpha2.CIDR) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c)
	}
	return out
}

func domainStrings(ds []anpv1alpha1.DomainName) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d)
	}
	return out
}

// anpPorts reads v1alpha1 ports; no ports means every port.
func anpPorts(ps *[]anpv1alpha1.AdminNetworkPolicyPort) ([]portSpec, bool) {
	if ps == nil {
		return nil, false
	}
	var out []portSpec
	for _, p := range *ps {
		switch {
		case p.PortNumber != nil:
			out = append(out, portSpec{proto: protoOr(string(p.PortNumber.Protocol)), port: int(p.PortNumber.Port)})
		case p.PortRange != nil:
			out = append(out, portSpec{proto: protoOr(string(p.PortRange.Protocol)), port: int(p.PortRange.Start), end: int(p.PortRange.End)})
		case p.NamedPort != nil:
			out = append(out, portSpec{proto: "TCP", named: *p.NamedPort})
		}
	}
	return out, true
}

// cnpProtocols reads v1alpha2 protocols; none means every port.
func cnpProtocols(ps []anpv1alpha2.ClusterNetworkPolicyProtocol) ([]portSpec, bool) {
	if len(ps) == 0 {
		return nil, false
	}
	var out []portSpec
	add := func(proto string, d *anpv1alpha2.Port) {
		switch {
		case d == nil:
			out = append(out, portSpec{proto: proto})
		case d.Range != nil:
			out = append(out, portSpec{proto: proto, port: int(d.Range.Start), end: int(d.Range.End)})
		default:
			out = append(out, portSpec{proto: proto, port: int(d.Number)})
		}
	}
	for _, p := range ps {
		switch {
		case p.TCP != nil:
			add("TCP", p.TCP.DestinationPort)
		case p.UDP != nil:
			add("UDP", p.UDP.DestinationPort)
		case p.SCTP != nil:
			add("SCTP", p.SCTP.DestinationPort)
		case p.DestinationNamedPort != "":
			out = append(out, portSpec{proto: "TCP", named: p.DestinationNamedPort})
		}
	}
	return out, true
}

func protoOr(p string) string {
	if p == "" {
		return string(corev1.ProtocolTCP)
	}
	return strings.ToUpper(p)
}

// coversEveryAddress: the peers include 0.0.0.0/0 and ::/0.
func coversEveryAddress(peers []adminPeerSource) bool {
	v4, v6 := false, false
	for _, p := range peers {
		for _, c := range p.networks {
			pfx, err := parsePrefix(c)
			if err != nil || pfx.Bits() != 0 {
				continue
			}
			if pfx.Addr().Is4() {
				v4 = true
			} else {
				v6 = true
			}
		}
	}
	return v4 && v6
}

// adminFindings judges one Allow rule's destinations against the model,
// as netpolFindings does for a NetworkPolicy rule.
func (m *egressModel) adminFindings(id, field string, rs adminRuleSource) []ruleFinding {
	var out []ruleFinding
	ports := rs.ports
	portText := portsText(ports)
	for j, peer := range rs.peers {
		pfield := fmt.Sprintf("%s.to[%d]", field, j)
		for k, c := range peer.networks {
			sub := fmt.Sprintf("%s.networks[%d]", pfield, k)
			pfx, err := parsePrefix(c)
			switch {
			case err != nil:
				out = append(out, ruleFinding{check: ANPCIDR, subject: id + " " + sub, expected: "a declared address", actual: "unparsable CIDR " + c,
					fix: fmt.Sprintf("remove %s from %s", sub, id)})
			case pfx.Bits() == 0:
				out = append(out, ruleFinding{check: ANPWorld, subject: id + " " + sub, expected: "only declared destinations",
					actual: "Allow to " + c + " on " + portText + " — the whole internet",
					fix:    fmt.Sprintf("remove %s from %s; an admin network policy's Allow overrides every NetworkPolicy, so this reopens egress whatever denies it there", sub, id)})
			default:
				if reason, known := m.explainPrefix(pfx, ports); reason == "" {
					exp := "only declared addresses: " + m.ipsText()
					if known {
						exp = m.declaredPorts(pfx)
					}
					out = append(out, ruleFinding{check: ANPCIDR, subject: id + " " + sub, expected: exp, actual: "Allow to " + c + " on " + portText,
						fix: fmt.Sprintf("remove %s from %s, or declare the address in spec.egress.allow with a reason", sub, id)})
				}
			}
		}
		for k, d := range peer.domains {
			sub := fmt.Sprintf("%s.domainNames[%d]", pfield, k)
			live := fqdnRule(d, "")
			if strings.HasPrefix(d, "*.") {
				// ANP's "*" matches one or more whole labels: our "*.".
				live = policy.HostRule{Host: policy.NormalizeHost(d)}
			}
			if _, ok := m.explainHost(live, ports); ok {
				continue
			}
			out = append(out, ruleFinding{check: ANPDomain, subject: id + " " + sub, expected: "only declared names: " + m.hostsText(),
				actual: "Allow to " + d + " on " + portText,
				fix:    fmt.Sprintf("remove %s from %s, or declare it in spec.egress.allow with a reason", sub, id)})
		}
		var inCluster []string
		if peer.namespaces != nil && !(dnsOnly(ports) || m.adminPeerIsProxy(peer.namespaces, ports)) {
			inCluster = append(inCluster, "namespaces "+labelSelectorText(peer.namespaces, "every namespace"))
		}
		if peer.pods != nil && !(dnsOnly(ports) || m.adminPeerIsProxy(&peer.pods.NamespaceSelector, ports)) {
			desc := "pods " + labelSelectorText(&peer.pods.PodSelector, "every pod") + " in namespaces " + labelSelectorText(&peer.pods.NamespaceSelector, "every namespace")
			ns, known := netpolPeerNamespace(&peer.pods.NamespaceSelector, "")
			switch v := m.judgePeer(ns, known, peer.pods.PodSelector.MatchLabels, ports); {
			case v.explained:
			case v.widened != nil:
				out = append(out, widenedFinding(ANPPeer, id+" "+pfield, "Allow to "+desc+" on "+portText, id, pfield, v.widened))
			default:
				inCluster = append(inCluster, desc)
			}
		}
		if peer.nodes != nil && !dnsOnly(ports) {
			inCluster = append(inCluster, "nodes "+labelSelectorText(peer.nodes, "every node"))
		}
		for _, desc := range inCluster {
			out = append(out, ruleFinding{check: ANPPeer, subject: id + " " + pfield, expected: m.peerExpected(), actual: "Allow to " + desc + " on " + portText,
				fix: fmt.Sprintf("remove %s from %s, or narrow it to cluster DNS (port 53), the proxy or a declared in-cluster peer", pfield, id)})
		}
	}
	return out
}

func (m *egressModel) adminPeerIsProxy(nsSel *metav1.LabelSelector, ports []portSpec) bool {
	return m.proxy != nil && m.proxy.ns != "" && onlyPort(ports, m.proxy.port) && selectsOnlyNamespace(nsSel, m.proxy.ns)
}

// selecting returns the policies of a tier that select a pod in namespace
// ns, in the order the tier evaluates them (priority, then name), and, for
// a namespace whose labels are not known, the policies that may select it
// depending on labels it may carry (left out of the first list).
func (idx *adminIndex) selecting(tier adminTier, ns string, nsLabels map[string]string, known bool, podLabels map[string]string) (out, undetermined []*adminPolicy) {
	l := idx.lookup(tier, ns, nsLabels, known)
	podSet := labels.Set(podLabels)
	for _, ap := range l.undetermined {
		if ap.podSel == nil || ap.podSel.Matches(podSet) {
			undetermined = append(undetermined, ap)
		}
	}
	match := func(ap *adminPolicy) {
		if ap.podSel == nil || ap.podSel.Matches(podSet) {
			out = append(out, ap)
		}
	}
	for _, ap := range l.scan {
		match(ap)
	}
	if len(l.byLabel) > 0 {
		for k, v := range podLabels {
			for _, ap := range l.byLabel[k][v] {
				match(ap)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].pos < out[j].pos })
	}
	return out, undetermined
}

// lookup is the tier's policies whose namespace selector matches ns,
// sorted and indexed on first use.
func (idx *adminIndex) lookup(tier adminTier, ns string, nsLabels map[string]string, known bool) *adminLookup {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	if !idx.sorted {
		sort.SliceStable(idx.policies, func(i, j int) bool {
			a, b := idx.policies[i], idx.policies[j]
			if a.tier != b.tier {
				return a.tier < b.tier
			}
			if a.priority != b.priority {
				return a.priority < b.priority
			}
			return a.id < b.id
		})
		for i, ap := range idx.policies {
			ap.pos = i
		}
		idx.sorted, idx.byNS = true, nil
	}
	if idx.byNS == nil {
		idx.byNS = map[string]*[2]adminLookup{}
	}
	inNS := idx.byNS[ns]
	if inNS == nil {
		inNS = &[2]adminLookup{}
		nsSet := labels.Set(nsLabels)
		for _, ap := range idx.policies {
			if !known && ap.nsLabelDep {
				if ap.nsNameSel.Matches(nsSet) {
					inNS[ap.tier].undetermined = append(inNS[ap.tier].undetermined, ap)
				}
				continue
			}
			if !ap.nsSel.Matches(nsSet) {
				continue
			}
			l := &inNS[ap.tier]
			if ap.podKey == "" {
				l.scan = append(l.scan, ap)
				continue
			}
			if l.byLabel == nil {
				l.byLabel = map[string]map[string][]*adminPolicy{}
			}
			if l.byLabel[ap.podKey] == nil {
				l.byLabel[ap.podKey] = map[string][]*adminPolicy{}
			}
			l.byLabel[ap.podKey][ap.podValue] = append(l.byLabel[ap.podKey][ap.podValue], ap)
		}
		idx.byNS[ns] = inNS
	}
	return &inNS[tier]
}

// tierVerdict walks a tier's selecting policies in order: the findings of
// every Allow rule that traffic can still reach, and whether a Deny (or,
// for the admin tier, a Pass) of everything ends the tier before the rest.
type tierVerdict struct {
	hits    []tierHit
	denyAll string // the policies whose Deny of everything ends the tier
	passAll string // the policies whose Pass of everything hands all traffic on
	// endPriority is the priority at which the tier ended (denyAll or
	// passAll set): policies after it are never reached.
	endPriority int32
}

// tierHit is an Allow rule traffic can reach; tie, when set, says it is
// reached only because the API leaves the order of equal priorities open.
type tierHit struct {
	rule *adminRule
	from string // the policy's id
	tie  string
}

// walkTier judges the worst case where priorities tie: the API leaves the
// order of policies of equal priority undefined (an implementation may
// take either first), so every Allow of a tied policy that its own rules
// do not shadow is reachable, and a Deny of everything in the group ends
// the tier only after the whole group, and only if no tied policy passes
// everything on instead (a Pass is the weaker outcome).
func walkTier(aps []*adminPolicy) tierVerdict {
	var v tierVerdict
	for i := 0; i < len(aps); {
		j := i + 1
		for j < len(aps) && aps[j].priority == aps[i].priority {
			j++
		}
		group := aps[i:j]
		i = j
		var denies, passes []*adminPolicy
		first := len(v.hits)
		for _, ap := range group {
		rules:
			for k := range ap.rules {
				r := &ap.rules[k]
				switch {
				case r.action == actionAllow && len(r.findings) > 0:
					v.hits = append(v.hits, tierHit{rule: r, from: ap.id})
				case r.action == actionDeny && r.coversAll:
					denies = append(denies, ap)
					break rules
				case r.action == actionPass && r.coversAll:
					passes = append(passes, ap)
					break rules
				}
			}
		}
		// An Allow is reached only through the tie when another policy of
		// its group would end the tier: say so, naming both.
		for k := first; k < len(v.hits); k++ {
			v.hits[k].tie = tieText(v.hits[k].from, group[0].priority, denies, passes)
		}
		switch {
		case len(passes) > 0:
			v.passAll, v.endPriority = policyIDs(passes), group[0].priority
			return v
		case len(denies) > 0:
			v.denyAll, v.endPriority = policyIDs(denies), group[0].priority
			return v
		}
	}
	return v
}

// tieText is the evidence for an Allow of policy id reached in a tie with
// the policies that end the tier, or "" when none of them is another.
func tieText(id string, priority int32, denies, passes []*adminPolicy) string {
	var others []string
	for _, ap := range denies {
		if ap.id != id {
			others = append(others, ap.id+" (Deny of everything)")
		}
	}
	for _, ap := range passes {
		if ap.id != id {
			others = append(others, ap.id+" (Pass of everything)")
		}
	}
	if len(others) == 0 {
		return ""
	}
	return fmt.Sprintf("%s shares priority %d with %s: the API leaves the order of equal priorities undefined, so an implementation may reach this Allow first (judged at the worst case; give the policies distinct priorities)",
		id, priority, strings.Join(others, ", "))
}

func policyIDs(aps []*adminPolicy) string {
	ids := make([]string, len(aps))
	for i, ap := range aps {
		ids[i] = ap.id
	}
	return strings.Join(ids, ", ")
}

// splitNameLabel splits a namespace selector: the part that reads the
// name label every namespace carries, and whether it reads anything else
// (labels a namespace whose object is not known may or may not carry).
func splitNameLabel(sel labels.Selector) (labels.Selector, bool) {
	reqs, _ := sel.Requirements()
	name := labels.NewSelector()
	other := false
	for _, r := range reqs {
		if r.Key() == namespaceNameLabel {
			name = name.Add(r)
		} else {
			other = true
		}
	}
	return name, other
}

// adminKnown says whether any cluster-wide policy was loaded.
func (idx *adminIndex) known() bool { return len(idx.policies) > 0 }
