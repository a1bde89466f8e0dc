package local_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/internal/lab"
	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// netnsNft loads an nftables table into a lab namespace for the rest of
// the test (which holds the lab's lock) and deletes it at the end.
func netnsNft(t *testing.T, ns, table, body string) {
	t.Helper()
	nft := func(rules string) error {
		cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nft in %s: %w\n%s", ns, err, out)
		}
		return nil
	}
	if err := nft("table inet " + table + " {\n" + body + "\n}\n"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nft("delete table inet " + table + "\n"); err != nil {
			t.Error(err)
		}
	})
}

// oneCloud makes the lab's metadata stand-ins look like one real cloud
// (GCE, EC2): only 169.254.169.254:80 answers anyone. Nothing listens on
// its :443 (a reset), and the places of the other clouds (ECS's
// 169.254.170.2, Alibaba's 100.100.100.200, EC2's IPv6) do not exist, so
// nothing comes back. The metadata service itself does it (table in
// sp-meta), so the control meets the same cloud as the sandbox.
func oneCloud(t *testing.T) {
	t.Helper()
	netnsNft(t, "sp-meta", "sp_test_one_cloud", ` chain in {
  type filter hook input priority 0; policy accept;
  ip daddr 10.99.169.254 tcp dport 443 reject with tcp reset
  ip daddr { 10.99.169.2, 10.99.169.200 } meta l4proto tcp drop
  ip6 daddr { fd99:0:0:169::254, fd99:0:0:169::2, fd99:0:0:169::200 } meta l4proto tcp drop
 }`)
}

// TestLabMetadataOneCloud: the lab's policy names the metadata places of
// every cloud (the default set's stand-ins) on 80 and 443; on one real
// cloud only one answers. Healthy, the run exits 0: the one place is a
// proven deny and the seven that answer nobody are not applicable ("no
// metadata service answers here"), because the control is alive on the
// same run. Broken the way the real world breaks it: the metadata rule
// missing fails the one place that answers; a control that is dead itself
// (a default-deny on its side) turns nothing into not-applicable, nor into
// a pass.
func TestLabMetadataOneCloud(t *testing.T) {
	script := testenv.Lab(t)
	doc := labPolicy(t)
	oneCloud(t)
	notApplicable := []string{"egress.metadata 10.99.169.254:443", "egress.metadata [fd99:0:0:169::254]:80", "egress.metadata [fd99:0:0:169::254]:443",
		"egress.metadata 10.99.169.2:80", "egress.metadata 10.99.169.2:443", "egress.metadata 10.99.169.200:80", "egress.metadata 10.99.169.200:443"}
	cases := []struct {
		name  string
		setup func(t *testing.T)
		exit  int
		want  map[string]report.Status // besides notApplicable
		na    report.Status            // what the seven places get
	}{
		{"healthy", func(*testing.T) {}, report.ExitOK,
			map[string]report.Status{"egress.metadata 10.99.169.254:80": report.Pass, "egress.metadata 10.99.169.200:443 via proxy": report.Pass}, report.Skip},
		{"metadata rule missing", func(t *testing.T) { labCmd(t, script, "break", "metadata-open") }, report.ExitNonConformant,
			map[string]report.Status{"egress.metadata 10.99.169.254:80": report.Fail}, report.Skip},
		{"control dead", blockControl, report.ExitNonConformant,
			map[string]report.Status{"egress.metadata 10.99.169.254:80": report.Inconclusive}, report.Inconclusive},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.setup(t)
			defer labCmd(t, script, "heal")
			run := labRun(t, doc)
			fs := egressOnly(run)
			want := map[string]report.Status{}
			for _, n := range notApplicable {
				want[n] = c.na
			}
			for n, s := range c.want {
				want[n] = s
			}
			for name, st := range want {
				f, ok := fs[name]
				if !ok || f.Status != st {
					t.Errorf("%s: %s, want %s (%s; %s)", name, f.Status, st, f.Actual, f.Evidence)
					continue
				}
				if st == report.Skip && (f.Deny != "" || !strings.Contains(f.Actual, "no metadata service answers here") || !strings.Contains(f.Actual, "reached")) {
					t.Errorf("%s: not applicable without its proof: deny %q, %s", name, f.Deny, f.Actual)
				}
			}
			if c.exit == report.ExitOK {
				for _, f := range run.Findings {
					if f.Status != report.Pass && f.Status != report.Skip {
						t.Errorf("false alarm: %s: %s — %s", f.Name(), f.Status, report.ExpectedActual(f))
					}
				}
			}
			if got := run.ExitCode(); got != c.exit {
				t.Errorf("exit %d, want %d", got, c.exit)
			}
		})
	}
}

// TestLabNXDomainForNamesThatDoNotExist: a must-fail name that does not
// exist upstream gets NXDOMAIN from a forwarding resolver too (the
// authority's, relayed). Broken the real-world way (`dns-open`: a plain
// forwarder, and a policy whose only must-fail name does not exist, no
// canary zone), neither that name nor the random name passes: the control
// does not resolve the name either. Healthy, the resolver's REFUSED is its
// own allow-list speaking, and both pass.
func TestLabNXDomainForNamesThatDoNotExist(t *testing.T) {
	script := testenv.Lab(t)
	doc := []byte(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: lab-nosuch}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  identity: {uid: 65532, gid: 65532}
  egress:
    proxy: http://proxy.lab.test:3128
    caFile: /run/sandprobe-lab/ca.pem
    allow: [{host: api.lab.test, port: 443, reason: lab}]
    mustFail: {hosts: [nosuch.lab.test], ips: [10.99.20.10]}
    metadata: {address: 10.99.169.254}
    dns: {arbitraryNames: deny, domains: [lab.test], outsideResolvers: [10.99.20.53]}
    timeout: 2s
`)
	for _, c := range []struct {
		state  string
		status report.Status
		class  string
	}{
		{"", report.Pass, policy.VerdictDNSRefused},
		{"dns-open", report.Inconclusive, policy.VerdictNXDomain},
	} {
		if c.state != "" {
			labCmd(t, script, "break", c.state)
		}
		fs := egressOnly(labRun(t, doc))
		labCmd(t, script, "heal")
		for _, name := range []string{"egress.dns-exfil *.lab.test", "egress.dns-exfil name nosuch.lab.test"} {
			f := fs[name]
			if f.Status != c.status || f.Class != c.class {
				t.Errorf("%s: %s: %s/%s (%s; %s), want %s/%s", c.state, name, f.Status, f.Class, f.Actual, f.Evidence, c.status, c.class)
			}
			if f.Status == report.Inconclusive && (f.Deny != report.DenyUnproven || !strings.Contains(f.Fix, "canaryZone")) {
				t.Errorf("%s: %s: deny %q, fix %q: want unproven, and the canary zone named", c.state, name, f.Deny, f.Fix)
			}
		}
	}
}

// TestLabDNSOnlyBlock: the sandbox's resolver refuses blocked.lab.test (a
// DNS proxy), so the probe dials nothing by name. Broken the real-world way
// (a policy that filters names only: the default-deny rule flushed, the
// address open from the sandbox), that must not pass — it did, as a proven
// deny, because the control reached the name. Now the runner has the
// sandbox dial, in a second round, the addresses the control resolved
// (runner.DNSOnlyFollowUp): a proven pass when healthy, a failure when
// open, the same as with the policy's own addresses. A name the control
// cannot resolve either (nothing to dial) stays inconclusive, never a pass.
func TestLabDNSOnlyBlock(t *testing.T) {
	script := testenv.Lab(t)
	doc := []byte(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: lab-dnsonly}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  identity: {uid: 65532, gid: 65532}
  egress:
    proxy: http://proxy.lab.test:3128
    caFile: /run/sandprobe-lab/ca.pem
    allow: [{host: api.lab.test, port: 443, reason: lab}]
    mustFail:
      hosts:
        - blocked.lab.test:443
        - {target: "blocked.lab.test:80", addresses: [10.99.20.20]}
        - nosuch.lab.test:443
    metadata: {address: 10.99.169.254}
    timeout: 2s
`)
	type want struct {
		status      report.Status
		deny, class string
	}
	const control = "addresses the control vantage local/sp-control resolved (10.99.20.20, fd99:0:0:20::20) were dialled from the sandbox"
	for _, c := range []struct {
		state []string
		want  map[string]want
	}{
		{nil, map[string]want{
			"egress.must-fail blocked.lab.test:443": {report.Pass, report.DenyProven, policy.VerdictTimeout},
			"egress.must-fail blocked.lab.test:80":  {report.Pass, report.DenyProven, policy.VerdictTimeout},
			"egress.must-fail nosuch.lab.test:443":  {report.Inconclusive, report.DenyUnproven, policy.VerdictDNSRefused},
			"egress.udp blocked.lab.test:443/udp":   {report.Pass, report.DenyProven, policy.VerdictTimeout},
			"egress.udp nosuch.lab.test:443/udp":    {report.Inconclusive, report.DenyUnproven, policy.VerdictDNSRefused},
		}},
		{[]string{"flush-rule", "default-deny"}, map[string]want{
			"egress.must-fail blocked.lab.test:443": {report.Fail, "", policy.VerdictAnswered},
			"egress.must-fail blocked.lab.test:80":  {report.Fail, "", policy.VerdictAnswered},
			"egress.must-fail nosuch.lab.test:443":  {report.Inconclusive, report.DenyUnproven, policy.VerdictDNSRefused},
			"egress.udp blocked.lab.test:443/udp":   {report.Fail, "", policy.VerdictAnswered},
		}},
	} {
		if c.state != nil {
			labCmd(t, script, append([]string{"break"}, c.state...)...)
		}
		fs := egressOnly(labRun(t, doc))
		labCmd(t, script, "heal")
		for name, w := range c.want {
			f := fs[name]
			if got := (want{f.Status, f.Deny, f.Class}); got != w {
				t.Errorf("%v: %s: %+v, want %+v (%s; %s)", c.state, name, got, w, f.Actual, f.Evidence)
			}
			if strings.HasPrefix(name, "egress.must-fail blocked.lab.test:443") && !strings.Contains(f.Evidence, control) {
				t.Errorf("%v: %s: evidence %q: want it to say the control's addresses were dialled", c.state, name, f.Evidence)
			}
		}
	}
}

// sidecar captures the sandbox's outbound TCP to the lab's must-fail
// addresses on 80 and 443 the way a mesh sidecar does (a REDIRECT in the
// OUTPUT chain to a local port) and blackholes it: every connection is
// accepted and closed at once, with no byte exchanged (Istio's
// BlackHoleCluster under outboundTrafficPolicy REGISTRY_ONLY).
func sidecar(t *testing.T) {
	t.Helper()
	ln, err := lab.ListenIn("sp-sandbox", "tcp4", "0.0.0.0:15001")
	if err != nil {
		t.Fatalf("the blackhole did not start: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	netnsNft(t, "sp-sandbox", "sp_test_sidecar", ` chain out {
  type nat hook output priority -100; policy accept;
  ip daddr 10.99.20.0/24 tcp dport { 80, 443 } redirect to :15001
 }`)
}

// TestLabIntercepted: a mesh sidecar's blackhole accepts every connection
// and closes it at once. That is no open door: broken that way, every
// must-fail target was a failure ("answered"). Now it is intercepted —
// inconclusive, deny unproven, no failure — while healthy, the same
// targets are proven denies.
func TestLabIntercepted(t *testing.T) {
	testenv.Lab(t)
	doc := []byte(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: lab-sidecar}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  identity: {uid: 65532, gid: 65532}
  egress:
    proxy: http://proxy.lab.test:3128
    caFile: /run/sandprobe-lab/ca.pem
    fronting: {accepted: "tinyproxy checks only the CONNECT host (TestLabFronting)"}
    allow: [{host: api.lab.test, port: 443, reason: lab}]
    mustFail:
      hosts: [{target: "blocked.lab.test:80", addresses: [10.99.20.20]}]
      ips: [{target: 10.99.20.10, expect: timeout}, "10.99.20.11:80"]
    metadata: {address: 10.99.169.254}
    timeout: 2s
`)
	targets := []string{"egress.must-fail blocked.lab.test:80", "egress.must-fail 10.99.20.10:443", "egress.must-fail 10.99.20.11:80"}
	for _, c := range []struct {
		name   string
		setup  func(*testing.T)
		status report.Status
		deny   string
		class  string // "" for the healthy flavours (timeout, refused)
	}{
		{"healthy", func(*testing.T) {}, report.Pass, report.DenyProven, ""},
		{"sidecar blackhole", sidecar, report.Inconclusive, report.DenyUnproven, policy.VerdictIntercepted},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.setup(t)
			run := labRun(t, doc)
			fs := egressOnly(run)
			for _, name := range targets {
				f := fs[name]
				if f.Status != c.status || f.Deny != c.deny || (c.class != "" && f.Class != c.class) {
					t.Errorf("%s: %s/%s deny %q (%s; %s), want %s/%s deny %q", name, f.Status, f.Class, f.Deny, f.Actual, f.Evidence, c.status, c.class, c.deny)
				}
			}
			for _, f := range run.Findings {
				if f.Status == report.Fail {
					t.Errorf("false alarm: %s: %s", f.Name(), report.ExpectedActual(f))
				}
			}
		})
	}
}
