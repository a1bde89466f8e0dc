package drift

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// Cilium policy kinds, read with the dynamic client (the CRDs may be absent).
const (
	CiliumNetworkPolicyKind            = "CiliumNetworkPolicy"
	CiliumClusterwideNetworkPolicyKind = "CiliumClusterwideNetworkPolicy"
)

// Cilium's own labels for a pod's namespace, service account, cluster and
// its namespace's labels, which endpoint selectors may use.
const (
	ciliumNamespaceLabel       = "io.kubernetes.pod.namespace"
	ciliumServiceAccountLabel  = "io.cilium.k8s.policy.serviceaccount"
	ciliumClusterLabel         = "io.cilium.k8s.policy.cluster"
	ciliumNamespaceLabelPrefix = "io.cilium.k8s.namespace.labels."
)

// ciliumPolicy is the part of a Cilium policy the rules read.
type ciliumPolicy struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     *ciliumRule       `json:"spec,omitempty"`
	Specs    []ciliumRule      `json:"specs,omitempty"`
}

type ciliumRule struct {
	EndpointSelector *metav1.LabelSelector `json:"endpointSelector,omitempty"`
	NodeSelector     *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	Egress           []ciliumEgress        `json:"egress,omitempty"`
	EgressDeny       []map[string]any      `json:"egressDeny,omitempty"`
	Description      string                `json:"description,omitempty"`
	// EnableDefaultDeny {egress: false} keeps the selected endpoints out of
	// default deny: the rule's allows add, but nothing else is denied.
	EnableDefaultDeny *struct {
		Egress  *bool `json:"egress,omitempty"`
		Ingress *bool `json:"ingress,omitempty"`
	} `json:"enableDefaultDeny,omitempty"`
}

// defaultDenyEgress is Cilium's reading: a rule with an egress or egressDeny
// section puts its endpoints into egress default deny, unless
// enableDefaultDeny.egress says false.
func (r *ciliumRule) defaultDenyEgress() bool {
	if r.EnableDefaultDeny != nil && r.EnableDefaultDeny.Egress != nil && !*r.EnableDefaultDeny.Egress {
		return false
	}
	return len(r.Egress) > 0 || len(r.EgressDeny) > 0
}

type ciliumEgress struct {
	ToEndpoints []metav1.LabelSelector `json:"toEndpoints,omitempty"`
	ToRequires  []metav1.LabelSelector `json:"toRequires,omitempty"`
	ToNodes     []metav1.LabelSelector `json:"toNodes,omitempty"`
	ToEntities  []string               `json:"toEntities,omitempty"`
	ToCIDR      []string               `json:"toCIDR,omitempty"`
	ToCIDRSet   []struct {
		CIDR         string   `json:"cidr,omitempty"`
		CIDRGroupRef string   `json:"cidrGroupRef,omitempty"`
		Except       []string `json:"except,omitempty"`
	} `json:"toCIDRSet,omitempty"`
	ToFQDNs    []ciliumFQDN `json:"toFQDNs,omitempty"`
	ToServices []struct {
		K8sService         *k8sServiceRef `json:"k8sService,omitempty"`
		K8sServiceSelector map[string]any `json:"k8sServiceSelector,omitempty"`
	} `json:"toServices,omitempty"`
	ToGroups []map[string]any `json:"toGroups,omitempty"`
	ToPorts  []struct {
		Ports []struct {
			Port     string `json:"port,omitempty"`
			EndPort  int32  `json:"endPort,omitempty"`
			Protocol string `json:"protocol,omitempty"`
		} `json:"ports,omitempty"`
		Rules *struct {
			// DNS is what Cilium's DNS proxy lets the pods ask for on
			// these ports; anything else it REFUSES.
			DNS []ciliumFQDN `json:"dns,omitempty"`
		} `json:"rules,omitempty"`
	} `json:"toPorts,omitempty"`
}

// hasPeer: the rule names a destination. toRequires is no peer: it only
// adds a condition to the others ("does not by itself grant access").
func (r ciliumEgress) hasPeer() bool {
	return len(r.ToEndpoints)+len(r.ToNodes)+len(r.ToEntities)+len(r.ToCIDR)+len(r.ToCIDRSet)+len(r.ToFQDNs)+len(r.ToServices)+len(r.ToGroups) > 0
}

// ciliumFQDN is a name selector, as toFQDNs and DNS rules write it.
type ciliumFQDN struct {
	MatchName    string `json:"matchName,omitempty"`
	MatchPattern string `json:"matchPattern,omitempty"`
}

// text is the selector as a finding quotes it: "matchName NAME" or
// "matchPattern PATTERN".
func (f ciliumFQDN) text() string {
	if f.MatchName == "" {
		return "matchPattern " + f.MatchPattern
	}
	return "matchName " + f.MatchName
}

// k8sServiceRef is a toServices entry's Service, by name and namespace.
type k8sServiceRef struct {
	ServiceName string `json:"serviceName,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
}

type ciliumIndex struct {
	byNS    map[string][]*compiledCiliumRule
	cluster []*compiledCiliumRule
	// lookupNS and lookupCluster find the rules that may select a pod
	// without matching all of them: 500 policies in a namespace must not
	// make every pod 500 selector matches.
	lookupNS      map[string]*ciliumLookup
	lookupCluster *ciliumLookup
	seq           int
	count         int
	// missingSeen holds the selections whose missing names were reported:
	// one info finding per distinct set of policies, not one per pod
	// (Engine.settle keeps it).
	missingSeen map[string]bool
	// clusterSelectors counts rules selecting on the cluster label, whose
	// verdict depends on the cluster's Cilium name.
	clusterSelectors int
	// clusterNSDep are the cluster-wide rules whose endpoint selector reads
	// namespace labels (io.cilium.k8s.namespace.labels.*): for a namespace
	// whose labels are unknown they may select its pods or not.
	clusterNSDep []*compiledCiliumRule
	// nsDep are the namespaced ones, by namespace.
	nsDep map[string][]*compiledCiliumRule
}

type compiledCiliumRule struct {
	id       string // "ciliumnetworkpolicy/ns/name" or "ciliumclusterwidenetworkpolicy/name"
	seq      int    // order of addition, for a stable report
	wide     bool   // a CiliumClusterwideNetworkPolicy's
	selector labels.Selector
	// egress: the rule puts the pods it selects into egress default deny.
	egress bool
	// noDefaultDeny names the field that keeps it from doing so.
	noDefaultDeny bool
	// findings are the rule's unexplained egress entries (pod-independent).
	findings []ruleFinding
	// fqdns are the names the rule allows, for declared-but-missing.
	fqdns []fqdnAllow
	// world is set when the rule allows every destination anyway.
	world bool
	// rules: the rule puts entries into the pod's egress policy (an allow
	// with a peer or ports, or an egressDeny), not only default deny.
	rules bool
	// nsLabelDep: the selector reads namespace labels; sansNSLabels is
	// the selector without those requirements.
	nsLabelDep   bool
	sansNSLabels labels.Selector
}

// splitNamespaceLabels drops a Cilium selector's requirements on
// namespace labels and says whether it had any.
func splitNamespaceLabels(sel labels.Selector) (labels.Selector, bool) {
	reqs, _ := sel.Requirements()
	rest := labels.NewSelector()
	dep := false
	for _, r := range reqs {
		if strings.HasPrefix(r.Key(), ciliumNamespaceLabelPrefix) {
			dep = true
		} else {
			rest = rest.Add(r)
		}
	}
	return rest, dep
}

type fqdnAllow struct {
	rule  policy.HostRule
	ports []portSpec
}

func newCiliumIndex() *ciliumIndex {
	return &ciliumIndex{byNS: map[string][]*compiledCiliumRule{}, missingSeen: map[string]bool{},
		lookupNS: map[string]*ciliumLookup{}, lookupCluster: newCiliumLookup()}
}

// ciliumLookup indexes rules by one of their matchLabels pairs (a pod can
// only be selected by rules indexed under one of its own labels); rules
// without matchLabels are matched against every pod.
type ciliumLookup struct {
	scan    []*compiledCiliumRule
	byLabel map[string]map[string][]*compiledCiliumRule
}

func newCiliumLookup() *ciliumLookup {
	return &ciliumLookup{byLabel: map[string]map[string][]*compiledCiliumRule{}}
}

func (l *ciliumLookup) add(r *compiledCiliumRule, matchLabels map[string]string) {
	if len(matchLabels) == 0 {
		l.scan = append(l.scan, r)
		return
	}
	k := sortedKeys(matchLabels)[0]
	if l.byLabel[k] == nil {
		l.byLabel[k] = map[string][]*compiledCiliumRule{}
	}
	l.byLabel[k][matchLabels[k]] = append(l.byLabel[k][matchLabels[k]], r)
}

// each calls fn for every rule whose selector matches set.
func (l *ciliumLookup) each(set labels.Set, fn func(*compiledCiliumRule)) {
	for _, r := range l.scan {
		if r.selector.Matches(set) {
			fn(r)
		}
	}
	if len(l.byLabel) == 0 {
		return
	}
	for k, v := range set {
		for _, r := range l.byLabel[k][v] {
			if r.selector.Matches(set) {
				fn(r)
			}
		}
	}
}

// AddCiliumPolicy adds a CiliumNetworkPolicy or CiliumClusterwideNetworkPolicy.
func (e *Engine) AddCiliumPolicy(obj *unstructured.Unstructured) error {
	var cp ciliumPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &cp); err != nil {
		return fmt.Errorf("%s %s: %w", strings.ToLower(obj.GetKind()), objName(obj.GetNamespace(), obj.GetName()), err)
	}
	clusterwide := obj.GetKind() == CiliumClusterwideNetworkPolicyKind
	id := "ciliumnetworkpolicy/" + cp.Metadata.Namespace + "/" + cp.Metadata.Name
	if clusterwide {
		id = "ciliumclusterwidenetworkpolicy/" + cp.Metadata.Name
	}
	rules := cp.Specs
	if cp.Spec != nil {
		rules = append([]ciliumRule{*cp.Spec}, rules...)
	}
	for i, r := range rules {
		if r.EndpointSelector == nil {
			continue // a host policy (nodeSelector) selects nodes, not pods
		}
		norm := normalizeCiliumSelector(r.EndpointSelector)
		sel, err := metav1.LabelSelectorAsSelector(norm)
		if err != nil {
			return fmt.Errorf("%s: endpointSelector: %w", id, err)
		}
		if _, ok := norm.MatchLabels[ciliumClusterLabel]; ok || slices.ContainsFunc(norm.MatchExpressions, func(r metav1.LabelSelectorRequirement) bool { return r.Key == ciliumClusterLabel }) {
			e.cil.clusterSelectors++
		}
		field := "spec"
		if cp.Spec == nil || i > 0 {
			field = fmt.Sprintf("specs[%d]", i-boolInt(cp.Spec != nil))
		}
		cr := &compiledCiliumRule{id: id, selector: sel, egress: r.defaultDenyEgress(),
			noDefaultDeny: !r.defaultDenyEgress() && len(r.Egress)+len(r.EgressDeny) > 0}
		cr.sansNSLabels, cr.nsLabelDep = splitNamespaceLabels(sel)
		cr.rules = len(r.EgressDeny) > 0 || slices.ContainsFunc(r.Egress, func(g ciliumEgress) bool { return g.hasPeer() || len(g.ToPorts) > 0 })
		e.egress.ciliumFindings(cr, cp.Metadata.Namespace, field, r.Egress)
		ev := fmt.Sprintf("%s %s selects the pod (endpointSelector %s); Cilium policies add up with each other and with NetworkPolicies",
			id, field, labelSelectorText(normalizeCiliumSelector(r.EndpointSelector), "every endpoint"))
		for j := range cr.findings {
			cr.findings[j].evidence = ev
		}
		e.cil.seq++
		cr.seq, cr.wide = e.cil.seq, clusterwide
		if clusterwide {
			e.cil.cluster = append(e.cil.cluster, cr)
			e.cil.lookupCluster.add(cr, norm.MatchLabels)
			if cr.nsLabelDep {
				e.cil.clusterNSDep = append(e.cil.clusterNSDep, cr)
			}
		} else {
			ns := cp.Metadata.Namespace
			e.cil.byNS[ns] = append(e.cil.byNS[ns], cr)
			if e.cil.lookupNS[ns] == nil {
				e.cil.lookupNS[ns] = newCiliumLookup()
			}
			e.cil.lookupNS[ns].add(cr, norm.MatchLabels)
			if cr.nsLabelDep {
				if e.cil.nsDep == nil {
					e.cil.nsDep = map[string][]*compiledCiliumRule{}
				}
				e.cil.nsDep[ns] = append(e.cil.nsDep[ns], cr)
			}
		}
	}
	e.cil.count++
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func objName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// normalizeCiliumSelector drops Cilium's label source prefixes ("k8s:",
// "any:") so the selector matches plain pod labels.
func normalizeCiliumSelector(s *metav1.LabelSelector) *metav1.LabelSelector {
	out := &metav1.LabelSelector{}
	if len(s.MatchLabels) > 0 {
		out.MatchLabels = make(map[string]string, len(s.MatchLabels))
		for k, v := range s.MatchLabels {
			out.MatchLabels[stripSource(k)] = v
		}
	}
	for _, r := range s.MatchExpressions {
		r.Key = stripSource(r.Key)
		out.MatchExpressions = append(out.MatchExpressions, r)
	}
	return out
}

func stripSource(k string) string {
	if i := strings.IndexByte(k, ':'); i >= 0 {
		return k[i+1:]
	}
	return k
}

// ciliumFindings judges every egress rule of one Cilium rule.
// ns is a namespaced policy's namespace ("" for a clusterwide one).
func (m *egressModel) ciliumFindings(cr *compiledCiliumRule, ns, field string, egress []ciliumEgress) {
	where := cr.id
	for i, r := range egress {
		ports := ciliumPorts(r)
		rf := fmt.Sprintf("%s.egress[%d]", field, i)
		add := func(check, sub, expected, actual, fix string) {
			cr.findings = append(cr.findings, ruleFinding{check: check, subject: where + " " + sub, expected: expected, actual: actual, fix: fix})
		}
		// toRequires is no peer: it only adds a condition to the others
		// ("does not by itself grant access"), so a rule with toRequires and
		// toPorts but no peer is an L4-only rule: every destination.
		if !r.hasPeer() {
			if len(r.ToPorts) > 0 {
				actual := "toPorts without a peer: every destination on " + portsText(ports)
				if len(r.ToRequires) > 0 {
					actual = "toPorts with toRequires but no peer (toRequires grants nothing by itself): every destination on " + portsText(ports)
				}
				add(CiliumAnyDestination, rf, "a peer (toFQDNs, toEndpoints, toCIDR) for every allowed port", actual,
					fmt.Sprintf("add the allowed destinations to %s of %s", rf, where))
			}
			continue // an empty rule allows nothing: it only turns on default-deny
		}
		for j, ent := range r.ToEntities {
			sub := fmt.Sprintf("%s.toEntities[%d]", rf, j)
			switch strings.ToLower(ent) {
			case "world", "world-ipv4", "world-ipv6", "all":
				cr.world = true
				add(CiliumWorld, sub, "only declared destinations", "toEntities "+ent+" on "+portsText(ports)+" — the whole internet",
					fmt.Sprintf("remove %s from %s; policies add up, so this reopens egress whatever else denies", sub, where))
			case "none":
			default:
				if !dnsOnly(ports) {
					add(CiliumPeer, sub, m.peerExpected(), "toEntities "+ent+" on "+portsText(ports),
						fmt.Sprintf("remove %s from %s, or limit it to port 53", sub, where))
				}
			}
		}
		m.ciliumCIDRFindings(cr, rf, r, ports)
		for j, f := range r.ToFQDNs {
			sub := fmt.Sprintf("%s.toFQDNs[%d]", rf, j)
			text := f.text()
			live := fqdnRule(f.MatchName, f.MatchPattern)
			cr.fqdns = append(cr.fqdns, fqdnAllow{rule: live, ports: ports})
			if _, ok := m.explainHost(live, ports); ok {
				continue
			}
			add(CiliumFQDNExtra, sub, "only declared names: "+m.hostsText(), text+" on "+portsText(ports),
				fmt.Sprintf("remove %s from %s, or declare it in spec.egress.allow with a reason", sub, where))
		}
		m.ciliumPeerFindings(cr, ns, rf, r, ports)
		m.ciliumDNSFindings(cr, rf, r)
	}
}

// ciliumDNSFindings judges the patterns a rule's DNS rules let the
// sandbox resolve through Cilium's DNS proxy. A pattern beyond what the
// sandbox needs ("matchPattern: '*'" above all) is a DNS channel out
// whatever toFQDNs allows: the proxy forwards queries for names the
// sandbox makes up, and the zone's own servers read them. One extra
// matchName carries nothing the sandbox chooses, so it is left alone.
// Names under the cluster domain stay in the cluster's resolver, and
// spec.egress.dns.arbitraryNames: allow declares the rest.
func (m *egressModel) ciliumDNSFindings(cr *compiledCiliumRule, rf string, r ciliumEgress) {
	if m.dnsAny {
		return
	}
	for k, tp := range r.ToPorts {
		if tp.Rules == nil {
			continue
		}
		for l, f := range tp.Rules.DNS {
			// One name more is no channel: only a pattern lets the
			// sandbox choose the names it asks for.
			live := fqdnRule(f.MatchName, f.MatchPattern)
			if !live.IsPattern() || m.explainDNSName(live) {
				continue
			}
			sub := fmt.Sprintf("%s.toPorts[%d].rules.dns[%d]", rf, k, l)
			actual := f.text() + ": the sandbox resolves names of its choosing under " + strings.TrimPrefix(live.Host, "*.") + " through Cilium's DNS proxy — a DNS channel to whoever serves them"
			if live.Host == "*" {
				actual = f.text() + ": the sandbox resolves every name, through Cilium's DNS proxy — a DNS channel out"
			}
			cr.findings = append(cr.findings, ruleFinding{check: CiliumDNSNames, subject: cr.id + " " + sub,
				expected: "only the names the sandbox resolves: " + m.hostsText() + ", their search-list expansions, names under " + m.clusterDomain,
				actual:   actual,
				fix:      fmt.Sprintf("narrow %s of %s to the declared names (sandprobe render --egress cilium writes them), or declare spec.egress.dns.arbitraryNames: allow", sub, cr.id)})
		}
	}
}

// explainDNSName: a DNS rule's name is one the sandbox may resolve: a
// declared name (on any port: DNS has none), the proxy's, a declared
// in-cluster peer's, or one under the cluster domain (a search-list
// expansion, a Service), which the cluster's resolver answers itself.
func (m *egressModel) explainDNSName(live policy.HostRule) bool {
	for _, h := range m.hosts {
		if h.rule.Covers(policy.HostRule{Host: live.Host, Port: h.rule.Port}) {
			return true
		}
	}
	if m.proxy != nil && m.proxy.host == live.Host {
		return true
	}
	for _, p := range m.peers {
		if p.host == live.Host {
			return true
		}
	}
	cd := strings.TrimPrefix(live.Host, "*.")
	return cd == m.clusterDomain || strings.HasSuffix(cd, "."+m.clusterDomain)
}

// ciliumCIDRFindings judges the addresses of one egress rule rf: toCIDR
// and toCIDRSet.
func (m *egressModel) ciliumCIDRFindings(cr *compiledCiliumRule, rf string, r ciliumEgress, ports []portSpec) {
	where := cr.id
	add := func(check, sub, expected, actual, fix string) {
		cr.findings = append(cr.findings, ruleFinding{check: check, subject: where + " " + sub, expected: expected, actual: actual, fix: fix})
	}
	cidrs := make([]struct{ cidr, sub, extra string }, 0, len(r.ToCIDR)+len(r.ToCIDRSet))
	for j, c := range r.ToCIDR {
		cidrs = append(cidrs, struct{ cidr, sub, extra string }{c, fmt.Sprintf("%s.toCIDR[%d]", rf, j), ""})
	}
	for j, c := range r.ToCIDRSet {
		sub := fmt.Sprintf("%s.toCIDRSet[%d]", rf, j)
		if c.CIDRGroupRef != "" {
			add(CiliumCIDR, sub, "only declared addresses: "+m.ipsText(), "cidrGroupRef "+c.CIDRGroupRef+" (its addresses cannot be checked here)",
				fmt.Sprintf("replace %s of %s with the declared addresses", sub, where))
			continue
		}
		extra := ""
		if len(c.Except) > 0 {
			extra = " except " + strings.Join(c.Except, ", ")
		}
		cidrs = append(cidrs, struct{ cidr, sub, extra string }{c.CIDR, sub, extra})
	}
	for _, c := range cidrs {
		pfx, err := parsePrefix(c.cidr)
		actual := c.cidr + c.extra + " on " + portsText(ports)
		switch {
		case err != nil:
			add(CiliumCIDR, c.sub, "a declared address", "unparsable CIDR "+c.cidr, fmt.Sprintf("remove %s from %s", c.sub, where))
		case pfx.Bits() == 0:
			cr.world = true
			add(CiliumWorld, c.sub, "only declared destinations", actual+" — the whole internet",
				fmt.Sprintf("remove %s from %s; policies add up, so this reopens egress whatever else denies", c.sub, where))
		default:
			if reason, known := m.explainPrefix(pfx, ports); reason == "" {
				exp := "only declared addresses: " + m.ipsText()
				if known {
					exp = m.declaredPorts(pfx)
				}
				add(CiliumCIDR, c.sub, exp, actual, fmt.Sprintf("remove %s from %s, or declare the address in spec.egress.allow with a reason", c.sub, where))
			}
		}
	}
}

// ciliumPeerFindings judges the in-cluster peers of one egress rule rf:
// toEndpoints, toServices, toNodes and toGroups.
func (m *egressModel) ciliumPeerFindings(cr *compiledCiliumRule, ns, rf string, r ciliumEgress, ports []portSpec) {
	where := cr.id
	add := func(check, sub, expected, actual, fix string) {
		cr.findings = append(cr.findings, ruleFinding{check: check, subject: where + " " + sub, expected: expected, actual: actual, fix: fix})
	}
	peers := make([]string, 0)
	for j, s := range r.ToEndpoints {
		if m.endpointPeerExplained(&s, ports) {
			continue
		}
		sub := fmt.Sprintf("%s.toEndpoints[%d]", rf, j)
		live := "toEndpoints " + labelSelectorText(normalizeCiliumSelector(&s), "every endpoint")
		switch v := m.judgeEndpointPeer(&s, ns, ports); {
		case v.explained:
			continue
		case v.widened != nil:
			wf := widenedFinding(CiliumPeer, where+" "+sub, live+" on "+portsText(ports), where, sub, v.widened)
			cr.findings = append(cr.findings, wf)
			continue
		}
		peers = append(peers, sub+"\x00"+live)
	}
	for j, s := range r.ToServices {
		sub := fmt.Sprintf("%s.toServices[%d]", rf, j)
		if dnsOnly(ports) || (s.K8sService != nil && m.proxy != nil && m.proxy.ns != "" && s.K8sService.Namespace == m.proxy.ns &&
			strings.HasPrefix(m.proxy.host, s.K8sService.ServiceName+".") && onlyPort(ports, m.proxy.port)) {
			continue
		}
		if p := m.servicePeer(s.K8sService, ns); p != nil {
			if len(r.ToPorts) == 0 {
				continue
			}
			add(CiliumPeer, sub, "toServices for "+p.String()+" without toPorts (its endpoints' ports are the Service's)",
				"toServices combined with toPorts "+portsText(ports)+": Cilium then allows those ports to the world (cilium#20067)",
				fmt.Sprintf("drop toPorts from %s of %s, or allow the pods by toEndpoints with their labels", rf, where))
			continue
		}
		peers = append(peers, sub+"\x00toServices")
	}
	for j := range r.ToNodes {
		if !dnsOnly(ports) {
			peers = append(peers, fmt.Sprintf("%s.toNodes[%d]", rf, j)+"\x00toNodes (the nodes themselves)")
		}
	}
	for j := range r.ToGroups {
		peers = append(peers, fmt.Sprintf("%s.toGroups[%d]", rf, j)+"\x00toGroups (cloud provider groups cannot be checked here)")
	}
	for _, p := range peers {
		sub, desc, _ := strings.Cut(p, "\x00")
		add(CiliumPeer, sub, m.peerExpected(), desc+" on "+portsText(ports),
			fmt.Sprintf("remove %s from %s, or narrow it to cluster DNS (port 53), the proxy or a declared in-cluster peer", sub, where))
	}
}

// judgeEndpointPeer compares a toEndpoints selector with the declared
// in-cluster peers: without a namespace label it selects the policy's own
// namespace (any namespace for a clusterwide policy: never explained).
func (m *egressModel) judgeEndpointPeer(s *metav1.LabelSelector, ns string, ports []portSpec) peerVerdict {
	norm := normalizeCiliumSelector(s)
	labels := make(map[string]string, len(norm.MatchLabels))
	for k, v := range norm.MatchLabels {
		labels[k] = v
	}
	peerNS, known := labels[ciliumNamespaceLabel]
	delete(labels, ciliumNamespaceLabel)
	if !known && ns != "" {
		peerNS, known = ns, true
	}
	return m.judgePeer(peerNS, known, labels, ports)
}

// servicePeer is the declared in-cluster peer a toServices k8sService
// names: its location's service, or the Service its host names.
func (m *egressModel) servicePeer(svc *k8sServiceRef, ns string) *allowPeer {
	if svc == nil {
		return nil
	}
	svcNS := orDefault(svc.Namespace, ns)
	for i := range m.peers {
		p := &m.peers[i]
		name := p.service
		if name == "" && policy.ServiceNamespace(p.host) == p.ns {
			name, _, _ = strings.Cut(p.host, ".")
		}
		if p.ns == svcNS && name != "" && name == svc.ServiceName {
			return p
		}
	}
	return nil
}

// endpointPeerExplained: cluster DNS on port 53, or the proxy's namespace
// on the proxy port.
func (m *egressModel) endpointPeerExplained(s *metav1.LabelSelector, ports []portSpec) bool {
	if dnsOnly(ports) {
		return true
	}
	if m.proxy == nil || m.proxy.ns == "" || !onlyPort(ports, m.proxy.port) {
		return false
	}
	ns := normalizeCiliumSelector(s).MatchLabels[ciliumNamespaceLabel]
	return ns == m.proxy.ns
}

func (m *egressModel) hostsText() string {
	var parts []string
	for _, h := range m.hosts {
		parts = append(parts, h.rule.String())
	}
	return quoteList(parts)
}

// fqdnRule turns a toFQDNs entry into a host rule that matches at least
// what Cilium matches, so "is it covered" errs towards drift. Cilium's "*"
// inside a label ("api*.github.com") becomes "*.github.com".
func fqdnRule(name, pattern string) policy.HostRule {
	if name != "" {
		return policy.HostRule{Host: policy.NormalizeHost(name)}
	}
	p := policy.NormalizeHost(pattern)
	if p == "*" || p == "" {
		return policy.HostRule{Host: "*"}
	}
	last := strings.LastIndexByte(p, '*')
	if last < 0 {
		return policy.HostRule{Host: p}
	}
	rest := p[last+1:]
	if strings.HasPrefix(rest, ".") && len(rest) > 1 {
		return policy.HostRule{Host: "*" + rest}
	}
	return policy.HostRule{Host: "*"}
}

func ciliumPorts(r ciliumEgress) []portSpec {
	var out []portSpec
	for _, tp := range r.ToPorts {
		for _, p := range tp.Ports {
			s := portSpec{proto: strings.ToUpper(p.Protocol), end: int(p.EndPort)}
			if s.proto == "" {
				s.proto = "ANY"
			}
			if n, err := strconv.Atoi(p.Port); err == nil {
				s.port = n
			} else if p.Port != "" {
				s.named = p.Port
			}
			out = append(out, s)
		}
	}
	return out
}

// NoteCiliumCluster says, once, that a verdict depends on the cluster name
// Cilium policies select on.
func (e *Engine) NoteCiliumCluster(col *Collector) {
	if e.cil.clusterSelectors > 0 {
		col.Note("%d Cilium rules select on %s: judged for Cilium cluster %q (pass --cilium-cluster with this cluster's cluster-name if it is another)", e.cil.clusterSelectors, ciliumClusterLabel, e.ciliumCluster)
	}
}

// ciliumLabels are the labels Cilium gives a pod's endpoint: its own, its
// namespace, service account and cluster, and its namespace's labels.
func ciliumLabels(ns string, podLabels map[string]string, serviceAccount string, nsLabels map[string]string, cluster string) labels.Set {
	set := make(labels.Set, len(podLabels)+len(nsLabels)+3)
	for k, v := range podLabels {
		set[k] = v
	}
	for k, v := range nsLabels {
		set[ciliumNamespaceLabelPrefix+k] = v
	}
	set[ciliumNamespaceLabel] = ns
	set[ciliumServiceAccountLabel] = orDefault(serviceAccount, "default")
	set[ciliumClusterLabel] = cluster
	return set
}

// selecting lists the rules, namespaced and cluster-wide, whose endpoint
// selector matches a pod with these labels and service account in ns, as
// Cilium sees it (its namespace's labels, the cluster's name). For a
// namespace whose labels are not known, the rules that read namespace
// labels are left out of it and returned apart when the rest of their
// selector matches: they may select the pod or not.
func (idx *ciliumIndex) selecting(ns string, podLabels map[string]string, serviceAccount string, nsLabels map[string]string, known bool, cluster string) (sel, undetermined []*compiledCiliumRule) {
	set := ciliumLabels(ns, podLabels, serviceAccount, nsLabels, cluster)
	add := func(r *compiledCiliumRule) {
		if known || !r.nsLabelDep {
			sel = append(sel, r)
		}
	}
	if l := idx.lookupNS[ns]; l != nil {
		l.each(set, add)
	}
	idx.lookupCluster.each(set, add)
	if !known {
		for _, r := range idx.nsDep[ns] {
			if r.sansNSLabels.Matches(set) {
				undetermined = append(undetermined, r)
			}
		}
		for _, r := range idx.clusterNSDep {
			if r.sansNSLabels.Matches(set) {
				undetermined = append(undetermined, r)
			}
		}
	}
	// In the order they were added, namespaced first, as a report reads.
	sort.Slice(sel, func(i, j int) bool {
		if sel[i].wide != sel[j].wide {
			return sel[j].wide
		}
		return sel[i].seq < sel[j].seq
	})
	return sel, undetermined
}

// checkPod stamps the findings of every Cilium rule selecting the pod and
// reports whether any of them restricts its egress, and the rules that may
// select it or not (its namespace's labels unknown).
func (idx *ciliumIndex) checkPod(c *podCheck, pod *corev1.Pod, nsLabels map[string]string, known bool, cluster string) (bool, []*compiledCiliumRule) {
	if idx.count == 0 {
		return false, nil
	}
	sel, und := idx.selecting(pod.Namespace, pod.Labels, pod.Spec.ServiceAccountName, nsLabels, known, cluster)
	restricted := false
	for _, r := range sel {
		if r.egress {
			restricted = true
		}
		for _, rf := range r.findings {
			c.out = append(c.out, rf.on(c.ensureTarget(), c.ns))
		}
	}
	if restricted {
		idx.missing(c, sel)
	}
	return restricted, und
}

// missing reports declared names that no selecting Cilium rule allows, once
// per distinct selection. With a proxy, names go through the proxy and need
// no toFQDNs rule.
func (idx *ciliumIndex) missing(c *podCheck, sel []*compiledCiliumRule) {
	m := c.e.egress
	if m.proxy != nil || len(m.hosts) == 0 {
		return
	}
	ids := make([]string, 0, len(sel))
	for _, r := range sel {
		ids = append(ids, r.id)
		if r.world {
			return
		}
	}
	sort.Strings(ids)
	// Whether an earlier pod carried them is settle's to say: pods are
	// checked in parallel, and settled in order.
	span := onceSpan{key: strings.Join(ids, "+"), start: len(c.out)}
	defer func() {
		span.end = len(c.out)
		c.once = append(c.once, span)
	}()
	for _, h := range m.hosts {
		covered := false
		for _, r := range sel {
			for _, f := range r.fqdns {
				if f.rule.Covers(policy.HostRule{Host: h.rule.Host, Port: f.rule.Port}) && portsInclude(f.ports, h.rule.Port) {
					covered = true
				}
			}
		}
		if covered {
			continue
		}
		c.out = append(c.out, report.Finding{
			Check: CiliumFQDNMissing, Target: c.ensureTarget(), Namespace: c.ns, Subject: h.rule.String(), Status: report.Skip,
			Expected: "allowed by a toFQDNs rule of the Cilium policies selecting the sandbox (" + h.reason + ")",
			Actual:   "no selecting Cilium rule allows it: sandboxes cannot reach it",
			Fix:      fmt.Sprintf("add toFQDNs {%s} with toPorts %d/TCP to %s, or drop the allowance", fqdnText(h.rule.Host), h.rule.Port, ids[0]),
			Evidence: "selected by " + strings.Join(ids, ", ") + "; reported once for every pod these policies select",
		})
	}
}

func fqdnText(host string) string {
	if strings.HasPrefix(host, "*") {
		return "matchPattern: " + host
	}
	return "matchName: " + host
}

// portsInclude reports whether the live ports allow port over TCP.
func portsInclude(ps []portSpec, port int) bool {
	if len(ps) == 0 {
		return true
	}
	for _, p := range ps {
		if p.named != "" || (p.proto != "TCP" && p.proto != "ANY") {
			continue
		}
		if p.port == 0 || p.port == port || (p.end >= port && p.port <= port) {
			return true
		}
	}
	return false
}
