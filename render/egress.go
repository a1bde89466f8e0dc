package render

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sandprobe/sandprobe/policy"
)

const namespaceNameLabel = "kubernetes.io/metadata.name"

// Reasons of the rules render adds on its own.
const (
	reasonDNS   = "the declared resolver (spec.egress.dns.resolverLocation): resolve the proxy and the allowed names (whether arbitrary names resolve is tested by the probe)"
	reasonProxy = "the declared egress proxy: every allowed connection goes through it"
)

// EgressPolicyName names the rendered NetworkPolicy and CiliumNetworkPolicy.
func EgressPolicyName(p *policy.Policy) string { return "sandprobe-" + p.Metadata.Name + "-egress" }

// Namespaces are where render puts the egress policies: the policy's
// namespaces, or the one given.
func Namespaces(p *policy.Policy, override string) []string {
	if override != "" {
		return []string{override}
	}
	if len(p.Spec.Namespaces) > 0 {
		return p.Spec.Namespaces
	}
	return []string{"default"}
}

// NetworkPolicy renders the declared egress as a NetworkPolicy: the
// declared resolver, the proxy where it runs, and every allowance given as
// an address. A NetworkPolicy cannot name hosts, so name allowances without
// a proxy (and a proxy known only by a host name) are listed in an
// annotation and left to the CiliumNetworkPolicy; CheckEgress refuses to
// print a NetworkPolicy with such gaps.
func NetworkPolicy(p *policy.Policy, namespace string) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name: EgressPolicyName(p), Namespace: namespace,
			Labels:      map[string]string{LabelManagedBy: "sandprobe", LabelPolicy: p.Metadata.Name},
			Annotations: map[string]string{},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: maps.Clone(p.Spec.Selector.MatchLabels)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{},
		},
	}
	add := func(rule networkingv1.NetworkPolicyEgressRule, reason string) {
		np.Annotations[AnnotationReasonPrefix+"egress."+strconv.Itoa(len(np.Spec.Egress))] = reason
		np.Spec.Egress = append(np.Spec.Egress, rule)
	}
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	if loc := p.Spec.Egress.DNS.ResolverLocation; loc != nil {
		add(networkingv1.NetworkPolicyEgressRule{
			To:    locationPeers(loc),
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: ptrPort(53)}, {Protocol: &tcp, Port: ptrPort(53)}},
		}, reasonDNS)
	}
	var unexpressed []string
	if host, port, ns, ok := proxyTarget(p); ok {
		ip, err := netip.ParseAddr(host)
		switch loc := p.Spec.Egress.ProxyLocation; {
		case loc != nil:
			add(networkingv1.NetworkPolicyEgressRule{
				To:    locationPeers(loc),
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptrPort(port)}},
			}, reasonProxy)
		case err == nil:
			add(ipRule(ip, port), reasonProxy)
		case ns != "":
			add(networkingv1.NetworkPolicyEgressRule{
				To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{namespaceNameLabel: ns}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptrPort(port)}},
			}, reasonProxy)
		default:
			unexpressed = append(unexpressed, fmt.Sprintf("proxy %s:%d", host, port))
		}
	}
	for _, a := range p.Spec.Egress.Allow {
		if a.InCluster() {
			add(networkingv1.NetworkPolicyEgressRule{To: locationPeers(a.Location), Ports: tcpPorts(a.PeerPorts())}, a.Reason)
			continue
		}
		if ip, err := netip.ParseAddr(a.Host); err == nil {
			add(ipRule(ip, a.Port), a.Reason)
			continue
		}
		if p.Spec.Egress.Proxy != "" {
			continue // the proxy reaches it; its addresses are what must stay closed
		}
		if len(a.Addresses) > 0 {
			// Reached directly with no proxy: a NetworkPolicy allows the
			// name by the addresses the policy gives for it.
			add(addressesRule(a.Addresses, a.Port), a.Reason)
			continue
		}
		unexpressed = append(unexpressed, fmt.Sprintf("%s:%d", a.Host, a.Port))
	}
	if len(unexpressed) > 0 {
		np.Annotations["sandprobe.dev/not-expressible"] = strings.Join(unexpressed, ", ") +
			": a NetworkPolicy cannot match host names; the CiliumNetworkPolicy allows them"
	}
	return np
}

// locationPeers are the NetworkPolicy peers of a declared location: its
// namespace (narrowed to its pods' labels), or one ipBlock per CIDR.
func locationPeers(loc *policy.Location) []networkingv1.NetworkPolicyPeer {
	var peers []networkingv1.NetworkPolicyPeer
	for _, pfx := range loc.Prefixes() {
		peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: pfx.String()}})
	}
	if loc.Namespace != "" {
		peer := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{namespaceNameLabel: loc.Namespace}}}
		if l := loc.PodLabels(); len(l) > 0 {
			peer.PodSelector = &metav1.LabelSelector{MatchLabels: maps.Clone(l)}
		}
		peers = append(peers, peer)
	}
	return peers
}

// ciliumLocation is a declared location as a Cilium egress rule's peer:
// toEndpoints for pods, toCIDR for addresses.
func ciliumLocation(loc *policy.Location) map[string]any {
	if loc.Namespace != "" {
		sel := map[string]any{"k8s:io.kubernetes.pod.namespace": loc.Namespace}
		for k, v := range loc.PodLabels() {
			sel["k8s:"+k] = v
		}
		return map[string]any{"toEndpoints": []any{map[string]any{"matchLabels": sel}}}
	}
	var cidrs []any
	for _, pfx := range loc.Prefixes() {
		cidrs = append(cidrs, pfx.String())
	}
	return map[string]any{"toCIDR": cidrs}
}

// EgressKind is one kind of egress policy render writes.
type EgressKind string

// The egress policies render writes.
const (
	KindNetworkPolicy EgressKind = "networkpolicy"
	KindCilium        EgressKind = "cilium"
)

// CheckEgress refuses egress policies that would cut a sandbox off from
// what its own policy requires: a proxy or a resolver with no declared
// location, and (in a NetworkPolicy) an allowance given by name without a
// proxy. Each problem is a policy.FieldError naming its field, joined:
// policy.WriteProblems prints one a line, as validate does.
func CheckEgress(p *policy.Policy, kinds ...EgressKind) error {
	e := &p.Spec.Egress
	var problems []error
	need := func(path, what string) { problems = append(problems, &policy.FieldError{Path: path, Msg: what}) }
	for i, a := range e.Allow {
		if l := a.Location; l != nil && l.Service != "" && l.PodSelector == nil {
			need(fmt.Sprintf("spec.egress.allow[%d].location.podSelector", i), fmt.Sprintf("required: render allows the pods behind the Service %s/%s by their labels (a NetworkPolicy cannot select a Service, and Cilium's toServices matches only Services without a selector); give the Service's selector", l.Namespace, l.Service))
		}
	}
	for _, kind := range kinds {
		if kind != KindNetworkPolicy {
			continue
		}
		if host, port, ns, ok := proxyTarget(p); ok && e.ProxyLocation == nil && ns == "" {
			if _, err := netip.ParseAddr(host); err != nil {
				need("spec.egress.proxyLocation", fmt.Sprintf("required: the proxy %s:%d is a host name, which a NetworkPolicy cannot match; say where it runs (namespace and podSelector, or cidrs)", host, port))
			}
		}
		if e.Proxy == "" {
			for i, a := range e.Allow {
				if _, err := netip.ParseAddr(a.Host); err != nil && !a.InCluster() && len(a.Addresses) == 0 {
					need(fmt.Sprintf("spec.egress.allow[%d].host", i), fmt.Sprintf("%s cannot be expressed in a NetworkPolicy (it matches addresses, not names): send it through spec.egress.proxy, give its addresses (addresses: [...]), or render only the CiliumNetworkPolicy (--egress cilium)", a.Host))
				}
			}
		}
	}
	if len(kinds) > 0 && e.DNS.ResolverLocation == nil {
		if names := namesToResolve(p); len(names) > 0 {
			need("spec.egress.dns.resolverLocation", fmt.Sprintf("required: the sandbox resolves %s, so its egress policy must allow its resolver; say where it runs (e.g. {namespace: kube-system, podSelector: {matchLabels: {k8s-app: kube-dns}}}, or cidrs)", strings.Join(names, ", ")))
		}
	}
	return errors.Join(problems...) // one policy.FieldError per problem
}

// namesToResolve are the names the sandbox itself must resolve: the
// proxy's, or — without a proxy — every allowed name.
func namesToResolve(p *policy.Policy) []string {
	var out []string
	host, _, _, proxied := proxyTarget(p)
	if _, err := netip.ParseAddr(host); proxied && err != nil {
		out = append(out, host)
	}
	for _, a := range p.Spec.Egress.Allow {
		if _, err := netip.ParseAddr(a.Host); err != nil && (!proxied || a.InCluster()) {
			out = append(out, a.Host)
		}
	}
	return out
}

func ipRule(ip netip.Addr, port int) networkingv1.NetworkPolicyEgressRule {
	tcp := corev1.ProtocolTCP
	return networkingv1.NetworkPolicyEgressRule{
		To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()).String()}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptrPort(port)}},
	}
}

// addressesRule allows TCP port to each of a named host's addresses
// (validation has checked they parse).
func addressesRule(addrs []string, port int) networkingv1.NetworkPolicyEgressRule {
	rule := networkingv1.NetworkPolicyEgressRule{Ports: tcpPorts([]int{port})}
	for _, s := range addrs {
		if ip, err := netip.ParseAddr(s); err == nil {
			rule.To = append(rule.To, ipRule(ip, port).To...)
		}
	}
	return rule
}

// tcpPorts are the NetworkPolicy ports of a peer's TCP ports.
func tcpPorts(ports []int) []networkingv1.NetworkPolicyPort {
	tcp := corev1.ProtocolTCP
	out := make([]networkingv1.NetworkPolicyPort, len(ports))
	for i, n := range ports {
		out[i] = networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: ptrPort(n)}
	}
	return out
}

func ptrPort(n int) *intstr.IntOrString {
	v := intstr.FromInt32(int32(n))
	return &v
}

// CiliumNetworkPolicy renders the declared egress for Cilium: DNS through
// Cilium's DNS proxy limited to the names the sandbox may resolve, the
// proxy, and — without a proxy — every name allowance as toFQDNs and every
// address as toCIDR. Note Cilium's "*.example.com" matches one label; the
// policy's matches any depth.
func CiliumNetworkPolicy(p *policy.Policy, namespace string) map[string]any {
	annotations := map[string]any{}
	var egress []any
	add := func(rule map[string]any, reason string) {
		annotations[AnnotationReasonPrefix+"egress."+strconv.Itoa(len(egress))] = reason
		egress = append(egress, rule)
	}
	toPorts := func(port int, proto string) []any {
		return []any{map[string]any{"ports": []any{map[string]any{"port": strconv.Itoa(port), "protocol": proto}}}}
	}

	host, port, ns, hasProxy := proxyTarget(p)
	dnsNames := ciliumDNSNames(p, namespace)
	if loc := p.Spec.Egress.DNS.ResolverLocation; loc != nil {
		dnsRule := ciliumLocation(loc)
		dnsRule["toPorts"] = []any{map[string]any{
			"ports": []any{map[string]any{"port": "53", "protocol": "ANY"}},
			"rules": map[string]any{"dns": dnsNames},
		}}
		if len(dnsNames) == 0 {
			delete(dnsRule["toPorts"].([]any)[0].(map[string]any), "rules")
		}
		add(dnsRule, reasonDNS)
	}
	if hasProxy {
		switch ip, err := netip.ParseAddr(host); {
		case p.Spec.Egress.ProxyLocation != nil:
			rule := ciliumLocation(p.Spec.Egress.ProxyLocation)
			rule["toPorts"] = toPorts(port, "TCP")
			add(rule, reasonProxy)
		case err == nil:
			add(map[string]any{"toCIDR": []any{netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()).String()}, "toPorts": toPorts(port, "TCP")}, reasonProxy)
		case ns != "":
			add(map[string]any{
				"toEndpoints": []any{map[string]any{"matchLabels": map[string]any{"k8s:io.kubernetes.pod.namespace": ns}}},
				"toPorts":     toPorts(port, "TCP"),
			}, reasonProxy)
		default:
			add(map[string]any{"toFQDNs": []any{map[string]any{"matchName": host}}, "toPorts": toPorts(port, "TCP")}, reasonProxy)
		}
	}
	for _, a := range p.Spec.Egress.Allow {
		if a.InCluster() {
			add(ciliumPeer(a), a.Reason)
			continue
		}
		if ip, err := netip.ParseAddr(a.Host); err == nil {
			add(map[string]any{"toCIDR": []any{netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()).String()}, "toPorts": toPorts(a.Port, "TCP")}, a.Reason)
			continue
		}
		if hasProxy {
			continue // names go through the proxy; a direct rule would bypass it
		}
		add(map[string]any{"toFQDNs": []any{fqdnSelector(a.Host)}, "toPorts": toPorts(a.Port, "TCP")}, a.Reason)
	}
	labels := map[string]any{LabelManagedBy: "sandprobe", LabelPolicy: p.Metadata.Name}
	sel := map[string]any{}
	for k, v := range p.Spec.Selector.MatchLabels {
		sel[k] = v
	}
	return map[string]any{
		"apiVersion": "cilium.io/v2",
		"kind":       "CiliumNetworkPolicy",
		"metadata": map[string]any{
			"name": EgressPolicyName(p), "namespace": namespace, "labels": labels, "annotations": annotations,
		},
		"spec": map[string]any{
			"description":      "sandprobe: the declared egress of " + p.Metadata.Name + " sandboxes",
			"endpointSelector": map[string]any{"matchLabels": sel},
			"egress":           egress,
		},
	}
}

// ciliumPeer is an in-cluster allowance's Cilium rule: toEndpoints for
// its pods on the ports they listen on. A toFQDNs rule would not do:
// Cilium matches FQDN rules on the addresses a name resolved to, and a
// Service name resolves to its ClusterIP, which the datapath has
// translated to a pod address before policy sees it. Nor toServices: it
// matches only Services without a selector, and must not be combined
// with toPorts (cilium#20067: the ports then open to the world).
func ciliumPeer(a policy.Allowance) map[string]any {
	rule := ciliumLocation(a.Location)
	var ports []any
	for _, n := range a.PeerPorts() {
		ports = append(ports, map[string]any{"port": strconv.Itoa(n), "protocol": "TCP"})
	}
	rule["toPorts"] = []any{map[string]any{"ports": ports}}
	return rule
}

// ciliumDNSNames are the names the sandbox may ask the resolver for: the
// proxy's, and the allowed names it resolves itself.
func ciliumDNSNames(p *policy.Policy, namespace string) []any {
	var dnsNames []any
	if p.Spec.Egress.DNS.ArbitraryNames == "allow" {
		return append(dnsNames, map[string]any{"matchPattern": "*"})
	}
	var names []string
	host, _, _, hasProxy := proxyTarget(p)
	if _, err := netip.ParseAddr(host); hasProxy && err != nil {
		names = append(names, host)
	}
	for _, a := range p.Spec.Egress.Allow {
		if _, err := netip.ParseAddr(a.Host); err == nil || (hasProxy && !a.InCluster()) {
			continue // with a proxy, only the proxy resolves the allowed names
		}
		names = append(names, a.Host)
	}
	search := SearchDomains(p, namespace)
	for _, n := range names {
		dnsNames = append(dnsNames, fqdnSelector(n))
		for _, d := range search {
			dnsNames = append(dnsNames, fqdnSelector(n+"."+d))
		}
	}
	return dnsNames
}

// SearchDomains are the search list of a pod in namespace under the
// Kubernetes default (dnsPolicy ClusterFirst): NAMESPACE.svc.CLUSTER,
// svc.CLUSTER, CLUSTER. With ndots:5, the default, a pod's C library asks
// for every name with fewer than five dots under each of them before the
// name itself, and ends its search at the first answer that is neither
// NXDOMAIN nor an empty answer (nor SERVFAIL, for glibc): a DNS rule that
// REFUSES an expansion (Cilium's DNS proxy, by default) keeps the
// sandbox's processes from the allowed name itself. So the DNS rule
// allows each expansion (the cluster's resolver answers NXDOMAIN for
// them). Search domains a node adds to the list (its cloud's) are not
// known here: pods that inherit them need dnsConfig (docs/egress.md).
func SearchDomains(p *policy.Policy, namespace string) []string {
	cd := strings.TrimSuffix(p.Spec.Egress.DNS.ClusterDomain, ".")
	if cd == "" {
		cd = "cluster.local"
	}
	return []string{namespace + ".svc." + cd, "svc." + cd, cd}
}

func fqdnSelector(host string) map[string]any {
	if strings.HasPrefix(host, "*") {
		return map[string]any{"matchPattern": host}
	}
	return map[string]any{"matchName": host}
}
