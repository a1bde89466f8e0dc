package runner

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// The egress checks these tests stand for, with the roles and judges
// their catalogue rows declare (probes.Catalogue; internal/catalogue's
// TestJudgedByRow holds the runner to every row).
const (
	checkMustFail = "egress.must-fail"
	checkUDP      = "egress.udp"
	checkMetadata = "egress.metadata"
)

var (
	mustFailJudge = report.Judge{FollowUp: true}
	udpJudge      = report.Judge{Unserved: true, FollowUp: true}
	metadataJudge = report.Judge{Unserved: true}
)

// TestDNSOnlyFollowUp: the follow-up asks the sandbox to dial exactly the
// DNS-only must-fail hosts the control resolved and reached, each with the
// control's addresses besides its own, the entries' other fields as
// written; nothing else must-fail is dialled again. Without a control, with
// a control that could not run or did not resolve the name, or when the
// sandbox's own resolver answered, there is no follow-up, and the
// verdicts stay inconclusive.
func TestDNSOnlyFollowUp(t *testing.T) {
	doc := []byte(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: f}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  egress:
    allow: [{host: api.example, port: 443, reason: r}]
    mustFail:
      hosts:
        - blocked.example
        - {target: "pinned.example:80", expect: timeout, reason: "keep me", addresses: [192.0.2.9]}
        - unknown.example:443
        - dialled.example
      ips: [198.51.100.1]
`)
	p, err := policy.Load(doc)
	if err != nil {
		t.Fatal(err)
	}
	spec := ProbeSpec{Policy: p, PolicyBytes: doc, Nonce: "n"}
	dnsOnly := func(sub string) report.Finding {
		check, judge := checkMustFail, mustFailJudge
		if strings.HasSuffix(sub, "/udp") {
			check, judge = checkUDP, udpJudge
		}
		return report.Finding{Check: check, Role: report.RoleMustFail, Judge: judge, Subject: sub, Status: report.Inconclusive, Class: "dns-refused",
			Attempt: &report.Attempt{Attempted: true, StoppedBy: report.StoppedByResolver, Rcode: "REFUSED"}}
	}
	res := report.ProbeResult{Findings: []report.Finding{
		dnsOnly("blocked.example:443"), dnsOnly("pinned.example:80"), dnsOnly("unknown.example:443"),
		{Check: checkMustFail, Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "dialled.example:443", Status: report.Pass, Class: "timeout", Attempt: &report.Attempt{Attempted: true, StoppedBy: report.StoppedByNetwork}},
		dnsOnly("blocked.example:443 via proxy"),
		// over UDP (QUIC) the same name: its host entry gets both sets
		dnsOnly("blocked.example:443/udp"),
	}}
	answered := func(sub string, addrs ...string) report.Finding {
		return report.Finding{Check: checkMustFail, Role: report.RoleMustFail, Judge: mustFailJudge, Subject: sub, Status: report.Pass, Class: report.ClassAnswered, Attempt: &report.Attempt{Attempted: true, Resolved: addrs}}
	}
	c := NewControl("local/ctl", report.ProbeResult{Findings: []report.Finding{
		answered("blocked.example:443", "192.0.2.1", "2001:db8::1"),
		answered("pinned.example:80", "192.0.2.2"),
		{Check: checkMustFail, Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "unknown.example:443", Status: report.Pass, Class: "nxdomain", Attempt: &report.Attempt{Attempted: true}},
		answered("dialled.example:443", "192.0.2.4"),
		{Check: checkUDP, Role: report.RoleMustFail, Judge: udpJudge, Subject: "blocked.example:443/udp", Status: report.Pass, Class: report.ClassAnswered, Attempt: &report.Attempt{Attempted: true, Resolved: []string{"192.0.2.1", "192.0.2.3"}}},
	}})
	fu, ok, err := DNSOnlyFollowUp(spec, []report.ProbeResult{res}, c)
	if err != nil || !ok {
		t.Fatalf("follow-up: %v %v", ok, err)
	}
	if fu.Spec.Only != checkMustFail+","+checkUDP || fu.Spec.Nonce != "n" {
		t.Errorf("spec: only %q nonce %q", fu.Spec.Only, fu.Spec.Nonce)
	}
	got := fu.Spec.Policy.Spec.Egress.MustFail
	if len(got.Hosts) != 2 || len(got.IPs) != 0 {
		t.Fatalf("must-fail of the follow-up: %+v", got)
	}
	if h := got.Hosts[0]; h.Target != "blocked.example" || strings.Join(h.Addresses, " ") != "192.0.2.1 2001:db8::1 192.0.2.3" {
		t.Errorf("first host: %+v", h)
	}
	if h := got.Hosts[1]; h.Expect != "timeout" || h.Reason != "keep me" || strings.Join(h.Addresses, " ") != "192.0.2.9 192.0.2.2" {
		t.Errorf("second host lost what was written: %+v", h)
	}
	if a := fu.Spec.Policy.Spec.Egress.Allow; len(a) != 1 {
		t.Errorf("the allowances (the witnesses) must stay: %+v", a)
	}

	for name, ctl := range map[string]*Control{
		"no control":       nil,
		"control failed":   {Vantage: "x", Err: errors.New("boom")},
		"isolated sandbox": {Vantage: "x", Isolated: "loopback only"},
		"control NXDOMAIN": NewControl("x", report.ProbeResult{Findings: []report.Finding{{Check: checkMustFail, Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "unknown.example:443", Status: report.Pass, Class: "nxdomain"}}}),
	} {
		if _, ok, err := DNSOnlyFollowUp(spec, []report.ProbeResult{res}, ctl); ok || err != nil {
			t.Errorf("%s: a follow-up (%v)", name, err)
		}
	}
}

// TestMergeFollowUp: the follow-up's verdict replaces the DNS-only one and
// says whose addresses were dialled; when the round failed or reported
// nothing for a subject, the first verdict (inconclusive) stays with why.
func TestMergeFollowUp(t *testing.T) {
	first := func() report.ProbeResult {
		return report.ProbeResult{Findings: []report.Finding{
			{Check: checkMustFail, Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "a.example:443", Status: report.Inconclusive, Class: "nxdomain", Attempt: &report.Attempt{StoppedBy: report.StoppedByResolver}},
			{Check: checkMustFail, Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "b.example:443", Status: report.Inconclusive, Class: "nxdomain", Attempt: &report.Attempt{StoppedBy: report.StoppedByResolver}},
		}}
	}
	fu := FollowUp{Addresses: map[string][]string{"a.example:443": {"192.0.2.1"}, "b.example:443": {"192.0.2.2"}}}
	follow := report.ProbeResult{Findings: []report.Finding{
		{Check: checkMustFail, Role: report.RoleMustFail, Judge: mustFailJudge, Subject: "a.example:443", Status: report.Fail, Class: report.ClassAnswered, Evidence: "192.0.2.1:443: connected"},
		{Check: "egress.allowed", Role: report.RoleAllowance, Subject: "a.example:443", Status: report.Pass, Class: report.ClassAnswered},
	}}
	res := first()
	MergeFollowUp(&res, follow, nil, fu, "local/ctl")
	if a := res.Findings[0]; a.Status != report.Fail || !strings.Contains(a.Evidence, "control vantage local/ctl resolved (192.0.2.1) were dialled") {
		t.Errorf("a: %s %q", a.Status, a.Evidence)
	}
	if b := res.Findings[1]; b.Status != report.Inconclusive || !strings.Contains(b.Evidence, "reported no verdict") {
		t.Errorf("b: %s %q", b.Status, b.Evidence)
	}
	res = first()
	MergeFollowUp(&res, follow, errors.New("the sandbox did not start"), fu, "local/ctl")
	for _, f := range res.Findings {
		if f.Status != report.Inconclusive || !strings.Contains(f.Evidence, "the sandbox did not start") {
			t.Errorf("%s: %s %q", f.Subject, f.Status, f.Evidence)
		}
	}
}
