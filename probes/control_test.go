package probes

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
	"golang.org/x/net/dns/dnsmessage"
)

// TestControlPlan: the control dials exactly the probe's direct deny
// attempts (same subjects), never an allowance, an attempt through the
// proxy (the proxy's refusal is its own proof) or a random name; each
// must-fail host name resolved (does it exist at all?);
// the direct queries to outside resolvers, which a resolver that answers
// nobody would pass as vacuously as a closed port; and a ClientHello to the
// front for each fronting attempt, sent directly.
func TestControlPlan(t *testing.T) {
	p, err := policy.Load([]byte(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: plan}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  egress:
    proxy: http://127.0.0.1:3128
    allow: [{host: api.example, port: 443, reason: r}]
    mustFail: {hosts: [blocked.example], ips: [10.0.0.1]}
    metadata: {address: 127.0.0.2, port: 80}
    dns: {arbitraryNames: deny, domains: [example]}
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range ControlPlan(p.Spec.Egress) {
		got = append(got, a.Check+" "+a.Subject)
	}
	want := []string{"egress.must-fail blocked.example:443", "egress.must-fail 10.0.0.1:443", "egress.metadata 127.0.0.2:80", "egress.proxy-bypass api.example:443 direct",
		"egress.sni-mismatch blocked.example via api.example:443",
		"egress.udp blocked.example:443/udp", "egress.udp 10.0.0.1:443/udp", "egress.udp api.example:443/udp", "egress.dns-exfil name blocked.example",
		"egress.dns-bypass 10.0.0.1:53/udp", "egress.dns-bypass 10.0.0.1:53/tcp"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("control plan %q, want %q", got, want)
	}
}

// TestRunControl: from loopback, a listener answers the control and a
// closed port refuses it — what the runner then tells apart: a deny that
// would otherwise have been reached, and one that proves nothing.
func TestRunControl(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("SSH-2.0-sandprobe-test\r\n")) // it speaks: an answer, not an interceptor
			c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	live := ln.Addr().(*net.TCPAddr).Port
	// An outside resolver that answers (NXDOMAIN is an answer), and one
	// address where no DNS server runs: the one a policy names by mistake.
	resolver := newDNSServer(t, func(string) dnsAnswer { return dnsAnswer{rcode: dnsmessage.RCodeNameError} })
	deadResolver := fmt.Sprintf("127.0.0.1:%d", closedPort)
	p, err := policy.Load([]byte(fmt.Sprintf(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: control}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  egress:
    mustFail: {ips: ["127.0.0.1:%d", "127.0.0.1:%d"]}
    metadata: {address: 127.0.0.1, port: %d}
    dns: {arbitraryNames: deny, domains: [example], outsideResolvers: ["%s", "%s"]}
    timeout: 2s
`, live, closedPort, live, resolver.addr, deadResolver)))
	if err != nil {
		t.Fatal(err)
	}
	res := RunControl(context.Background(), &Env{Policy: p, Nonce: "n"})
	if res.Vantage != VantageControl || res.Nonce != "n" {
		t.Fatalf("vantage %q nonce %q", res.Vantage, res.Nonce)
	}
	got := map[string]string{}
	for _, f := range res.Findings {
		if f.Status != report.Pass || f.Attempt == nil || !f.Attempt.Attempted {
			t.Errorf("%s: %s, attempt %+v: every destination is dialled", f.Name(), f.Status, f.Attempt)
		}
		got[f.Name()] = f.Class
	}
	for name, class := range map[string]string{
		fmt.Sprintf("egress.must-fail 127.0.0.1:%d", live):       policy.VerdictAnswered,
		fmt.Sprintf("egress.must-fail 127.0.0.1:%d", closedPort): policy.VerdictRefused,
		fmt.Sprintf("egress.metadata 127.0.0.1:%d", live):        policy.VerdictAnswered,
		"egress.dns-bypass " + resolver.addr + "/udp":            policy.VerdictAnswered,
		"egress.dns-bypass " + resolver.addr + "/tcp":            policy.VerdictAnswered,
		"egress.dns-bypass " + deadResolver + "/tcp":             policy.VerdictRefused,
	} {
		if got[name] != class {
			t.Errorf("%s: %q, want %q (all: %v)", name, got[name], class, got)
		}
	}
}
