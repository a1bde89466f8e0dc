package probes

import (
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// TestPlanSNI: every concrete HTTPS allowance through the proxy is paired
// with every must-fail host name (a random .invalid name when there is
// none); plain HTTP, raw IPs and CIDRs are not names to front with; a
// policy that accepts fronting plans nothing. (The attempts themselves run
// against real proxies in the lab: runner/local.TestLabFronting.)
func TestPlanSNI(t *testing.T) {
	egress := func(mut func(*policy.Egress)) policy.Egress {
		e := policy.Egress{Proxy: "http://proxy.example:3128",
			Allow: []policy.Allowance{{Host: "api.example", Port: 443, Reason: "r"}, {Host: "api.example", Port: 80, Reason: "r"},
				{Host: "*.cdn.example", Port: 443, Probe: "x.cdn.example", Reason: "r"}},
			MustFail: policy.MustFail{Hosts: []policy.Target{{Target: "evil.example"}, {Target: "evil.example", Port: 80}, {Target: "10.0.0.1"}, {Target: "10.9.0.0/16"}}}}
		if mut != nil {
			mut(&e)
		}
		return e
	}
	sni := func(e policy.Egress) []string {
		plan, _ := PlanEgress(e)
		var out []string
		for _, a := range plan {
			if a.Check == checkSNIMismatch {
				if a.Op != OpFront || !a.ViaProxy || a.Scheme != "https" {
					t.Errorf("%s: %+v", a.Subject, a)
				}
				out = append(out, a.Subject)
			}
		}
		return out
	}
	if got := strings.Join(sni(egress(nil)), ", "); got != "evil.example via api.example:443, evil.example via x.cdn.example:443" {
		t.Errorf("plan: %s", got)
	}
	got := sni(egress(func(e *policy.Egress) { e.MustFail.Hosts = nil }))
	if len(got) != 2 || !strings.HasPrefix(got[0], "sandprobe-") || !strings.Contains(got[0], ".invalid via api.example:443") {
		t.Errorf("no must-fail name: %v", got)
	}
	if got := sni(egress(func(e *policy.Egress) { e.Fronting = &policy.Fronting{Accepted: "tinyproxy"} })); len(got) != 0 {
		t.Errorf("fronting accepted, still planned: %v", got)
	}
	if got := sni(egress(func(e *policy.Egress) { e.Proxy = "" })); len(got) != 0 {
		t.Errorf("no proxy, still planned: %v", got)
	}
}

// TestJudgeFront: only the proxy's own refusal passes; a front that was
// never reached, or an outcome that tells neither side apart, is
// inconclusive; a completed handshake fails, with the fix naming the
// proxy setting that checks SNI.
func TestJudgeFront(t *testing.T) {
	a := Attempt{Check: checkSNIMismatch, Subject: "evil.example via api.example:443", Host: "api.example", Port: 443, SNI: "evil.example", ViaProxy: true, Op: OpFront}
	made := func(r Result) Result { r.Evidence.Attempted = true; return r }
	for _, c := range []struct {
		name string
		r    Result
		want result.Status
		fix  string
	}{
		{"proxy cut the tunnel", made(Result{Class: policy.VerdictProxyDenied, Detail: "closed"}), result.Pass, ""},
		{"front answered", made(Result{Class: policy.VerdictAnswered, Detail: "handshake"}), result.Fail, "ssl_bump peek"},
		{"front never reached", made(Result{Class: policy.VerdictError, Unproven: true, Detail: "nothing was tested"}), result.Inconclusive, "answer through the proxy"},
		{"tunnel held open, silent", made(Result{Class: policy.VerdictTimeout, Detail: "timeout"}), result.Inconclusive, "cannot be told apart"},
		{"TLS error on our side", made(Result{Class: policy.VerdictError, Detail: "tls: bad record"}), result.Inconclusive, ""},
		{"not attempted", Result{Class: policy.VerdictProxyDenied}, result.Error, ""},
	} {
		f := judgeFront(a, c.r)
		if f.Status != c.want || !strings.Contains(f.Fix, c.fix) {
			t.Errorf("%s: %s, fix %q", c.name, f.Status, f.Fix)
		}
		if f.Status != result.Pass && f.Status != result.Error && f.Expected == "" {
			t.Errorf("%s: no expected", c.name)
		}
	}
}
