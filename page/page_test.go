package page

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

func labPolicy(t testing.TB) *policy.Policy {
	t.Helper()
	p, _, err := policy.LoadFile("../fixtures/lab-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// findingsFor is a run of the lab policy as the probe reports it: each
// allowance answered, each must-fail target refused, except those in open.
func runFor(p *policy.Policy, at time.Time, open ...string) report.Run {
	run := report.Run{Policy: p.Metadata.Name, Version: "test", Backend: "local", StartedAt: at, Seconds: 2.1}
	const target = "local/sp-sandbox"
	for _, a := range p.Spec.Egress.Allow {
		run.Findings = append(run.Findings, report.Finding{Check: "egress.allowed", Role: report.RoleAllowance, Target: target, Subject: allowedSubject(a, true), Status: report.Pass, Class: "answered",
			Attempt: &report.Attempt{Attempted: true, Started: 0.01, Waited: 0.08, Timeout: 2}})
	}
	for _, s := range []string{"10.99.20.10:443", "10.99.20.11:443", "blocked.lab.test:443"} {
		f := report.Finding{Check: "egress.must-fail", Role: report.RoleMustFail, Target: target, Subject: s, Status: report.Pass, Class: "refused",
			Attempt: &report.Attempt{Attempted: true, Waited: 0.004, Timeout: 2, StoppedBy: report.StoppedByNetwork, Errno: "ECONNREFUSED"}}
		for _, o := range open {
			if o == s {
				f.Status, f.Class = report.Fail, "answered"
				f.Expected, f.Actual = "fails with refused", "answered: "+s+": connected"
				f.Fix = "a rule that blocked " + s + " is gone or was widened: restore the deny"
				f.Attempt.StoppedBy, f.Attempt.Errno = "", ""
			}
		}
		run.Findings = append(run.Findings, f)
	}
	run.Findings = append(run.Findings,
		report.Finding{Check: "egress.metadata", Role: report.RoleMetadata, Target: target, Subject: "10.99.169.254:80", Status: report.Pass, Class: "timeout"},
		report.Finding{Check: "egress.dns-exfil", Role: report.RoleDNSChannel, Target: target, Subject: "*.lab.test", Status: report.Pass, Class: "dns-refused"},
		report.Finding{Check: "identity.uid", Target: target, Status: report.Pass, Actual: "uid 65532"},
	)
	return run
}

// rows parses the page and returns its table rows by data attributes.
func rows(t *testing.T, doc []byte) []map[string]string {
	t.Helper()
	root, err := html.Parse(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	var walk func(n *html.Node, section string)
	walk = func(n *html.Node, section string) {
		if n.Type == html.ElementNode && n.Data == "section" {
			for _, a := range n.Attr {
				if a.Key == "id" {
					section = a.Val
				}
			}
		}
		if n.Type == html.ElementNode && n.Data == "tr" {
			m := map[string]string{"section": section, "text": textOf(n)}
			for _, a := range n.Attr {
				m[a.Key] = a.Val
			}
			if m["data-check"] != "" {
				out = append(out, m)
			}
		}
		if n.Type == html.ElementNode && n.Data == "script" {
			t.Errorf("the page holds a script element")
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, section)
		}
	}
	walk(root, "")
	return out
}

func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
			b.WriteByte(' ')
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

func render(t *testing.T, pg Page) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, pg); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestPageRows: each finding is a row in its section with its status as a
// word; every allowance shows its reason; a reopened target is listed under
// "Needs attention" first, with the policy's reason and the fix.
func TestPageRows(t *testing.T) {
	p := labPolicy(t)
	run := runFor(p, t0, "10.99.20.11:443")
	doc := render(t, Page{Policy: p, Run: run, Now: t0})
	got := rows(t, doc)
	section := map[string]string{"egress.allowed": "allowed", "egress.must-fail": "must-fail", "egress.metadata": "metadata", "egress.dns-exfil": "dns", "identity.uid": "other"}
	for _, f := range run.Findings {
		found := false
		for _, r := range got {
			if r["data-check"] == f.Check && r["data-subject"] == f.Subject && r["data-target"] == f.Target && r["section"] == section[f.Check] {
				found = true
				if r["data-status"] != string(f.Status) || !strings.Contains(r["text"], strings.ToUpper(string(f.Status))) {
					t.Errorf("%s %s: row says %q / %q, the run %s", f.Check, f.Subject, r["data-status"], r["text"], f.Status)
				}
			}
		}
		if !found {
			t.Errorf("%s %s: no row in section %s", f.Check, f.Subject, section[f.Check])
		}
	}
	allowed := 0
	for _, r := range got {
		if r["section"] != "allowed" {
			continue
		}
		allowed++
		reason := ""
		for _, a := range p.Spec.Egress.Allow {
			if allowedSubject(a, true) == r["data-subject"] {
				reason = a.Reason
			}
		}
		if reason == "" || !strings.Contains(r["text"], reason) {
			t.Errorf("allowance row %q lacks its reason %q", r["text"], reason)
		}
	}
	if allowed != len(p.Spec.Egress.Allow) {
		t.Errorf("%d allowance rows, the policy has %d allowances", allowed, len(p.Spec.Egress.Allow))
	}
	var attention []map[string]string
	for _, r := range got {
		if r["section"] == "attention" {
			attention = append(attention, r)
		}
	}
	if len(attention) != 1 || attention[0]["data-subject"] != "10.99.20.11:443" {
		t.Fatalf("needs attention: %v, want the reopened 10.99.20.11:443 alone", attention)
	}
	for _, want := range []string{"FAIL", "REJECT tcp reset", "expected refused", "restore the deny", "answered"} {
		if !strings.Contains(attention[0]["text"], want) {
			t.Errorf("needs-attention row %q lacks %q", attention[0]["text"], want)
		}
	}
	if !bytes.Contains(doc, []byte(`id="result">NOT CONFORMANT<`)) {
		t.Errorf("the page does not say NOT CONFORMANT")
	}
}

// TestPageDeny: each deny row says what the control vantage made of it —
// proven with the class the control saw, unproven (and then the row is no
// pass but inconclusive, under Needs attention), or that no control dialled
// it — never a bare PASS that hides which.
func TestPageDeny(t *testing.T) {
	p := labPolicy(t)
	run := runFor(p, t0)
	for i := range run.Findings {
		f := &run.Findings[i]
		switch f.Subject {
		case "10.99.20.10:443":
			f.Deny, f.Control = report.DenyProven, report.ClassAnswered
		case "10.99.20.11:443":
			// The target refuses everyone: the control got a reset too.
			f.Status, f.Deny, f.Control = report.Inconclusive, report.DenyUnproven, "refused"
			f.Actual = "refused — deny unproven: the control vantage local/sp-control got refused too"
		}
	}
	got := rows(t, render(t, Page{Policy: p, Run: run, Now: t0}))
	want := map[string]struct{ status, has, hasNot string }{
		"10.99.20.10:443":      {"pass", "proven control: answered", "unproven"},
		"10.99.20.11:443":      {"inconclusive", "unproven control: refused", "PASS"},
		"blocked.lab.test:443": {"pass", "no control", "proven"},
	}
	attention := false
	for _, r := range got {
		if r["data-check"] != "egress.must-fail" {
			continue
		}
		if r["section"] == "attention" {
			attention = attention || r["data-subject"] == "10.99.20.11:443"
			continue
		}
		w, ok := want[r["data-subject"]]
		if !ok {
			continue
		}
		delete(want, r["data-subject"])
		if r["data-status"] != w.status || !strings.Contains(r["text"], w.has) || strings.Contains(r["text"], w.hasNot) {
			t.Errorf("%s: row %q (status %s), want status %s, %q and no %q", r["data-subject"], r["text"], r["data-status"], w.status, w.has, w.hasNot)
		}
	}
	for s := range want {
		t.Errorf("%s: no must-fail row", s)
	}
	if !attention {
		t.Errorf("the unproven deny is not under Needs attention")
	}
}

// TestPageAllowanceWithoutVerdict: an allowance the run holds no verdict
// for is a row that says so, never a silent gap or a pass.
func TestPageAllowanceWithoutVerdict(t *testing.T) {
	p := labPolicy(t)
	run := runFor(p, t0)
	var kept []report.Finding
	for _, f := range run.Findings {
		if f.Subject != "git.lab.test:443 via proxy" {
			kept = append(kept, f)
		}
	}
	run.Findings = kept
	got := rows(t, render(t, Page{Policy: p, Run: run, Now: t0}))
	for _, r := range got {
		if r["section"] == "allowed" && strings.Contains(r["text"], "git fetch and push") {
			if r["data-status"] != "none" || !strings.Contains(r["text"], "NO VERDICT") {
				t.Errorf("an allowance without a verdict shows %q", r["text"])
			}
			return
		}
	}
	t.Fatal("the allowance without a verdict is not on the page")
}

// TestPageHistory: under serve, a host that passed for two runs and failed
// in the third shows as a change (PASS → FAIL at the third run's time), its
// history strip reads P P F and it says how long each verdict held.
func TestPageHistory(t *testing.T) {
	p := labPolicy(t)
	h := NewHistory(0)
	var last report.Run
	for i, open := range [][]string{nil, nil, {"10.99.20.11:443"}} {
		last = runFor(p, t0.Add(time.Duration(i)*30*time.Minute), open...)
		h.Add(last)
	}
	doc := render(t, Page{Policy: p, Run: last, History: h, Served: true, Now: t0.Add(time.Hour)})
	got := rows(t, doc)
	var change, row map[string]string
	for _, r := range got {
		if r["data-subject"] == "10.99.20.11:443" && r["section"] == "changes" {
			change = r
		}
		if r["data-subject"] == "10.99.20.11:443" && r["section"] == "must-fail" {
			row = r
		}
	}
	if change == nil || !strings.HasPrefix(change["text"], "PASS FAIL egress.must-fail") || !strings.Contains(change["text"], "2026-12-01 11:00:00Z") {
		t.Errorf("changes: %v, want PASS → FAIL at 11:00:00Z", change)
	}
	if row == nil || !strings.Contains(row["text"], "P P F") || !strings.Contains(row["text"], "FAIL since 11:00:00Z (1 run); PASS in the 2 runs before") {
		t.Errorf("history of the reopened host: %v", row)
	}
	for _, r := range got {
		if r["data-subject"] == "10.99.20.10:443" && r["section"] == "must-fail" && !strings.Contains(r["text"], "PASS in all 3 runs since 10:00:00Z") {
			t.Errorf("a steady host: %q", r["text"])
		}
	}
	if !bytes.Contains(doc, []byte(`href="/report.json"`)) {
		t.Errorf("the served page does not link serve's endpoints")
	}

	// The history keeps its bound.
	small := NewHistory(2)
	for i := range 5 {
		small.Add(runFor(p, t0.Add(time.Duration(i)*time.Minute)))
	}
	if small.Len() != 2 {
		t.Errorf("history of 2 keeps %d runs", small.Len())
	}
}

// TestPageEscapes: what a run reports (a hostile subject, an evidence line
// with markup) is text on the page, never markup.
func TestPageEscapes(t *testing.T) {
	p := labPolicy(t)
	run := runFor(p, t0)
	evil := `<script>alert(1)</script><img src=https://attacker.example/x>`
	run.Findings = append(run.Findings, report.Finding{Check: "egress.must-fail", Role: report.RoleMustFail, Target: "local/" + evil, Subject: evil, Status: report.Fail, Actual: evil, Evidence: evil, Fix: evil})
	doc := render(t, Page{Policy: p, Run: run, Now: t0})
	rows(t, doc) // fails on a script element
	if bytes.Contains(doc, []byte("<img")) || bytes.Contains(doc, []byte("<script")) {
		t.Fatalf("markup from a finding reached the page")
	}
	if !bytes.Contains(doc, []byte("&lt;script&gt;")) {
		t.Fatalf("the hostile text is not shown escaped")
	}
}

// TestWriteFileAtomic: the page is written whole or not at all.
func TestWriteFileAtomic(t *testing.T) {
	p := labPolicy(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "page.html")
	if err := WriteFile(path, Page{Policy: p, Run: runFor(p, t0), Now: t0}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("the directory holds %d entries, want the page alone", len(entries))
	}
	data, _ := os.ReadFile(path)
	if !bytes.HasSuffix(bytes.TrimSpace(data), []byte("</html>")) {
		t.Fatalf("the page is not whole")
	}
	if err := WriteFile(filepath.Join(dir, "missing", "page.html"), Page{Policy: p, Run: runFor(p, t0)}); err == nil {
		t.Fatal("writing into a missing directory succeeded")
	}
}

// TestPageClusterRun: a run with two probe targets (nodes) shows the probe
// column, and drift is grouped by object, the drifted object first, each
// finding with expected, actual and fix, passing rules counted.
func TestPageClusterRun(t *testing.T) {
	p := labPolicy(t)
	run := runFor(p, t0)
	var two []report.Finding
	for _, node := range []string{"namespace/sandboxes/node/worker-1", "namespace/sandboxes/node/worker-2"} {
		for _, f := range run.Findings {
			f.Target = node
			two = append(two, f)
		}
	}
	run.Findings = append(two,
		report.Finding{Check: "drift.pod.runtime-class", Target: "pod/sandboxes/agent-1", Namespace: "sandboxes", Subject: "spec.runtimeClassName", Status: report.Pass},
		report.Finding{Check: "drift.netpol.default-deny", Target: "networkpolicy/sandboxes/allow-all", Namespace: "sandboxes", Status: report.Pass},
		report.Finding{Check: "drift.pod.privileged", Target: "pod/sandboxes/agent-1", Namespace: "sandboxes", Subject: "spec.containers[0].securityContext.privileged", Status: report.Fail,
			Expected: "false", Actual: "true", Fix: "set spec.containers[0].securityContext.privileged: false"},
	)
	doc := render(t, Page{Policy: p, Run: run, Now: t0})
	if !bytes.Contains(doc, []byte("<th>Probe</th>")) {
		t.Errorf("two probe targets, but no probe column")
	}
	i, j := bytes.Index(doc, []byte(`data-object="pod/sandboxes/agent-1"`)), bytes.Index(doc, []byte(`data-object="networkpolicy/sandboxes/allow-all"`))
	if i < 0 || j < 0 || i > j {
		t.Fatalf("drift groups: the drifted pod (%d) must come before the clean policy (%d)", i, j)
	}
	var drifted map[string]string
	for _, r := range rows(t, doc) {
		if r["section"] == "drift" {
			if drifted != nil {
				t.Errorf("a second drift row %v: passes are counted, not listed", r)
			}
			drifted = r
		}
	}
	for _, want := range []string{"FAIL", "drift.pod.privileged", "spec.containers[0].securityContext.privileged", "true", "set spec.containers[0].securityContext.privileged: false"} {
		if !strings.Contains(drifted["text"], want) {
			t.Errorf("drift row %q lacks %q", drifted["text"], want)
		}
	}
	if !bytes.Contains(doc, []byte("(1 rule passes)")) {
		t.Errorf("the drifted pod's passing rule is not counted")
	}
}

// TestAttentionWorstFirst: Needs attention lists the failures worst
// severity first (a runtime socket before a missing seccomp filter before a
// tool that does not start), each naming its severity, and what could not
// be checked after every failure.
func TestAttentionWorstFirst(t *testing.T) {
	p := labPolicy(t)
	run := runFor(p, t0)
	const target = "local/sp-sandbox"
	run.Findings = append(run.Findings,
		report.Finding{Check: "tools.run", Target: target, Subject: "git", Status: report.Fail, Severity: report.Low, Actual: "exit 127"},
		report.Finding{Check: "caps.seccomp", Target: target, Status: report.Fail, Severity: report.Medium, Actual: "mode 0"},
		report.Finding{Check: "creds.scope", Target: target, Status: report.Error, Severity: report.High, Actual: "the API server refused the token"},
		report.Finding{Check: "escape.runtime-socket", Target: target, Subject: "/var/run/docker.sock", Status: report.Fail, Severity: report.Critical, Actual: "connected"},
	)
	var order []string
	for _, r := range rows(t, render(t, Page{Policy: p, Run: run, Now: t0})) {
		if r["section"] == "attention" {
			order = append(order, r["data-check"]+" "+r["data-severity"])
			if !strings.Contains(r["text"], r["data-severity"]) {
				t.Errorf("row %q does not name its severity", r["text"])
			}
		}
	}
	want := []string{"escape.runtime-socket critical", "caps.seccomp medium", "tools.run low", "creds.scope high"}
	if strings.Join(order, "|") != strings.Join(want, "|") {
		t.Errorf("needs attention %q, want %q", order, want)
	}
}

// TestAttentionListsDrift: a run whose only failures are drift (a
// privileged pod, an allow-all NetworkPolicy) is NOT CONFORMANT, and Needs
// attention lists both, worst first; the all-clear line is not there. A
// drift rule that passes is not listed.
func TestAttentionListsDrift(t *testing.T) {
	p := labPolicy(t)
	run := runFor(p, t0)
	run.Findings = append(run.Findings,
		report.Finding{Check: "drift.netpol.world", Target: "networkpolicy/sandboxes/allow-all", Namespace: "sandboxes", Subject: "networkpolicy/allow-all spec.egress[0].to[0]",
			Status: report.Fail, Severity: report.High, Expected: "no 0.0.0.0/0", Actual: "0.0.0.0/0", Fix: "remove the ipBlock"},
		report.Finding{Check: "drift.pod.privileged", Target: "pod/sandboxes/agent-1", Namespace: "sandboxes", Subject: "spec.containers[0].securityContext.privileged",
			Status: report.Fail, Severity: report.Critical, Expected: "false", Actual: "true", Fix: "set privileged: false"},
		report.Finding{Check: "drift.pod.runtime-class", Target: "summary", Status: report.Pass, Severity: report.Critical},
	)
	doc := render(t, Page{Policy: p, Run: run, Now: t0})
	if !bytes.Contains(doc, []byte("NOT CONFORMANT")) || bytes.Contains(doc, []byte(`id="all-clear"`)) {
		t.Fatalf("header and all-clear disagree:\n%s", doc)
	}
	var order []string
	for _, r := range rows(t, doc) {
		if r["section"] == "attention" {
			order = append(order, r["data-check"])
		}
	}
	if want := []string{"drift.pod.privileged", "drift.netpol.world"}; !slices.Equal(order, want) {
		t.Errorf("needs attention %q, want %q", order, want)
	}
}

// TestAttentionAgreesWithHeader: over every status a lone drift or probe
// finding can have, the page says nothing needs attention exactly when the
// header says CONFORMANT.
func TestAttentionAgreesWithHeader(t *testing.T) {
	p := labPolicy(t)
	for _, check := range []string{"drift.pod.privileged", "admission.would-refuse", "identity.uid"} {
		for _, st := range []report.Status{report.Pass, report.Fail, report.Skip, report.Inconclusive, report.Error} {
			run := runFor(p, t0)
			run.Findings = append(run.Findings, report.Finding{Check: check, Target: "pod/sandboxes/agent-1", Namespace: "sandboxes", Status: st, Actual: "x"})
			doc := render(t, Page{Policy: p, Run: run, Now: t0})
			clear := bytes.Contains(doc, []byte(`id="all-clear"`))
			conformant := bytes.Contains(doc, []byte(">CONFORMANT<"))
			if clear != conformant || clear != (run.ExitCode() == report.ExitOK) {
				t.Errorf("%s %s: all-clear %v, CONFORMANT %v, exit %d", check, st, clear, conformant, run.ExitCode())
			}
		}
	}
}
