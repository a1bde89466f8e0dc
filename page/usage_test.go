package page

import (
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/report"
)

// The proxy's record beside the last verdicts: each allowance's use in its
// own row (an unused one named with its reason), what the proxy denied and
// what the declared policy would block in a section of their own; a run
// without a record shows neither.
func TestPageUsage(t *testing.T) {
	p := labPolicy(t)
	run := runFor(p, t0)
	if got := string(render(t, Page{Policy: p, Run: run, Now: t0})); strings.Contains(got, `id="record"`) || strings.Contains(got, "the proxy's record") {
		t.Fatalf("a run without a record shows one")
	}
	end := t0
	u := &report.EgressUsage{From: end.Add(-40 * 24 * time.Hour), To: end, UnusedDays: 30,
		Sources: []report.UsageSource{{Name: "access.log", Format: "squid", Records: 1234}}, ProbeRecords: 12}
	for i, a := range p.Spec.Egress.Allow {
		au := report.AllowanceUsage{Index: i, Host: a.Host, Port: a.Port, Reason: a.Reason, Requests: 50, LastUse: end.Add(-time.Hour), SandboxCount: 3, Verdict: report.Pass, BytesOut: -1, BytesIn: -1}
		if a.Host == "git.lab.test" {
			au.Requests, au.LastUse, au.SandboxCount, au.Verdict, au.Note = 0, time.Time{}, 0, report.Fail, "no request in the 40 days the record covers"
		}
		u.Allowances = append(u.Allowances, au)
	}
	u.Denied = []report.DestinationUse{{Sandbox: "10.99.1.3", Host: "pastebin.com", Port: 443, Count: 82, First: end.Add(-time.Hour), Last: end}}
	u.DeniedTotal = 1
	u.WouldBlock = []report.DestinationUse{{Sandbox: "10.99.1.2", Host: "objects.git.lab.test", Port: 443, Count: 5, First: end.Add(-2 * time.Hour), Last: end}}
	u.WouldBlockTotal = 1
	run.EgressUsage = u
	doc := render(t, Page{Policy: p, Run: run, Now: t0})
	var sawGit, sawAPI bool
	for _, r := range rows(t, doc) {
		if r["section"] != "allowed" {
			continue
		}
		switch r["data-host"] {
		case "git.lab.test":
			sawGit = true
			if !strings.Contains(r["text"], "UNUSED 0 requests") || !strings.Contains(r["text"], `remove? the reason says "git fetch and push through the proxy"`) {
				t.Errorf("git.lab.test row: %s", r["text"])
			}
		case "api.lab.test":
			sawAPI = true
			if !strings.Contains(r["text"], "PASS 50 requests, last 2026-12-01 09:00:00Z, 3 sandboxes") {
				t.Errorf("api.lab.test row: %s", r["text"])
			}
		}
	}
	if !sawGit || !sawAPI {
		t.Fatalf("allowed rows missing (git %v, api %v)", sawGit, sawAPI)
	}
	page := string(doc)
	for _, want := range []string{`id="record"`, "access.log (squid, 1234 records)", "the probe&#39;s own 12 marked attempts are left out", "1 unused allowances",
		"<td class=\"sub\">10.99.1.3</td><td class=\"sub\">pastebin.com:443</td><td class=\"num\">82</td>",
		"<td class=\"sub\">10.99.1.2</td><td class=\"sub\">objects.git.lab.test:443</td><td class=\"num\">5</td>"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}
