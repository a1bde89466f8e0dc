package policy

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// HostRule is a parsed allowance host: an exact name, "*.domain" (every
// subdomain at any depth, never the apex), "*" (anything), or an IP literal,
// optionally with a port. Names are lower-cased (ASCII only) and lose one
// trailing dot; a rule that would mean more than it says once normalised
// ("*." is not "*") does not parse.
type HostRule struct {
	Host string // normalised; "*" or "*.example.com" for patterns
	Port int    // 0 means any port
}

// ParseHostRule parses "api.example.com", "*.example.com:443", "*",
// "10.0.0.1:80" or "[2001:db8::1]:443".
func ParseHostRule(s string) (HostRule, error) {
	raw, port, err := splitHostPort(s)
	if err != nil {
		return HostRule{}, err
	}
	// net.SplitHostPort has already removed the brackets of "[h]:port".
	bracketed := strings.HasPrefix(s, "[")
	host := raw
	if strings.HasPrefix(host, "[") {
		var ok bool
		if host, ok = strings.CutSuffix(host[1:], "]"); !ok {
			return HostRule{}, fmt.Errorf("bad host %q: unbalanced '['", s)
		}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return HostRule{}, fmt.Errorf("bad host %q: an address with a zone (%%%s) is not a destination a policy can allow", s, a.Zone())
		}
		if bracketed && !a.Is6() {
			return HostRule{}, fmt.Errorf("bad host %q: brackets are for IPv6 addresses", s)
		}
		return HostRule{Host: host, Port: port}, nil
	}
	if bracketed {
		return HostRule{}, fmt.Errorf("bad host %q: brackets are for IPv6 addresses", s)
	}
	name := lowerASCII(host)
	if trimmed, ok := strings.CutSuffix(name, "."); ok {
		// One trailing dot is the root of a fully qualified name and
		// changes nothing, unless what is left is a bare wildcard or ends
		// in another dot: "*." would otherwise become "*", every host.
		if trimmed == "*" || trimmed == "" || strings.HasSuffix(trimmed, ".") {
			return HostRule{}, fmt.Errorf("bad host pattern %q: the wildcard has no domain after it (write \"*\" to allow every host, or \"*.example.com\")", s)
		}
		name = trimmed
	}
	switch {
	case name == "*":
	case strings.HasPrefix(name, "*."):
		if err := checkHostname(name[2:]); err != nil {
			return HostRule{}, fmt.Errorf("bad wildcard %q: %w", s, err)
		}
	case strings.Contains(name, "*"):
		return HostRule{}, fmt.Errorf("bad host pattern %q: a wildcard is only allowed as the whole first label (\"*.example.com\") or alone (\"*\")", s)
	default:
		if err := checkHostname(name); err != nil {
			return HostRule{}, fmt.Errorf("bad host %q: %w", s, err)
		}
	}
	return HostRule{Host: name, Port: port}, nil
}

// String renders the rule back in its canonical form.
func (r HostRule) String() string {
	if r.Port == 0 {
		return r.Host
	}
	if strings.Contains(r.Host, ":") {
		return "[" + r.Host + "]:" + strconv.Itoa(r.Port)
	}
	return r.Host + ":" + strconv.Itoa(r.Port)
}

// IsPattern reports whether the rule matches more than one name.
func (r HostRule) IsPattern() bool { return strings.HasPrefix(r.Host, "*") }

// Matches reports whether a destination is covered by the rule. port 0 in
// the query means "any port" and only matches a rule without a port. The
// destination must be an IP literal or a valid DNS name: anything else
// (a space, a bracket, a non-ASCII letter that lower-cases to ASCII) never
// matches. Case and one trailing dot never change the answer.
func (r HostRule) Matches(host string, port int) bool {
	if r.Port != 0 && r.Port != port {
		return false
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if b, err := netip.ParseAddr(r.Host); err == nil {
			return a.Zone() == "" && a.Unmap() == b.Unmap()
		}
		return r.Host == "*" && a.Zone() == ""
	}
	name, ok := CanonicalName(host)
	if !ok {
		return false
	}
	switch {
	case r.Host == "*":
		return true
	case strings.HasPrefix(r.Host, "*."):
		suffix := r.Host[1:] // ".example.com"
		return len(name) > len(suffix) && strings.HasSuffix(name, suffix)
	default:
		return name == r.Host
	}
}

// CanonicalName lower-cases a DNS name (ASCII only) and drops one trailing
// dot; ok is false when the result is not a valid name.
func CanonicalName(h string) (string, bool) {
	name := strings.TrimSuffix(lowerASCII(h), ".")
	if checkHostname(name) != nil {
		return "", false
	}
	return name, true
}

// Covers reports whether every destination matched by o is also matched by r
// (used to ask whether a live rule is explained by a declared one).
func (r HostRule) Covers(o HostRule) bool {
	if r.Port != 0 && r.Port != o.Port {
		return false
	}
	switch {
	case r.Host == "*":
		return true
	case o.Host == "*":
		return false
	case strings.HasPrefix(r.Host, "*."):
		if strings.HasPrefix(o.Host, "*.") {
			return o.Host == r.Host || strings.HasSuffix(o.Host, r.Host[1:])
		}
		return r.Matches(o.Host, o.Port)
	default:
		return !o.IsPattern() && r.Matches(o.Host, o.Port)
	}
}

// NormalizeHost lower-cases a name (ASCII only: a non-ASCII letter must
// not turn into an ASCII one), drops one trailing dot and IPv6 brackets.
// It does not trim space (a name with a space in it is not that name
// without it) and does not validate: callers check the result.
func NormalizeHost(h string) string {
	h = lowerASCII(h)
	h = strings.TrimSuffix(h, ".")
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return h
}

// lowerASCII lower-cases A-Z only. strings.ToLower would map the Kelvin
// sign (U+212A) to "k", letting a name that is not a DNS name match one.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// Destination is a parsed must-fail target: a name, an address or a prefix,
// with an optional port.
type Destination struct {
	Host   string       // a name, or "" for addresses
	Addr   netip.Addr   // valid for IP literals
	Prefix netip.Prefix // valid for CIDRs
	Port   int
}

// ParseDestination parses "example.com", "example.com:80", "1.1.1.1",
// "10.0.0.0/8", "2001:db8::1" or "[2001:db8::1]:443".
func ParseDestination(s string) (Destination, error) {
	if strings.Contains(s, "/") {
		if err := noSpace(s); err != nil {
			return Destination{}, err
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return Destination{}, fmt.Errorf("bad CIDR %q: %w", s, err)
		}
		if p.Masked() != p {
			return Destination{}, fmt.Errorf("bad CIDR %q: host bits are set (did you mean %s?)", s, p.Masked())
		}
		return Destination{Prefix: p}, nil
	}
	host, port, err := splitHostPort(s)
	if err != nil {
		return Destination{}, err
	}
	host = NormalizeHost(host)
	if a, err := netip.ParseAddr(host); err == nil {
		return Destination{Addr: a.Unmap(), Port: port}, nil
	}
	if strings.Contains(host, "*") {
		return Destination{}, fmt.Errorf("bad target %q: a must-fail target is one concrete name or address, not a pattern", s)
	}
	if err := checkHostname(host); err != nil {
		return Destination{}, fmt.Errorf("bad target %q: %w", s, err)
	}
	return Destination{Host: host, Port: port}, nil
}

// DialHost is the host part to dial: the name, the address, or the first
// host address of a prefix (a CIDR is probed through one representative).
func (d Destination) DialHost() string {
	switch {
	case d.Host != "":
		return d.Host
	case d.Addr.IsValid():
		return d.Addr.String()
	case d.Prefix.IsValid():
		a := d.Prefix.Addr()
		if d.Prefix.Bits() < d.Prefix.Addr().BitLen() {
			a = a.Next()
		}
		return a.String()
	}
	return ""
}

// IsIP reports whether the destination is an address or prefix rather than a name.
func (d Destination) IsIP() bool { return d.Host == "" }

func (d Destination) String() string {
	base := d.Host
	switch {
	case d.Prefix.IsValid():
		return d.Prefix.String()
	case d.Addr.IsValid():
		base = d.Addr.String()
	}
	if d.Port == 0 {
		return base
	}
	return net.JoinHostPort(base, strconv.Itoa(d.Port))
}

// splitHostPort accepts an optional ":port" (brackets required for IPv6 with a port).
func splitHostPort(s string) (string, int, error) {
	if s == "" {
		return "", 0, fmt.Errorf("empty host")
	}
	if err := noSpace(s); err != nil {
		return "", 0, err
	}
	if strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "[") {
		return s, 0, nil // bare IPv6 literal
	}
	if !strings.Contains(s, ":") {
		return s, 0, nil
	}
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("bad host:port %q: %w", s, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q: must be 1-65535", s)
	}
	return host, port, nil
}

// checkHostname validates a DNS name (RFC 1123 labels, 253 characters).
func checkHostname(h string) error {
	if h == "" {
		return fmt.Errorf("empty name")
	}
	if len(h) > 253 {
		return fmt.Errorf("name longer than 253 characters")
	}
	labels := strings.Split(h, ".")
	if last := labels[len(labels)-1]; last != "" && strings.Trim(last, "0123456789") == "" {
		// A top-level domain is never all digits (RFC 3696): such a "name"
		// is an address in disguise, and a pattern over it ("*.0.0.0")
		// would match addresses the way no name rule does.
		return fmt.Errorf("the last label %q is all digits: that is an address, not a host name", last)
	}
	for _, label := range labels {
		if label == "" {
			return fmt.Errorf("empty label")
		}
		if len(label) > 63 {
			return fmt.Errorf("label %q longer than 63 characters", label)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("label %q starts or ends with '-'", label)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("character %q not allowed in a host name", c)
			}
		}
	}
	return nil
}

// noSpace refuses a host or target with white space anywhere in it, ASCII
// or not. Trimming it would turn "api.example.com\u00a0" (which no resolver
// answers for) into a rule for api.example.com: broader than written.
func noSpace(s string) error {
	if i := strings.IndexFunc(s, unicode.IsSpace); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return fmt.Errorf("bad host %q: white space (%U) in a host name", s, r)
	}
	return nil
}
