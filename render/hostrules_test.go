package render_test

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
)

// The property of item 1: whatever render makes of a host rule — the
// CiliumNetworkPolicy's toFQDNs and DNS selectors, the proxy's allow-list —
// allows no name the rule itself does not match, and no other port. It is
// checked against Cilium's and the proxy's own reading of what render
// wrote (the oracles below), not against render's code, so a change in the
// shape of render's output keeps being judged.

// ciliumSelectorMatches reads a toFQDNs or DNS selector the way Cilium's
// matchpattern package does: names are lower-cased FQDNs; matchName is
// equality; a matchPattern of "*" is every name; otherwise a leading "**."
// is one or more whole labels and each "*" is zero or more of [-a-z0-9_].
func ciliumSelectorMatches(sel map[string]any, name string) bool {
	fqdn := strings.ToLower(strings.TrimSuffix(name, ".")) + "."
	if n, ok := sel["matchName"].(string); ok && n != "" {
		return strings.ToLower(strings.TrimSuffix(n, "."))+"." == fqdn
	}
	pat, _ := sel["matchPattern"].(string)
	pat = strings.ToLower(strings.TrimSpace(pat))
	if pat == "*" {
		return true
	}
	if pat == "" {
		return false
	}
	pat = strings.TrimSuffix(pat, ".") + "."
	var re strings.Builder
	re.WriteString("^")
	if rest, ok := strings.CutPrefix(pat, "**."); ok {
		re.WriteString(`([-a-z0-9_]+([.][-a-z0-9_]+)*)[.]`)
		pat = rest
	}
	for _, c := range pat {
		switch c {
		case '*':
			re.WriteString(`[-a-z0-9_]*`)
		case '.':
			re.WriteString(`[.]`)
		default:
			re.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	re.WriteString("$")
	return regexp.MustCompile(re.String()).MatchString(fqdn)
}

// renderedNames is what a Cilium-enforced sandbox may reach by name under
// the rendered CiliumNetworkPolicy: each toFQDNs selector with the ports
// of its rule, and each DNS selector (which names may resolve).
type renderedName struct {
	where string
	sel   map[string]any
	ports []int // nil for DNS selectors
}

func renderedNames(t testing.TB, cnp map[string]any) []renderedName {
	t.Helper()
	spec, _ := cnp["spec"].(map[string]any)
	egress, _ := spec["egress"].([]any)
	var out []renderedName
	for i, r := range egress {
		rule := r.(map[string]any)
		var ports []int
		toPorts, _ := rule["toPorts"].([]any)
		for j, tp := range toPorts {
			tpm := tp.(map[string]any)
			ps, _ := tpm["ports"].([]any)
			for _, p := range ps {
				n, err := strconv.Atoi(p.(map[string]any)["port"].(string))
				if err != nil {
					t.Fatalf("egress[%d]: port %v", i, p)
				}
				ports = append(ports, n)
			}
			if rules, ok := tpm["rules"].(map[string]any); ok {
				dns, _ := rules["dns"].([]any)
				for k, d := range dns {
					out = append(out, renderedName{where: fmt.Sprintf("egress[%d].toPorts[%d].rules.dns[%d]", i, j, k), sel: d.(map[string]any)})
				}
			}
		}
		fqdns, _ := rule["toFQDNs"].([]any)
		for k, f := range fqdns {
			out = append(out, renderedName{where: fmt.Sprintf("egress[%d].toFQDNs[%d]", i, k), sel: f.(map[string]any), ports: ports})
		}
	}
	return out
}

// policyAllowing is a policy whose only allowance is host, without a proxy
// (so every name render writes comes from the allowance).
func policyAllowing(host string) (*policy.Policy, error) {
	doc := fmt.Sprintf("apiVersion: sandprobe.dev/v1alpha1\nkind: SandboxPolicy\nmetadata: {name: t}\nspec:\n  selector: {matchLabels: {sandbox: \"true\"}}\n  egress:\n    allow:\n      - {host: %s, reason: r}\n", strconv.Quote(host))
	return policy.Load([]byte(doc))
}

// writtenMatches is what a host rule says, read literally and independently
// of the policy package: "*" is every name; "*.D" every name under D (one
// trailing dot of D is the root; with no D left it is nothing); anything
// else the name itself, or the address.
func writtenMatches(written, name string) bool {
	n, ok := policy.CanonicalName(name)
	if !ok {
		return false
	}
	w := strings.ToLower(strings.TrimSpace(written))
	// "name:port" is the name on that port (the port is judged apart);
	// an IPv6 literal's colons are not a port.
	if i := strings.LastIndexByte(w, ':'); i >= 0 && strings.Count(w, ":") == 1 {
		w = w[:i]
	}
	switch {
	case w == "*":
		return true
	case strings.HasPrefix(w, "*."):
		d := strings.TrimSuffix(w[2:], ".")
		return d != "" && strings.HasSuffix(n, "."+d) && len(n) > len(d)+1
	}
	return strings.TrimSuffix(w, ".") == n
}

// candidateNames are the names worth asking about for a rule: the fuzzed
// one, the rule's own name or apex, and names next to it.
func candidateNames(r policy.HostRule, extra string) []string {
	apex := strings.TrimPrefix(r.Host, "*.")
	if apex == "*" {
		apex = "example.com"
	}
	names := []string{extra, apex, "x." + apex, "x.y." + apex, "x" + apex, apex + ".evil.test", "evil.test", extra + "." + apex, strings.ToUpper("x." + apex), apex + "."}
	var out []string
	for _, n := range names {
		if _, ok := policy.CanonicalName(n); ok {
			out = append(out, n)
		}
	}
	return out
}

// checkRenderedNarrow is the property for one rule and one extra name.
func checkRenderedNarrow(t *testing.T, host, extra string) {
	p, err := policyAllowing(host)
	if err != nil {
		return // not a rule the policy accepts
	}
	a := p.Spec.Egress.Allow[0]
	rule, err := policy.ParseHostRule(a.Host)
	if err != nil {
		t.Fatalf("the loaded policy holds a host that does not parse: %q: %v", a.Host, err)
	}
	rule.Port = a.Port
	names := candidateNames(rule, extra)
	// What the policy makes of the rule is what it says.
	for _, n := range names {
		if _, err := netip.ParseAddr(host); err == nil {
			break
		}
		if rule.Matches(n, a.Port) != writtenMatches(host, n) {
			t.Fatalf("%q loads as %s, which answers %v for %q; as written it answers %v", host, rule, rule.Matches(n, a.Port), n, !rule.Matches(n, a.Port))
		}
	}
	for _, rn := range renderedNames(t, render.CiliumNetworkPolicy(p, "ns")) {
		for _, port := range rn.ports {
			if port != a.Port {
				t.Fatalf("%q: %s allows port %d, the rule says %d", host, rn.where, port, a.Port)
			}
		}
		for _, n := range names {
			if ciliumSelectorMatches(rn.sel, n) && !writtenMatches(host, n) {
				t.Fatalf("%q: Cilium's %s %v allows %q, which the rule as written does not", host, rn.where, rn.sel, n)
			}
		}
	}
	for _, e := range render.ProxyAllowList(p) {
		re, err := regexp.CompilePOSIX(e.Regexp)
		if err != nil {
			t.Fatalf("%q: allow-list entry %q is not a POSIX ERE: %v", host, e.Regexp, err)
		}
		if e.Port != a.Port {
			t.Fatalf("%q: allow-list entry for port %d, the rule says %d", host, e.Port, a.Port)
		}
		for _, n := range names {
			if re.MatchString(strings.ToLower(n)) && !writtenMatches(host, n) {
				t.Fatalf("%q: the proxy allow-list entry %q allows %q, which the rule as written does not", host, e.Regexp, n)
			}
		}
	}
	// And what the rule means is what the proxy allows: a name the rule
	// matches is not refused (an allowance that cannot work is no proof).
	for _, e := range render.ProxyAllowList(p) {
		re := regexp.MustCompilePOSIX(e.Regexp)
		for _, n := range names {
			if rule.Matches(n, a.Port) && !re.MatchString(strings.ToLower(strings.TrimSuffix(n, "."))) {
				t.Fatalf("%q: the rule matches %q but the proxy allow-list entry %q refuses it", host, n, e.Regexp)
			}
		}
	}
}

// TestRenderedHostRulesNeverBroader: the property over rules that are easy
// to get wrong, and names next to them.
func TestRenderedHostRulesNeverBroader(t *testing.T) {
	rules := []string{"api.example.com", "API.Example.COM.", "*.github.com", "*.GitHub.com.", "*.a", "*", "a-b.c_d.example", "*.x.y.z.example.com",
		"10.0.0.1", "2001:db8::1", "*.", "*.:443", "[*]", "*..", ".", "*.com", "k.example.com"}
	names := []string{"api.example.com", "a.api.example.com", "github.com", "api.github.com", "a.b.github.com", "evilgithub.com", "github.com.evil.io",
		"a", "b.a", "x", "\u212a.example.com", "d ", "10.0.0.1"}
	for _, r := range rules {
		for _, n := range names {
			checkRenderedNarrow(t, r, n)
		}
	}
	// "*." must not even load: it is not "*".
	if _, err := policyAllowing("*."); err == nil {
		t.Error(`host "*." loads`)
	}
}

// FuzzRenderedHostRules: the same property over random rules and names
// (make fuzz runs it with FUZZTIME, CI with a short budget).
func FuzzRenderedHostRules(f *testing.F) {
	for _, s := range []string{"api.example.com", "*.github.com", "*", "*.a", "10.0.0.1", "A.b.", "*."} {
		f.Add(s, "api.github.com")
	}
	f.Fuzz(func(t *testing.T, host, name string) {
		checkRenderedNarrow(t, host, name)
	})
}

// TestProxyAllowListMatchesTheRule: the allow-list entries, read as POSIX
// EREs, are exactly the rule over names around it.
func TestProxyAllowListMatchesTheRule(t *testing.T) {
	cases := []struct {
		host    string
		allowed []string
		refused []string
	}{
		{"api.example.com", []string{"api.example.com"}, []string{"xapi.example.com", "a.api.example.com", "api.example.com.evil", "api-example.com"}},
		{"*.github.com", []string{"api.github.com", "a.b.github.com", "x_y.github.com"}, []string{"github.com", "evilgithub.com", "github.com.evil.io", "-a.github.com", ".github.com", "a..github.com"}},
		{"10.0.0.1", []string{"10.0.0.1"}, []string{"10.0.0.10", "10a0a0a1", "110.0.0.1"}},
		{"2001:db8::1", []string{"2001:db8::1", "[2001:db8::1]"}, []string{"2001:db8::10"}},
	}
	for _, c := range cases {
		p, err := policyAllowing(c.host)
		if err != nil {
			t.Fatal(err)
		}
		list := render.ProxyAllowList(p)
		if len(list) != 1 {
			t.Fatalf("%s: %d entries", c.host, len(list))
		}
		re := regexp.MustCompilePOSIX(list[0].Regexp)
		for _, n := range c.allowed {
			if !re.MatchString(n) {
				t.Errorf("%s: %q refuses %s", c.host, list[0].Regexp, n)
			}
		}
		for _, n := range c.refused {
			if re.MatchString(n) {
				t.Errorf("%s: %q allows %s", c.host, list[0].Regexp, n)
			}
		}
	}
}
