package lab

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestRulesetAsTheBashLabWroteIt: the template renders, byte for byte, the
// ruleset the bash lab generated (testdata, taken from a running healthy
// lab; the engine-mode one was compared the same way once).
func TestRulesetAsTheBashLabWroteIt(t *testing.T) {
	want, err := os.ReadFile("testdata/sp_cni.healthy.nft")
	if err != nil {
		t.Fatal(err)
	}
	if got := Ruleset(nftState{}); got != string(want) {
		t.Errorf("ruleset differs from testdata/sp_cni.healthy.nft:\n%s", got)
	}
}

// TestRulesetBreakStates: each broken state adds its accept rules at the
// top of the sandbox's chain; a flushed rule is gone, its twin stays.
func TestRulesetBreakStates(t *testing.T) {
	healthy := chain(Ruleset(nftState{}))
	if strings.Contains(healthy, "break:") || strings.Contains(healthy, "cluster-egress-engine") {
		t.Errorf("healthy chain has a break or engine rule:\n%s", healthy)
	}
	for _, c := range []struct{ state, first string }{
		{"egress-open", `counter accept comment "break:egress-open"`},
		{"ipv6-open", `meta nfproto ipv6 counter accept comment "break:ipv6-open"`},
		{"raw-ips-open", `ip daddr @raw4 counter accept comment "break:raw-ips-open"`},
		{"metadata-open", `ip daddr @metadata4 counter accept comment "break:metadata-open"`},
		{"proxy-bypass", `ip daddr @allowed4 counter accept comment "break:proxy-bypass"`},
	} {
		got := chain(Ruleset(nftState{broken: []string{c.state}}))
		if first := strings.TrimSpace(strings.Split(got, "\n")[1]); first != c.first {
			t.Errorf("%s: first rule %q, want %q", c.state, first, c.first)
		}
	}
	flushed := chain(Ruleset(nftState{broken: []string{"flush-rule:deny-exfil"}}))
	if strings.Contains(flushed, `comment "deny-exfil"`) || !strings.Contains(flushed, `comment "deny-exfil6"`) {
		t.Errorf("flush-rule deny-exfil:\n%s", flushed)
	}
	if names := RuleNames(); names[0] != "allow-dns" || names[len(names)-1] != "default-deny6" || !slices.Contains(names, "deny-raw-admin-prohibited6") {
		t.Errorf("RuleNames = %v", names)
	}
}

func chain(rs string) string {
	_, c, _ := strings.Cut(rs, "chain "+NftChain+" {")
	return c
}
