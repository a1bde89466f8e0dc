package policy

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// DefaultProxyDenyStatus are the statuses forward proxies refuse a
// destination with: 403 (Squid, tinyproxy, Envoy) and 407 (authentication
// required).
var DefaultProxyDenyStatus = []int{403, 407}

// DefaultMetadataAddresses are where cloud metadata services usually answer.
var DefaultMetadataAddresses = []string{DefaultMetadataAddress, "fd00:ec2::254", "169.254.170.2", "100.100.100.200"}

// DefaultMetadataPorts are the ports they answer on.
var DefaultMetadataPorts = []int{DefaultMetadataPort, 443}

// defaultProof fills in what the probe needs to prove its verdicts.
func (e *Egress) defaultProof() {
	e.Metadata.defaults()
	if e.Proxy != "" && len(e.ProxyDenyStatus) == 0 {
		e.ProxyDenyStatus = append([]int(nil), DefaultProxyDenyStatus...)
	}
	e.DNS.CanaryZone = NormalizeHost(e.DNS.CanaryZone)
}

// defaults fills in the metadata set: the one-address form, or the usual places.
func (m *MetadataTarget) defaults() {
	if len(m.Addresses) == 0 {
		if m.Address != "" {
			m.Addresses = []string{m.Address}
		} else {
			m.Addresses = append([]string(nil), DefaultMetadataAddresses...)
		}
	}
	if len(m.Ports) == 0 {
		if m.Port != 0 {
			m.Ports = []int{m.Port}
		} else {
			m.Ports = append([]int(nil), DefaultMetadataPorts...)
		}
	}
}

func (m *MetadataTarget) validate(c *collector) {
	if m.Address != "" && !slices.Equal(m.Addresses, []string{m.Address}) {
		c.add("spec.egress.metadata.address", "write either address (one) or addresses (a list), not both")
	}
	if m.Port != 0 && !slices.Equal(m.Ports, []int{m.Port}) {
		c.add("spec.egress.metadata.port", "write either port (one) or ports (a list), not both")
	}
	field := "spec.egress.metadata.addresses"
	if m.Address != "" {
		field = "spec.egress.metadata.address"
	}
	for i, a := range m.Addresses {
		pth := fmt.Sprintf("%s[%d]", field, i)
		if m.Address != "" {
			pth = field
		}
		if _, err := netip.ParseAddr(a); err != nil {
			c.add(pth, fmt.Sprintf("must be an IP address, got %q", a))
		}
	}
}

// ProxyDenyStatuses is the declared deny statuses, or the defaults.
func (e Egress) ProxyDenyStatuses() []int {
	if len(e.ProxyDenyStatus) > 0 {
		return e.ProxyDenyStatus
	}
	return DefaultProxyDenyStatus
}

// ConcreteAllowances are the allowances the probe can dial: an exact host,
// or a wildcard with a probe name. With none, nothing shows that the
// sandbox's network works, so a failed must-fail attempt proves nothing.
func (e Egress) ConcreteAllowances() []Allowance {
	var out []Allowance
	for _, a := range e.Allow {
		if a.Probe != "" || !hasWildcard(a.Host) {
			out = append(out, a)
		}
	}
	return out
}

func hasWildcard(host string) bool { return strings.Contains(host, "*") }

// validateProof checks the fields that let the probe prove its verdicts.
func (e *Egress) validateProof(c *collector) {
	for i, h := range e.ProxyDenyHeaders {
		if h == "" || strings.ContainsAny(h, " :\t\r\n") {
			c.add(fmt.Sprintf("spec.egress.proxyDenyHeaders[%d]", i), fmt.Sprintf("%q is not an HTTP header name", h))
		}
	}
	for i, st := range e.ProxyDenyStatus {
		if st >= 500 {
			c.add(fmt.Sprintf("spec.egress.proxyDenyStatus[%d]", i), fmt.Sprintf("%d is an upstream failure, not a deny: a proxy that answers it let the destination through", st))
		}
	}
	ips := func(field string, addrs []string) {
		for j, addr := range addrs {
			if _, err := netip.ParseAddr(addr); err != nil {
				c.add(fmt.Sprintf("%s[%d]", field, j), fmt.Sprintf("must be an IP address, got %q", addr))
			}
		}
	}
	for i, a := range e.Allow {
		ips(fmt.Sprintf("spec.egress.allow[%d].addresses", i), a.Addresses)
	}
	for i, t := range e.MustFail.Hosts {
		ips(fmt.Sprintf("spec.egress.mustFail.hosts[%d].addresses", i), t.Addresses)
	}
	for i, t := range e.MustFail.IPs {
		if len(t.Addresses) > 0 {
			c.add(fmt.Sprintf("spec.egress.mustFail.ips[%d].addresses", i), "an IP target is its own address: addresses belong to mustFail.hosts")
		}
	}
	for j, r := range e.DNS.OutsideResolvers {
		if _, err := netip.ParseAddr(r); err != nil {
			if _, err := netip.ParseAddrPort(r); err != nil {
				c.add(fmt.Sprintf("spec.egress.dns.outsideResolvers[%d]", j), fmt.Sprintf("must be an IP address, or IP:port, got %q", r))
			}
		}
	}
	if z := e.DNS.CanaryZone; z != "" {
		if err := checkHostname(z); err != nil {
			c.add("spec.egress.dns.canaryZone", err.Error())
		}
		for i, a := range e.Allow {
			if r, err := ParseHostRule(a.Host); err == nil && (r.Host == "*" || r.Matches("sandprobe-canary."+z, a.Port)) {
				c.add("spec.egress.dns.canaryZone", fmt.Sprintf("names under %s are allowed by spec.egress.allow[%d] (%s): a canary must be a zone the sandbox may not resolve", z, i, a.Host))
			}
		}
	}
}

// OutsideResolverAddresses are the DNS servers ("ip:port") the sandbox
// must not reach directly: the declared ones, or each must-fail IP (a CIDR
// by its first host address) on port 53, once.
func (e Egress) OutsideResolverAddresses() []string {
	var out []string
	add := func(s string) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, r := range e.DNS.OutsideResolvers {
		if ap, err := netip.ParseAddrPort(r); err == nil {
			add(ap.String())
		} else if a, err := netip.ParseAddr(r); err == nil {
			add(netip.AddrPortFrom(a, 53).String())
		}
	}
	if len(e.DNS.OutsideResolvers) > 0 {
		return out
	}
	for _, t := range e.MustFail.IPs {
		if d, err := ParseDestination(t.Target); err == nil {
			if a, err := netip.ParseAddr(d.DialHost()); err == nil {
				add(netip.AddrPortFrom(a, 53).String())
			}
		}
	}
	return out
}

// Warnings are what a valid policy still cannot prove; `validate` prints them.
func (p *Policy) Warnings() []string {
	var out []string
	e := p.Spec.Egress
	if len(e.Allow) > 0 && len(e.ConcreteAllowances()) == 0 {
		out = append(out, "spec.egress.allow: no concrete allowed target to probe (every allowance is a wildcard without probe:), so nothing shows the sandbox's network works and every must-fail verdict will be inconclusive: add probe: <a real name under the pattern> to one")
	}
	if p.Spec.Docker.Network == "none" && e.Proxy != "" {
		out = append(out, "spec.docker.network: none, but spec.egress.proxy is declared: a container with no network cannot reach its proxy, so under Docker every allowed host fails: put the sandbox on the proxy's --internal network (spec.docker.network), or leave the proxy out if the sandbox needs no network")
	}
	if e.DNS.ArbitraryNames == "deny" && e.DNS.CanaryZone == "" {
		names := slices.ContainsFunc(e.MustFail.Hosts, func(t Target) bool {
			d, err := ParseDestination(t.Target)
			return err == nil && d.Host != ""
		})
		if names {
			out = append(out, "spec.egress.dns: no canaryZone, so an NXDOMAIN counts as \"the resolver does not forward\" only for a must-fail host name the control vantage resolves (a forwarder relays the NXDOMAIN of a name that does not exist): egress.dns-exfil is inconclusive otherwise, unless the resolver REFUSES such names; a canaryZone settles it")
		} else {
			out = append(out, "spec.egress.dns: no canaryZone and no must-fail host name, so an NXDOMAIN for a random name cannot be told from a forwarding resolver relaying the authority's: egress.dns-exfil will be inconclusive unless the resolver REFUSES such names; a canaryZone settles it")
		}
	}
	return out
}

// Dial is where a must-fail target is dialled: its host (a name, an
// address, a prefix's first address) and its port (the target's own, else
// DefaultMustFailPort). ok is false for a target validation refuses.
func (t Target) Dial() (host string, port int, ok bool) {
	d, err := ParseDestination(t.Target)
	if err != nil {
		return "", 0, false
	}
	port = cmp.Or(t.Port, d.Port, DefaultMustFailPort)
	return d.DialHost(), port, true
}

// Subject names a must-fail target's direct verdict ("host:port"), as
// the probe names it.
func (t Target) Subject() (string, bool) {
	host, port, ok := t.Dial()
	if !ok {
		return "", false
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), true
}
