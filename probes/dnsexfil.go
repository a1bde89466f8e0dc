package probes

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// The DNS checks. A resolver can carry data out even when every connection
// fails: the query itself is the payload. NXDOMAIN proves nothing alone —
// a forwarding resolver (CoreDNS with forward) sends the random name to the
// authority and relays its NXDOMAIN — so egress.dns-exfil also asks:
//   - a random name under the canary zone, whose authority answers every
//     name: if it resolves, queries leave the sandbox;
//   - the must-fail host names, which exist in the world: if one resolves,
//     the resolver forwards names outside the allow-list;
// and an NXDOMAIN for a random name passes only when one of those shows the
// resolver does not forward. egress.dns-bypass asks DNS servers outside
// directly: any answer means DNS goes around the cluster resolver.

const checkDNSBypass = "egress.dns-bypass"

// What a dns-exfil attempt stands for.
const (
	dnsRandom = "random" // a random name under a declared domain
	dnsCanary = "canary" // a random name under the canary zone
	dnsName   = "name"   // a must-fail host name
)

// planDNS adds the DNS attempts when the policy denies arbitrary names.
func planDNS(e policy.Egress) []Attempt {
	if e.DNS.ArbitraryNames != "deny" {
		return nil
	}
	var plan []Attempt
	for _, d := range exfilDomains(e) {
		plan = append(plan, Attempt{Check: checkDNSExfil, Subject: "*." + d, Host: randomName(d), Op: OpResolve, role: dnsRandom})
	}
	if z := e.DNS.CanaryZone; z != "" {
		plan = append(plan, Attempt{Check: checkDNSExfil, Subject: "canary *." + z, Host: randomName(z), Op: OpResolve, role: dnsCanary})
	}
	var names []string
	for _, t := range e.MustFail.Hosts {
		if d, err := policy.ParseDestination(t.Target); err == nil && d.Host != "" && !slices.Contains(names, d.Host) {
			names = append(names, d.Host)
		}
	}
	for _, n := range names {
		plan = append(plan, Attempt{Check: checkDNSExfil, Subject: "name " + n, Host: n + ".", Op: OpResolve, role: dnsName})
	}
	// Direct queries ask for a name nobody should answer for: one under the
	// canary zone when there is one, so the authority's log shows it too.
	zone := e.DNS.CanaryZone
	if zone == "" {
		zone = "sandprobe.invalid"
	}
	for _, server := range e.OutsideResolverAddresses() {
		for _, network := range []string{"udp", "tcp"} {
			plan = append(plan, Attempt{Check: checkDNSBypass, Subject: server + "/" + network, Host: randomName(zone),
				Op: OpQuery, Server: server, Network: network})
		}
	}
	return plan
}

func randomName(zone string) string { return "sandprobe-" + randomLabel() + "." + zone + "." }

// exfilDomains are the declared DNS domains, or the parents of the allowed names.
func exfilDomains(e policy.Egress) []string {
	if len(e.DNS.Domains) > 0 {
		return e.DNS.Domains
	}
	var out []string
	for _, a := range e.Allow {
		if a.InCluster() {
			// The cluster's own zone: its resolver answers it itself and
			// forwards nothing, so a random name there shows nothing.
			continue
		}
		h := strings.TrimPrefix(a.Host, "*.")
		if h == "*" || net.ParseIP(h) != nil {
			continue
		}
		if !strings.HasPrefix(a.Host, "*.") {
			if _, parent, ok := strings.Cut(h, "."); ok && strings.Contains(parent, ".") {
				h = parent
			}
		}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// tryResolve asks the sandbox's resolver for a name.
func (c *NetClient) tryResolve(ctx context.Context, a Attempt) Result {
	name := strings.TrimSuffix(a.Host, ".")
	addrs, err := c.lookup(ctx, a.Host)
	if err != nil {
		return failed(classify(err))
	}
	r := Result{Class: policy.VerdictAnswered, Detail: name + " resolved to " + strings.Join(addrs, ", "), Answered: addrs}
	r.Evidence.Rcode = "NOERROR"
	if len(c.dns.servers) > 0 {
		r.Evidence.Resolver = c.dns.servers[0]
	}
	return r
}

// tryQuery asks one DNS server directly: any answer at all, whatever its
// rcode, shows the path to it is open.
func (c *NetClient) tryQuery(ctx context.Context, a Attempt) Result {
	rep, err := exchange(ctx, a.Network, a.Server, a.Host, dnsmessage.TypeA)
	if err != nil {
		return failed(classify(err))
	}
	rc := rcodeName(rep.rcode)
	r := Result{Class: policy.VerdictAnswered, Answered: []string{a.Server},
		Detail: fmt.Sprintf("%s answered %s over %s for %s", a.Server, rc, a.Network, strings.TrimSuffix(a.Host, "."))}
	r.Evidence.Resolver, r.Evidence.Rcode = a.Server, rc
	return r
}

// dnsFacts is what the run's DNS attempts show about the resolver as a
// whole: whether it forwards names outside the allow-list, or whether
// something shows it does not.
type dnsFacts struct {
	forwards    string // what proves it forwards ("blocked.example resolved")
	doesNot     string // what proves it does not
	forwardable bool   // a canary or a real outside name was asked at all
}

// resolved is a name that got at least one address. NOERROR with no
// records (NODATA) is not: it is a common way of blocking a name.
func resolved(r Result) bool {
	return r.Class == policy.VerdictAnswered && len(r.Answered) > 0
}

func refusedByResolver(r Result) bool {
	return r.Class == policy.VerdictNXDomain || r.Class == policy.VerdictDNSRefused
}

func dnsEvidence(plan []Attempt, results []Result) dnsFacts {
	var f dnsFacts
	var refused []string
	for i, a := range plan {
		if a.role != dnsCanary && a.role != dnsName {
			continue
		}
		r := results[i]
		if !r.Evidence.Attempted || r.Interrupted {
			continue
		}
		f.forwardable = true
		name := strings.TrimSuffix(a.Host, ".")
		switch {
		case resolved(r) && f.forwards == "":
			f.forwards = name + " resolved"
		case refusedByResolver(r):
			refused = append(refused, fmt.Sprintf("%s got %s", name, r.Evidence.Rcode))
		}
	}
	if f.forwards == "" && len(refused) > 0 {
		f.doesNot = strings.Join(refused, ", ")
	}
	return f
}

// judgeDNS turns a DNS attempt into its finding.
func judgeDNS(a Attempt, r Result, facts dnsFacts) result.Finding {
	f, made := baseFinding(a, r)
	if !made {
		return f
	}
	name := strings.TrimSuffix(a.Host, ".")
	rc := r.Evidence.Rcode
	inconclusive := func(why string) result.Finding {
		f.Status = result.Inconclusive
		f.Actual = fmt.Sprintf("%s (%s): %s", r.Class, r.Detail, why)
		if f.Fix == "" {
			f.Fix = "make the sandbox's resolver answer (REFUSED or NXDOMAIN) for names outside the allow-list, so the probe can tell"
		}
		return f
	}
	const forwardFix = "make the sandbox's resolver answer only the allowed names and refuse the rest (a DNS proxy with an allow-list, e.g. Cilium's toFQDNs matchPattern), never forward them; or declare dns.arbitraryNames: allow"
	if a.Check == checkDNSBypass {
		f.Expected = "no DNS server outside answers a direct query"
		switch {
		case rc != "" || r.Class == policy.VerdictAnswered:
			f.Status, f.Actual = result.Fail, "answered: "+r.Detail+": DNS goes around the sandbox's resolver"
			f.Fix = fmt.Sprintf("deny UDP and TCP 53 to %s in the sandbox's egress policy: only the sandbox's own resolver may be asked", a.Server)
		case r.Class == policy.VerdictTimeout || r.Class == policy.VerdictRefused:
			f.Status, f.Actual = result.Pass, r.Class+" (stopped by the network)"
		default:
			return inconclusive("a failure that cannot be told apart from the probe's own")
		}
		return f
	}
	switch a.role {
	case dnsCanary:
		f.Expected = "a random name under the canary zone " + strings.TrimPrefix(a.Subject, "canary *.") + " does not resolve"
	case dnsName:
		f.Expected = name + ", outside the allow-list, does not resolve"
	default:
		f.Expected = "a random name under " + strings.TrimPrefix(a.Subject, "*.") + " does not resolve, and the resolver does not forward it"
	}
	switch {
	case resolved(r):
		f.Status = result.Fail
		switch a.role {
		case dnsCanary:
			f.Actual = "resolved: " + r.Detail + ": the query reached the canary zone's authority, so queries leave the sandbox"
		case dnsName:
			f.Actual = "resolved: " + r.Detail + ": the resolver answers names outside the allow-list (it forwards them, or holds them)"
		default:
			f.Actual = "resolved: " + r.Detail + ": the resolver answers arbitrary names (a wildcard, or it forwards)"
		}
		f.Fix = forwardFix
	case !refusedByResolver(r) && rc == "NOERROR":
		return inconclusive("NOERROR with no address: a resolver's way of blocking a name, or a name without an address; it did not resolve, and nothing shows the resolver does not forward")
	case !refusedByResolver(r):
		return inconclusive("the resolver gave no verdict on the name")
	case a.role != dnsRandom:
		f.Status, f.Actual = result.Pass, fmt.Sprintf("%s (%s from %s)", r.Class, rc, r.Evidence.Resolver)
	case r.Class == policy.VerdictDNSRefused:
		// A forwarder relays what the authority says; REFUSED for a name
		// under a real domain is the resolver's own allow-list speaking.
		f.Status, f.Actual = result.Pass, fmt.Sprintf("dns-refused (REFUSED from %s): the resolver refuses names outside its allow-list", r.Evidence.Resolver)
	case facts.forwards != "":
		f.Status = result.Fail
		f.Actual = fmt.Sprintf("NXDOMAIN relayed: the resolver forwards names outside the allow-list (%s), so this random name reached the authority", facts.forwards)
		f.Fix = forwardFix
	case facts.doesNot != "":
		f.Status, f.Actual = result.Pass, fmt.Sprintf("dns-nxdomain, and the resolver does not forward: %s", facts.doesNot)
	default:
		f.Fix = "declare spec.egress.dns.canaryZone (a zone you control whose authority answers every name), or list a real outside name under mustFail.hosts, so a forwarder shows itself"
		return inconclusive("NXDOMAIN is what a forwarding resolver relays from the authority, and nothing here shows this one does not forward")
	}
	return f
}
