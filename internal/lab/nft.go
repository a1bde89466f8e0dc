package lab

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"text/template"
)

//go:embed sp_cni.nft.tmpl
var nftTemplate string

var nftTmpl = template.Must(template.New("sp_cni").Funcs(template.FuncMap{
	"join": func(s []string) string { return strings.Join(s, ", ") },
	"quoted": func(s []string) string {
		q := make([]string, len(s))
		for i, x := range s {
			q[i] = `"` + x + `"`
		}
		return strings.Join(q, ", ")
	},
}).Parse(nftTemplate))

// Rule is one named rule of the sandbox's chain.
type Rule struct{ Name, Match, Verdict string }

// flavourVerdicts: how each blocking flavour a CNI produces is written, for
// IPv4 and IPv6. A TCP reset answers other protocols with port-unreachable.
var flavourVerdicts = map[string][2]string{
	"drop":                  {"drop", "drop"},
	"icmp-port-unreachable": {"reject with icmp type port-unreachable", "reject with icmpv6 type port-unreachable"},
	"icmp-host-unreachable": {"reject with icmp type host-unreachable", "reject with icmpv6 type addr-unreachable"},
	"icmp-admin-prohibited": {"reject with icmp type admin-prohibited", "reject with icmpv6 type admin-prohibited"},
	"icmp-net-unreachable":  {"reject with icmp type net-unreachable", "reject with icmpv6 type no-route"},
}

// Rules is the sandbox's chain when healthy, in order: the allowed paths
// (resolver, proxy), the denies with a rule of their own, then the default
// deny of every destination without one — so each rule is the only thing
// guarding its destination, and flushing it makes exactly that one answer.
func Rules() []Rule {
	rs := []Rule{
		{"allow-dns", fmt.Sprintf("ip daddr %s meta l4proto { tcp, udp } th dport %d", ResolverIP4, ResolverPort), "accept"},
		{"allow-dns6", fmt.Sprintf("ip6 daddr %s meta l4proto { tcp, udp } th dport %d", ResolverIP6, ResolverPort), "accept"},
		{"allow-proxy", fmt.Sprintf("ip daddr %s tcp dport %d", ProxyIP4, ProxyPort), "accept"},
		{"allow-proxy6", fmt.Sprintf("ip6 daddr %s tcp dport %d", ProxyIP6, ProxyPort), "accept"},
		{"deny-direct-allowed", "ip daddr @allowed4", "reject with icmp type admin-prohibited"},
		{"deny-direct-allowed6", "ip6 daddr @allowed6", "reject with icmpv6 type admin-prohibited"},
		{"deny-metadata", "ip daddr @metadata4", "drop"},
		{"deny-metadata6", "ip6 daddr @metadata6", "drop"},
	}
	for _, t := range slices.Concat(RawTargets, BlockedHosts) {
		if t.Rule == "default-deny" {
			continue
		}
		rs = append(rs, targetRules(t)...)
	}
	return append(rs, Rule{"default-deny", "ip daddr != @guarded4", "drop"}, Rule{"default-deny6", "ip6 daddr != @guarded6", "drop"})
}

func targetRules(t Target) []Rule {
	m4, m6 := "ip daddr "+t.IP4, "ip6 daddr "+t.IP6
	if t.Flavour == "tcp-reset" {
		return []Rule{
			{t.Rule, m4 + " meta l4proto tcp", "reject with tcp reset"},
			{t.Rule, m4, "reject with icmp type port-unreachable"},
			{t.Rule + "6", m6 + " meta l4proto tcp", "reject with tcp reset"},
			{t.Rule + "6", m6, "reject with icmpv6 type port-unreachable"},
		}
	}
	v, ok := flavourVerdicts[t.Flavour]
	if !ok {
		panic("lab: unknown flavour " + t.Flavour)
	}
	return []Rule{{t.Rule, m4, v[0]}, {t.Rule + "6", m6, v[1]}}
}

// RuleNames are the chain's rule names in order, each once.
func RuleNames() []string {
	var names []string
	for _, r := range Rules() {
		if !slices.Contains(names, r.Name) {
			names = append(names, r.Name)
		}
	}
	return names
}

// nftState is what the ruleset depends on besides the topology.
type nftState struct {
	broken     []string // broken states, "flush-rule:NAME" for a flushed rule
	attachMode string   // "", "sandbox" or "engine"
}

type nftData struct {
	Table, Chain, IfCluster, AttachMode                  string
	Allowed4, Allowed6, Raw4, Raw6, Metadata4, Metadata6 []string
	Guarded4, Guarded6, RouterIfs, SandboxIfs            []string
	Rules                                                []Rule
	broken                                               []string
}

// Broken says whether a broken state is on (the template asks).
func (d nftData) Broken(state string) bool { return slices.Contains(d.broken, state) }

// Ruleset renders the nft script for a state.
func Ruleset(st nftState) string {
	d := nftData{Table: NftTable, Chain: NftChain, IfCluster: IfRouterCluster, AttachMode: st.attachMode,
		broken: st.broken}
	for _, h := range AllowedHosts {
		d.Allowed4, d.Allowed6 = append(d.Allowed4, h.IP4), append(d.Allowed6, h.IP6)
	}
	for _, t := range RawTargets {
		d.Raw4, d.Raw6 = append(d.Raw4, t.IP4), append(d.Raw6, t.IP6)
	}
	for _, s := range MetadataStandins {
		d.Metadata4, d.Metadata6 = append(d.Metadata4, s.IP4), append(d.Metadata6, s.IP6)
	}
	d.Guarded4 = slices.Concat(d.Allowed4, d.Raw4, d.Metadata4)
	d.Guarded6 = slices.Concat(d.Allowed6, d.Raw6, d.Metadata6)
	for _, b := range BlockedHosts {
		if b.Rule != "default-deny" {
			d.Guarded4, d.Guarded6 = append(d.Guarded4, b.IP4), append(d.Guarded6, b.IP6)
		}
	}
	d.SandboxIfs, d.RouterIfs = []string{IfRouterSandbox}, []string{IfRouterSandbox}
	if st.attachMode == "sandbox" {
		d.SandboxIfs = append(d.SandboxIfs, IfRouterCluster)
	}
	if st.attachMode != "" {
		d.RouterIfs = append(d.RouterIfs, IfRouterCluster)
	}
	for _, r := range Rules() {
		if !slices.Contains(st.broken, "flush-rule:"+r.Name) {
			d.Rules = append(d.Rules, r)
		}
	}
	var b strings.Builder
	if err := nftTmpl.Execute(&b, d); err != nil {
		panic("lab: render sp_cni.nft.tmpl: " + err.Error())
	}
	return b.String()
}
