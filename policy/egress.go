package policy

import (
	"fmt"
	"net/netip"
	"strings"
)

// DefaultProxyDenyStatus are the statuses forward proxies refuse a
// destination with: 403 (Squid, tinyproxy, Envoy) and 407 (authentication
// required).
var DefaultProxyDenyStatus = []int{403, 407}

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
	for i, st := range e.ProxyDenyStatus {
		if st >= 500 {
			c.add(fmt.Sprintf("spec.egress.proxyDenyStatus[%d]", i), fmt.Sprintf("%d is an upstream failure, not a deny: a proxy that answers it let the destination through", st))
		}
	}
	for i, a := range e.Allow {
		for j, addr := range a.Addresses {
			if _, err := netip.ParseAddr(addr); err != nil {
				c.add(fmt.Sprintf("spec.egress.allow[%d].addresses[%d]", i, j), fmt.Sprintf("must be an IP address, got %q", addr))
			}
		}
	}
}

// Warnings are what a valid policy still cannot prove; `validate` prints them.
func (p *Policy) Warnings() []string {
	var out []string
	e := p.Spec.Egress
	if len(e.Allow) > 0 && len(e.ConcreteAllowances()) == 0 {
		out = append(out, "spec.egress.allow: no concrete allowed target to probe (every allowance is a wildcard without probe:), so nothing shows the sandbox's network works and every must-fail verdict will be inconclusive: add probe: <a real name under the pattern> to one")
	}
	return out
}
