package render

import (
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"strings"

	"github.com/sandprobe/sandprobe/policy"
)

// ProxyAllow is one line of a forward proxy's host allow-list: an anchored
// POSIX extended regular expression over the lower-cased host of a CONNECT
// or GET, as tinyproxy (FilterType ere) and squid (dstdom_regex -i) read it.
type ProxyAllow struct {
	Regexp string
	Port   int    // the allowance's port: a host filter cannot hold it (see WriteProxyAllowList)
	Rule   string // the allowance, canonical ("*.github.com:443")
	Reason string
}

// dnsLabelERE is one DNS label exactly as policy host rules accept it:
// letters, digits, '_' and inner '-', 1–63 characters. "[^.]+" or ".*"
// would let a wildcard allow names the rule does not.
const dnsLabelERE = `[a-z0-9_]([-a-z0-9_]{0,61}[a-z0-9_])?`

// ProxyAllowList renders the policy's allowances as a proxy's host
// allow-list, one entry per allowance, in policy order. Each entry matches
// exactly the names (or the address) its host rule matches, never more.
func ProxyAllowList(p *policy.Policy) []ProxyAllow {
	var out []ProxyAllow
	for _, a := range p.Spec.Egress.Allow {
		r, err := policy.ParseHostRule(a.Host)
		if err != nil {
			continue // a validated policy has none
		}
		r.Port = a.Port
		out = append(out, ProxyAllow{Regexp: hostERE(r.Host), Port: a.Port, Rule: r.String(), Reason: a.Reason})
	}
	return out
}

// hostERE turns a canonical host rule into its anchored ERE.
func hostERE(host string) string {
	switch {
	case host == "*":
		return "^.+$"
	case strings.HasPrefix(host, "*."):
		// One or more whole labels before the domain: any depth, never the apex.
		return "^(" + dnsLabelERE + `\.)+` + quoteERE(host[2:]) + "$"
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
		// A proxy sees an IPv6 CONNECT host in brackets.
		return `^\[?` + quoteERE(a.String()) + `\]?$`
	}
	return "^" + quoteERE(host) + "$"
}

// quoteERE escapes a literal for POSIX ERE (regexp.QuoteMeta's escapes are
// all valid ERE escapes for the characters a host name or address holds).
func quoteERE(s string) string { return regexp.QuoteMeta(s) }

// WriteProxyAllowList writes the allow-list as a filter file: each line an
// anchored ERE, preceded by a comment naming the allowance, its port and
// its reason. A host filter cannot hold ports: the proxy's own port list
// (tinyproxy ConnectPort, squid SSL_ports) must be limited to the ports
// listed in the header.
func WriteProxyAllowList(w io.Writer, p *policy.Policy) error {
	list := ProxyAllowList(p)
	ports := map[int]bool{}
	var portList []string
	for _, e := range list {
		if !ports[e.Port] {
			ports[e.Port] = true
			portList = append(portList, fmt.Sprint(e.Port))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# sandprobe: the forward proxy's host allow-list for policy %s\n", p.Metadata.Name)
	fmt.Fprintf(&b, "# anchored POSIX EREs over the lower-cased host (tinyproxy: FilterType ere, FilterDefaultDeny Yes;\n# squid: acl allowed dstdom_regex -i \"FILE\"); allow only ports %s at the proxy\n", strings.Join(portList, ", "))
	for _, e := range list {
		fmt.Fprintf(&b, "# %s — %s\n%s\n", e.Rule, oneLine(e.Reason), e.Regexp)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
