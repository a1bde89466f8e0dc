package policy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestHostRuleMatches(t *testing.T) {
	cases := []struct {
		rule string
		host string
		port int
		want bool
	}{
		{"api.example.com", "api.example.com", 443, true},
		{"api.example.com", "API.Example.com.", 443, true},
		{"api.example.com", "x.api.example.com", 443, false},
		{"api.example.com:443", "api.example.com", 443, true},
		{"api.example.com:443", "api.example.com", 80, false},
		{"*.github.com", "api.github.com", 443, true},
		{"*.github.com", "a.b.github.com", 443, true},
		{"*.github.com", "github.com", 443, false},
		{"*.github.com", "evilgithub.com", 443, false},
		{"*.github.com", "github.com.evil.io", 443, false},
		{"*.GitHub.com.", "api.github.com", 443, true},
		{"*", "anything.at.all", 1, true},
		{"*:443", "anything", 80, false},
		{"10.0.0.1", "10.0.0.1", 80, true},
		{"10.0.0.1", "10.0.0.2", 80, false},
		{"[2001:db8::1]:443", "2001:db8::1", 443, true},
		{"2001:db8::1", "2001:DB8:0::1", 443, true},
		{"api.example.com", "", 443, false},
		// Not a DNS name: never a match, whatever normalising would make of it.
		{"d", "d ", 487, false},
		{"d", " d", 487, false},
		{"*", "a b", 443, false},
		{"*", "", 443, false},
		{"k.example.com", "\u212a.example.com", 443, false}, // the Kelvin sign lower-cases to "k"
		{"api.example.com", "api.example.com..", 443, false},
		{"api.example.com", "[api.example.com]", 443, false},
		{"*.example.com", "-x.example.com", 443, false},
		{"*.example.com", "x..example.com", 443, false},
		{"10.0.0.1", "10.0.0.1%eth0", 80, false},
		{"*.example.com", "1.example.com", 443, true},
		{"*", "10.0.0.1", 443, true}, // "*" is every destination, addresses included
	}
	for _, c := range cases {
		r, err := ParseHostRule(c.rule)
		if err != nil {
			t.Fatalf("%s: %v", c.rule, err)
		}
		if got := r.Matches(c.host, c.port); got != c.want {
			t.Errorf("%s matches %s:%d = %v, want %v", c.rule, c.host, c.port, got, c.want)
		}
	}
}

func TestHostRuleRejects(t *testing.T) {
	for _, bad := range []string{"", "api.*.com", "*example.com", "a..b", "-a.com", "a_b!.com", "x.com:0", "x.com:99999", "x.com:http", "**.com", strings.Repeat("a", 64) + ".com",
		// Each of these would normalise to a rule broader than written.
		"*.", "*.:443", "*..", ".", "..", "[*]", "[*]:443", "[api.example.com]", "[10.0.0.1]", "fe80::1%eth0", "\u212a.com", "a b.com",
		// An all-digit top-level label is an address in disguise.
		"*.0.0.0", "1.2.3", "10.0.0.1.", "*.10",
		// White space is never trimmed into a valid name (a fuzz find).
		"ab.cd\u00a0", " api.example.com", "api.example.com\t", "api.example.com :443", "\u2003*.example.com", "10.0.0.1\u00a0"} {
		if _, err := ParseHostRule(bad); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}

func TestHostRuleCovers(t *testing.T) {
	cases := []struct {
		outer, inner string
		want         bool
	}{
		{"*.github.com:443", "api.github.com:443", true},
		{"*.github.com:443", "*.api.github.com:443", true},
		{"*.github.com:443", "*.com:443", false},
		{"api.github.com:443", "*.github.com:443", false},
		{"*", "*", true},
		{"api.github.com", "api.github.com:22", true},
		{"api.github.com:443", "api.github.com:22", false},
	}
	for _, c := range cases {
		o, _ := ParseHostRule(c.outer)
		i, _ := ParseHostRule(c.inner)
		if got := o.Covers(i); got != c.want {
			t.Errorf("%s covers %s = %v, want %v", c.outer, c.inner, got, c.want)
		}
	}
}

func TestParseDestination(t *testing.T) {
	cases := []struct{ in, dial, str string }{
		{"example.com", "example.com", "example.com"},
		{"Example.COM.:80", "example.com", "example.com:80"},
		{"1.1.1.1", "1.1.1.1", "1.1.1.1"},
		{"10.0.0.0/8", "10.0.0.1", "10.0.0.0/8"},
		{"10.1.2.3/32", "10.1.2.3", "10.1.2.3/32"},
		{"[2001:db8::1]:443", "2001:db8::1", "[2001:db8::1]:443"},
		{"2001:db8::1", "2001:db8::1", "2001:db8::1"},
		{"::ffff:1.2.3.4", "1.2.3.4", "1.2.3.4"},
	}
	for _, c := range cases {
		d, err := ParseDestination(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if d.DialHost() != c.dial || d.String() != c.str {
			t.Errorf("%s: dial %s str %s, want %s %s", c.in, d.DialHost(), d.String(), c.dial, c.str)
		}
	}
	for _, bad := range []string{"*.example.com", "10.0.0.1/8", "1.2.3.4:0", "", "a b", "ab.cd\u00a0", " 10.0.0.0/8", "10.0.0.0/8\u00a0"} {
		if _, err := ParseDestination(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// FuzzHostRule: a rule never means more than it says, names that are not
// DNS names never match, and case and a trailing dot never change an answer.
func FuzzHostRule(f *testing.F) {
	for _, s := range []string{"api.example.com", "*.github.com:443", "*", "10.0.0.1", "[::1]:80", "A.B.", "*.a", "*.", "d"} {
		f.Add(s, "api.github.com", 443)
	}
	f.Add("d", "d ", 487) // found by this fuzzer: "d " matched "d"
	f.Fuzz(func(t *testing.T, rule, host string, port int) {
		r, err := ParseHostRule(rule)
		if err != nil {
			return
		}
		checkRuleAsWritten(t, rule, r)
		checkRuleMatches(t, r, host, port)
	})
}

// checkRuleAsWritten: the canonical form parses to the same rule, and is
// never broader than written (the written host, lower-cased, less at most
// one trailing dot; "*" only from "*").
func checkRuleAsWritten(t *testing.T, rule string, r HostRule) {
	t.Helper()
	r2, err := ParseHostRule(r.String())
	if err != nil || r2 != r {
		t.Fatalf("%q -> %q -> %+v (%v)", rule, r.String(), r2, err)
	}
	written, _, _ := splitHostPort(rule)
	written = strings.TrimSuffix(strings.TrimPrefix(written, "["), "]")
	lw := lowerASCII(written)
	if r.Host != lw && r.Host+"." != lw {
		if a, err := netip.ParseAddr(written); err != nil || a.String() != netip.MustParseAddr(r.Host).String() {
			t.Fatalf("%q parsed to host %q, not what it says", rule, r.Host)
		}
	}
	if r.Host == "*" && lw != "*" {
		t.Fatalf("%q parsed to \"*\": one stray character allows every host", rule)
	}
}

// checkRuleMatches: what r matches is a DNS name or an address, the same
// whatever its case and one trailing dot; a wildcard never matches its
// apex; r covers itself, and matches what a rule it covers matches.
func checkRuleMatches(t *testing.T, r HostRule, host string, port int) {
	t.Helper()
	m := r.Matches(host, port)
	if _, ok := CanonicalName(host); !ok && m {
		if _, err := netip.ParseAddr(host); err != nil {
			t.Fatalf("%s matches %q, which is not a DNS name", r, host)
		}
	}
	if !strings.HasSuffix(host, ".") {
		for _, v := range []string{strings.ToUpper(host), host + ".", strings.ToUpper(host) + ".", strings.ToLower(host)} {
			if _, err := netip.ParseAddr(host); err == nil {
				break // addresses have no case or trailing dot
			}
			if !isASCII(host) {
				break // ToUpper/ToLower change non-ASCII names into other names
			}
			if r.Matches(v, port) != m {
				t.Fatalf("%s: case/trailing dot changed the answer for %q (%v) vs %q (%v)", r, host, m, v, !m)
			}
		}
	}
	if strings.HasPrefix(r.Host, "*.") && r.Matches(r.Host[2:], r.Port) {
		t.Fatalf("%s matches its apex", r)
	}
	if !r.Covers(r) {
		t.Fatalf("%s does not cover itself", r)
	}
	if o, err := ParseHostRule(host); err == nil && r.Covers(o) {
		for _, n := range []string{o.Host, strings.TrimPrefix(o.Host, "*."), "x." + strings.TrimPrefix(o.Host, "*.")} {
			if o.Matches(n, o.Port) && !r.Matches(n, o.Port) {
				t.Fatalf("%s covers %s, which matches %q, but %s does not", r, o, n, r)
			}
		}
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
