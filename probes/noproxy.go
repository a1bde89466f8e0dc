package probes

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// noProxy is what NO_PROXY (or no_proxy) tells HTTP clients in the
// sandbox: go direct, around the proxy, to these destinations. A must-fail
// host it covers is then stopped only by the network's deny, and no proxy
// record shows the attempt.
type noProxy struct {
	name    string // the variable that said it
	entries []string
}

// readNoProxy reads NO_PROXY, else no_proxy, from an environment
// (os.Environ's form), as curl and Go's clients do.
func readNoProxy(environ []string) noProxy {
	vals := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && (k == "NO_PROXY" || k == "no_proxy") {
			vals[k] = v
		}
	}
	for _, k := range []string{"NO_PROXY", "no_proxy"} {
		if v := strings.TrimSpace(vals[k]); v != "" {
			np := noProxy{name: k}
			for _, e := range strings.Split(v, ",") {
				if e = strings.ToLower(strings.TrimSpace(e)); e != "" {
					np.entries = append(np.entries, e)
				}
			}
			return np
		}
	}
	return noProxy{}
}

// covers returns the entry that sends host:port around the proxy ("" if
// none): "*", an address, a CIDR, or a domain with its subdomains
// ("example.com", ".example.com", "*.example.com"), each optionally with
// ":port".
func (np noProxy) covers(host string, port int) string {
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	addr, addrErr := netip.ParseAddr(host)
	for _, e := range np.entries {
		if e == "*" {
			return e
		}
		pattern := e
		if h, p, err := net.SplitHostPort(e); err == nil {
			if p != strconv.Itoa(port) {
				continue
			}
			pattern = h
		}
		pattern = strings.Trim(pattern, "[]")
		if pf, err := netip.ParsePrefix(pattern); err == nil {
			if addrErr == nil && pf.Contains(addr) {
				return e
			}
			continue
		}
		if a, err := netip.ParseAddr(pattern); err == nil {
			if addrErr == nil && a == addr {
				return e
			}
			continue
		}
		d := strings.TrimPrefix(strings.TrimPrefix(pattern, "*"), ".")
		if d != "" && (host == d || strings.HasSuffix(host, "."+d)) {
			return e
		}
	}
	return ""
}
