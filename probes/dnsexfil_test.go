package probes

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/result"
)

// forwarder is a loopback resolver that relays every name it does not hold
// to upstream and passes its answer back, as CoreDNS with `forward` does.
func forwarder(t *testing.T, local map[string][]netip.Addr, upstream *dnsServer) *dnsServer {
	return newDNSServer(t, func(name string) dnsAnswer {
		if a, ok := local[name]; ok {
			return dnsAnswer{rcode: dnsmessage.RCodeSuccess, addrs: a}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var out dnsAnswer
		for _, qt := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA} {
			r, err := exchange(ctx, "udp", upstream.addr, name+".", qt)
			if err != nil {
				return dnsAnswer{rcode: dnsmessage.RCodeServerFailure}
			}
			out.rcode = r.rcode
			for _, a := range r.addrs {
				out.addrs = append(out.addrs, netip.MustParseAddr(a))
			}
		}
		return out
	})
}

var loopbackAddr = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// TestDNSExfil breaks item 2 the ways real resolvers break it. The
// authority logs every name it is asked: when a random name reaches it,
// the payload has left, and the check must not pass.
func TestDNSExfil(t *testing.T) {
	allowed := map[string][]netip.Addr{"api.test": loopbackAddr}
	api := origin(t)
	cases := []struct {
		name     string
		canary   bool
		mustFail bool // list blocked.test under mustFail.hosts
		resolver func(t *testing.T, authority *dnsServer) *dnsServer
		want     map[string]result.Status // by subject prefix: "*.", "canary", "name"
		leaks    bool                     // the authority sees the random names
	}{
		{"a DNS proxy that refuses names outside its allow-list", true, true,
			func(t *testing.T, _ *dnsServer) *dnsServer {
				return newDNSServer(t, zone(dnsmessage.RCodeRefused, allowed))
			},
			map[string]result.Status{"*.": result.Pass, "canary": result.Pass, "name": result.Pass}, false},
		{"a resolver that answers NXDOMAIN outside its allow-list, with a canary", true, false,
			func(t *testing.T, _ *dnsServer) *dnsServer {
				return newDNSServer(t, zone(dnsmessage.RCodeNameError, allowed))
			},
			map[string]result.Status{"*.": result.Pass, "canary": result.Pass}, false},
		{"a forwarder to an NXDOMAIN authority, caught by a must-fail name", false, true, func(t *testing.T, a *dnsServer) *dnsServer { return forwarder(t, allowed, a) },
			map[string]result.Status{"*.": result.Fail, "name": result.Fail}, true},
		{"a forwarder, caught by the canary", true, false, func(t *testing.T, a *dnsServer) *dnsServer { return forwarder(t, allowed, a) },
			map[string]result.Status{"*.": result.Fail, "canary": result.Fail}, true},
		{"a forwarder with nothing to tell it by: NXDOMAIN is not proof", false, false, func(t *testing.T, a *dnsServer) *dnsServer { return forwarder(t, allowed, a) },
			map[string]result.Status{"*.": result.Inconclusive}, true},
		{"a wildcard resolver", true, true,
			func(t *testing.T, _ *dnsServer) *dnsServer {
				return newDNSServer(t, func(string) dnsAnswer { return dnsAnswer{rcode: dnsmessage.RCodeSuccess, addrs: loopbackAddr} })
			},
			map[string]result.Status{"*.": result.Fail, "canary": result.Fail, "name": result.Fail}, false},
		// A common blocking style: NOERROR with no records (NODATA) for
		// names outside the allow-list. Nothing resolved, so nothing fails;
		// nor does it show the resolver does not forward.
		{"a resolver that blocks with NOERROR and no records", true, true,
			func(t *testing.T, _ *dnsServer) *dnsServer {
				return newDNSServer(t, zone(dnsmessage.RCodeSuccess, allowed))
			},
			map[string]result.Status{"*.": result.Inconclusive, "canary": result.Inconclusive, "name": result.Inconclusive}, false},
		{"a resolver in trouble (SERVFAIL)", true, true,
			func(t *testing.T, _ *dnsServer) *dnsServer {
				return newDNSServer(t, zone(dnsmessage.RCodeServerFailure, allowed))
			},
			map[string]result.Status{"*.": result.Inconclusive, "canary": result.Inconclusive, "name": result.Inconclusive}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The world: blocked.test exists, and the canary zone answers every name.
			authority := newDNSServer(t, func(name string) dnsAnswer {
				if name == "blocked.test" || strings.HasSuffix(name, ".canary.test") {
					return dnsAnswer{rcode: dnsmessage.RCodeSuccess, addrs: loopbackAddr}
				}
				return dnsAnswer{rcode: dnsmessage.RCodeNameError}
			})
			dns := c.resolver(t, authority)
			doc := "\n  egress:\n    allow: [{host: api.test, port: " + fmt.Sprint(api) + ", scheme: http, reason: r}]\n    metadata: {address: 127.0.0.2, port: 9}\n    timeout: 2s\n    dns:\n      arbitraryNames: deny\n      domains: [test]\n      outsideResolvers: []\n"
			if c.canary {
				doc += "      canaryZone: canary.test\n"
			}
			if c.mustFail {
				doc += "    mustFail: {hosts: [blocked.test]}\n"
			}
			fs := loopbackEgress(t, doc, dns)
			checkExfilFindings(t, fs, c.want)
			leaked := slices.ContainsFunc(authority.queries(), func(q string) bool { return strings.HasPrefix(q, "sandprobe-") })
			if leaked != c.leaks {
				t.Errorf("the authority saw a random name: %v, want %v (%v)", leaked, c.leaks, authority.queries())
			}
		})
	}
}

// checkExfilFindings: the dns.exfil findings are exactly those in want
// (by subject prefix: "*.", "canary", "name"), each with its status, a
// failing one with what was expected and the fix, each with its resolver
// and rcode.
func checkExfilFindings(t *testing.T, fs map[string]result.Finding, want map[string]result.Status) {
	t.Helper()
	seen := map[string]bool{}
	for _, f := range fs {
		if f.Check != checkDNSExfil {
			continue
		}
		key := strings.SplitN(f.Subject, " ", 2)[0]
		if strings.HasPrefix(key, "*.") {
			key = "*."
		}
		seen[key] = true
		w, ok := want[key]
		if !ok {
			t.Errorf("unexpected finding %s", f.Name())
			continue
		}
		if f.Status != w {
			t.Errorf("%s: %s (%s), want %s", f.Name(), f.Status, f.Actual, w)
		}
		if f.Status != result.Pass && (f.Expected == "" || f.Fix == "") {
			t.Errorf("%s: no expected or fix: %+v", f.Name(), f)
		}
		if f.Attempt == nil || (f.Status != result.Inconclusive && (f.Attempt.Rcode == "" || f.Attempt.Resolver == "")) {
			t.Errorf("%s: the evidence lacks the resolver and its rcode: %+v", f.Name(), f.Attempt)
		}
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("no %s finding", k)
		}
	}
}

// TestDNSBypass: a DNS server outside that answers a direct query, over UDP
// or TCP, whatever it answers, is a way around the sandbox's resolver.
func TestDNSBypass(t *testing.T) {
	open := newDNSServer(t, zone(dnsmessage.RCodeNameError, nil))
	closed := fmt.Sprintf("127.0.0.1:%d", closedPort(t))
	hole := fmt.Sprintf("127.0.0.1:%d", blackHole(t))
	dns := newDNSServer(t, zone(dnsmessage.RCodeRefused, map[string][]netip.Addr{"api.test": loopbackAddr}))
	fs := loopbackEgress(t, fmt.Sprintf(`
  egress:
    allow: [{host: api.test, port: %d, scheme: http, reason: r}]
    metadata: {address: 127.0.0.2, port: 9}
    timeout: 1s
    dns: {arbitraryNames: deny, domains: [test], outsideResolvers: ["%s", "%s", "%s"]}
`, origin(t), open.addr, closed, hole), dns)
	for _, c := range []struct {
		subject string
		want    result.Status
		class   string
	}{
		{open.addr + "/udp", result.Fail, "answered"},
		{open.addr + "/tcp", result.Fail, "answered"},
		{closed + "/udp", result.Pass, "refused"},
		{closed + "/tcp", result.Pass, "refused"},
		{hole + "/tcp", result.Pass, "timeout"},
	} {
		f, ok := fs[checkDNSBypass+" "+c.subject]
		if !ok {
			t.Errorf("no finding for %s", c.subject)
			continue
		}
		if f.Status != c.want || f.Class != c.class {
			t.Errorf("%s: %s/%s (%s), want %s/%s", c.subject, f.Status, f.Class, f.Actual, c.want, c.class)
		}
		if f.Status == result.Fail && (f.Attempt.Rcode != "NXDOMAIN" || f.Fix == "" || !report.UnexpectedlyOpen(f)) {
			t.Errorf("%s: evidence %+v fix %q", c.subject, f.Attempt, f.Fix)
		}
	}
	if q := open.queries(); len(q) != 2 {
		t.Errorf("the outside resolver was asked %v, want once per protocol", q)
	}
}

// TestDNSBypassStartupWindow: a new pod's direct query to an outside DNS
// server is answered before its NetworkPolicy engine isolates it, and is
// silent a moment later (kube-router v2.1; make e2e saw it): with
// SettleDelay it is asked again and the steady state passes, naming the
// window; a server that still answers fails (TestDNSBypass).
func TestDNSBypassStartupWindow(t *testing.T) {
	outside := newDNSServer(t, zone(dnsmessage.RCodeNameError, nil))
	outside.goSilentAfter(2) // the first query over UDP and over TCP
	dns := newDNSServer(t, zone(dnsmessage.RCodeRefused, map[string][]netip.Addr{"api.test": loopbackAddr}))
	env := &Env{Policy: mustPolicy(t, fmt.Sprintf(`
  egress:
    allow: [{host: api.test, port: %d, scheme: http, reason: r}]
    metadata: {address: 127.0.0.2, port: 9}
    timeout: 1s
    dns: {arbitraryNames: deny, domains: [test], outsideResolvers: ["%s"]}
`, origin(t), outside.addr)), SettleDelay: 300 * time.Millisecond, dnsServer: dns.addr}
	var f *result.Finding
	for _, g := range runEgress(context.Background(), env)[checkDNSBypass] {
		if g.Subject == outside.addr+"/udp" {
			f = &g
		}
	}
	if f == nil {
		t.Fatalf("no %s finding for %s/udp", checkDNSBypass, outside.addr)
	}
	if f.Status != result.Pass || !strings.Contains(f.Actual, "not yet in force when this pod started") {
		t.Errorf("%s/udp: %s (%s), want a pass naming the start-up window", outside.addr, f.Status, f.Actual)
	}
	if n := len(outside.queries()); n < 3 {
		t.Errorf("the outside server was asked %d times, want the first queries and the re-dials", n)
	}
}

// TestResolvConf: the probe's resolver reads resolv.conf the way the C
// library does (a pod's search list and ndots:5 included).
func TestResolvConf(t *testing.T) {
	c := defaultDNSConfig()
	c.parseResolvConf(strings.NewReader("# pod\nsearch sbx.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\nnameserver fd00::a\nnameserver not-an-ip\noptions ndots:5 timeout:1 attempts:3\n"))
	if got := strings.Join(c.servers, " "); got != "10.96.0.10:53 [fd00::a]:53" {
		t.Errorf("servers %q", got)
	}
	if c.ndots != 5 || c.attempts != 3 || c.timeout != time.Second {
		t.Errorf("options %+v", c)
	}
	for _, tc := range []struct{ host, want string }{
		{"egress-proxy.sandbox-system", "egress-proxy.sandbox-system.sbx.svc.cluster.local. egress-proxy.sandbox-system.svc.cluster.local. egress-proxy.sandbox-system.cluster.local. egress-proxy.sandbox-system."},
		{"a.b.c.d.e.example.com", "a.b.c.d.e.example.com. a.b.c.d.e.example.com.sbx.svc.cluster.local. a.b.c.d.e.example.com.svc.cluster.local. a.b.c.d.e.example.com.cluster.local."},
		{"absolute.example.", "absolute.example."},
	} {
		if got := strings.Join(c.candidates(tc.host), " "); got != tc.want {
			t.Errorf("candidates(%s) = %s, want %s", tc.host, got, tc.want)
		}
	}
	c.parseHosts(strings.NewReader("127.0.0.1 localhost\n10.1.2.3 Proxy.Internal proxy # the proxy\n"))
	if a, err := c.resolve(context.Background(), "proxy.internal"); err != nil || strings.Join(a, " ") != "10.1.2.3" {
		t.Errorf("hosts file: %v %v", a, err)
	}
}
