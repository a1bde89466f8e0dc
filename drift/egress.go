package drift

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// egressModel is what the declared policy explains: the allowances (names
// and addresses, each on its port), the proxy, and cluster DNS. A live
// egress rule is drift unless one of these explains it.
type egressModel struct {
	hosts []allowHost
	ips   []allowIP
	peers []allowPeer
	proxy *proxyTarget
	// resolver holds the declared resolver's CIDRs (spec.egress.dns.resolverLocation):
	// an address block on port 53 is explained when it is one of them.
	resolver []netip.Prefix
	// dnsAny: spec.egress.dns.arbitraryNames is allow, so a DNS rule may
	// let every name through.
	dnsAny bool
	// clusterDomain is spec.egress.dns.clusterDomain (cluster.local).
	clusterDomain string
}

type allowHost struct {
	rule   policy.HostRule
	reason string
}

type allowIP struct {
	addr   netip.Addr
	port   int
	reason string
}

// proxyTarget is the declared forward proxy. A Kubernetes service name
// ("egress-proxy.sandbox-system[.svc[.cluster.local]]") gives the namespace
// an in-cluster peer must be in; an address gives an ipBlock.
type proxyTarget struct {
	host string
	port int
	ns   string
	ip   netip.Addr
	// cidrs are spec.egress.proxyLocation's addresses, when it gives them.
	cidrs []netip.Prefix
}

func newEgressModel(p *policy.Policy) (*egressModel, error) {
	m := &egressModel{}
	for i, a := range p.Spec.Egress.Allow {
		if a.InCluster() {
			m.peers = append(m.peers, newAllowPeer(a))
			continue
		}
		r, err := policy.ParseHostRule(a.Host)
		if err != nil {
			return nil, fmt.Errorf("policy %s: spec.egress.allow[%d].host: %w", p.Metadata.Name, i, err)
		}
		if a.Port != 0 {
			r.Port = a.Port
		}
		if ip, err := netip.ParseAddr(r.Host); err == nil {
			m.ips = append(m.ips, allowIP{addr: ip.Unmap(), port: r.Port, reason: a.Reason})
			continue
		}
		m.hosts = append(m.hosts, allowHost{rule: r, reason: a.Reason})
		if p.Spec.Egress.Proxy == "" {
			// Reached directly: its declared addresses are how an
			// address-based engine allows it (render writes them).
			for _, s := range a.Addresses {
				if ip, err := netip.ParseAddr(s); err == nil {
					m.ips = append(m.ips, allowIP{addr: ip.Unmap(), port: r.Port, reason: a.Reason})
				}
			}
		}
	}
	if p.Spec.Egress.Proxy != "" {
		u, err := url.Parse(p.Spec.Egress.Proxy)
		if err != nil {
			return nil, fmt.Errorf("policy %s: spec.egress.proxy: %w", p.Metadata.Name, err)
		}
		pt := &proxyTarget{host: policy.NormalizeHost(u.Hostname())}
		pt.port, _ = strconv.Atoi(u.Port())
		if pt.port == 0 {
			pt.port = map[string]int{"https": 443}[u.Scheme]
			if pt.port == 0 {
				pt.port = 80
			}
		}
		if ip, err := netip.ParseAddr(pt.host); err == nil {
			pt.ip = ip.Unmap()
		} else {
			pt.ns = serviceNamespace(pt.host)
		}
		// A declared location is where the proxy runs, whatever its name says.
		if loc := p.Spec.Egress.ProxyLocation; loc != nil {
			pt.cidrs = loc.Prefixes()
			if loc.Namespace != "" {
				pt.ns = loc.Namespace
			}
		}
		m.proxy = pt
	}
	m.resolver = p.Spec.Egress.DNS.ResolverLocation.Prefixes()
	m.dnsAny = p.Spec.Egress.DNS.ArbitraryNames == "allow"
	m.clusterDomain = policy.NormalizeHost(p.Spec.Egress.DNS.ClusterDomain)
	if m.clusterDomain == "" {
		m.clusterDomain = "cluster.local"
	}
	return m, nil
}

// serviceNamespace reads the namespace out of a Kubernetes service name:
// "svc.ns", "svc.ns.svc" or "svc.ns.svc.<cluster domain>".
func serviceNamespace(host string) string {
	labels := strings.Split(host, ".")
	switch {
	case len(labels) == 2:
		return labels[1]
	case len(labels) >= 3 && labels[2] == "svc":
		return labels[1]
	}
	return ""
}

// portSpec is one port entry of a live rule. port 0 means every port.
type portSpec struct {
	proto string // TCP, UDP, SCTP, ANY
	port  int
	end   int    // range end, 0 for a single port
	named string // a named port cannot be judged from the policy
}

func (p portSpec) String() string {
	switch {
	case p.named != "":
		return p.named + "/" + p.proto
	case p.port == 0:
		return "all ports/" + p.proto
	case p.end > p.port:
		return fmt.Sprintf("%d-%d/%s", p.port, p.end, p.proto)
	}
	return strconv.Itoa(p.port) + "/" + p.proto
}

func portsText(ps []portSpec) string {
	if len(ps) == 0 {
		return "all ports"
	}
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.String()
	}
	return strings.Join(parts, ", ")
}

// onlyPort reports whether the rule's ports are all exactly port over TCP
// (or ANY, which Cilium also uses for TCP). No ports means every port.
func onlyPort(ps []portSpec, port int) bool {
	if len(ps) == 0 {
		return false
	}
	for _, p := range ps {
		if p.named != "" || p.port != port || (p.end != 0 && p.end != p.port) || (p.proto != "TCP" && p.proto != "ANY") {
			return false
		}
	}
	return true
}

// dnsOnly reports whether the rule's ports are all port 53.
func dnsOnly(ps []portSpec) bool {
	if len(ps) == 0 {
		return false
	}
	for _, p := range ps {
		if p.named != "" || p.port != 53 || (p.end != 0 && p.end != 53) {
			return false
		}
	}
	return true
}

// explainPrefix says whether an address block with these ports is a
// declared allowance (or the proxy). It returns the allowance's reason, or
// which rule to report: NetpolPort/CiliumCIDR-style callers map kinds.
func (m *egressModel) explainPrefix(pfx netip.Prefix, ports []portSpec) (reason string, addrKnown bool) {
	for _, r := range m.resolver {
		if r == pfx {
			if dnsOnly(ports) {
				return "the declared resolver", true
			}
			addrKnown = true
		}
	}
	if m.proxy != nil {
		for _, c := range m.proxy.cidrs {
			if c == pfx {
				if onlyPort(ports, m.proxy.port) {
					return "the declared proxy", true
				}
				addrKnown = true
			}
		}
	}
	if pfx.Bits() != pfx.Addr().BitLen() {
		return "", addrKnown
	}
	a := pfx.Addr().Unmap()
	for _, ip := range m.ips {
		if ip.addr == a {
			if onlyPort(ports, ip.port) {
				return ip.reason, true
			}
			addrKnown = true
		}
	}
	if m.proxy != nil && m.proxy.ip == a {
		if onlyPort(ports, m.proxy.port) {
			return "the declared proxy", true
		}
		addrKnown = true
	}
	return "", addrKnown
}

// declaredPorts describes the ports declared for an address, for Expected.
func (m *egressModel) declaredPorts(pfx netip.Prefix) string {
	a := pfx.Addr().Unmap()
	var parts []string
	for _, r := range m.resolver {
		if r == pfx {
			parts = append(parts, "53/UDP, 53/TCP (the declared resolver)")
		}
	}
	if m.proxy != nil {
		for _, c := range m.proxy.cidrs {
			if c == pfx {
				parts = append(parts, fmt.Sprintf("%d/TCP (the declared proxy)", m.proxy.port))
			}
		}
	}
	for _, ip := range m.ips {
		if ip.addr == a {
			parts = append(parts, fmt.Sprintf("%d/TCP (%s)", ip.port, ip.reason))
		}
	}
	if m.proxy != nil && m.proxy.ip == a {
		parts = append(parts, fmt.Sprintf("%d/TCP (the declared proxy)", m.proxy.port))
	}
	return strings.Join(parts, ", ")
}

// explainHost says whether a name or pattern on these ports is covered by a
// declared allowance; it returns the covering allowance's reason.
func (m *egressModel) explainHost(live policy.HostRule, ports []portSpec) (string, bool) {
	for _, h := range m.hosts {
		if !h.rule.Covers(policy.HostRule{Host: live.Host, Port: h.rule.Port}) {
			continue
		}
		if onlyPort(ports, h.rule.Port) {
			return h.reason, true
		}
	}
	if m.proxy != nil && m.proxy.host == live.Host && onlyPort(ports, m.proxy.port) {
		return "the declared proxy", true
	}
	if m.explainPeerHost(live, ports) {
		return "a declared in-cluster peer", true
	}
	return "", false
}

// ruleFinding is a finding about one egress rule, computed once per policy
// object and stamped onto every pod the policy selects.
type ruleFinding struct {
	check, subject, expected, actual, fix, evidence string
}

func (r ruleFinding) on(target, ns string) report.Finding {
	return report.Finding{
		Check: r.check, Target: target, Namespace: ns, Subject: r.subject, Status: report.Fail,
		Expected: r.expected, Actual: r.actual, Fix: r.fix, Evidence: r.evidence,
	}
}

// parsePrefix accepts a CIDR or a bare address (Cilium's toCIDR allows both).
func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		// net.ParseCIDR is laxer about host bits, as the API server is.
		_, n, err2 := net.ParseCIDR(s)
		if err2 != nil {
			return netip.Prefix{}, err
		}
		ones, _ := n.Mask.Size()
		a, _ := netip.AddrFromSlice(n.IP)
		return netip.PrefixFrom(a.Unmap(), ones), nil
	}
	return p.Masked(), nil
}
