package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const usagePolicy = `apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: usage}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  egress:
    proxy: http://10.99.31.28:3128
    allow:
      - {host: api.lab.test, port: 443, reason: "the model API"}
      - {host: git.lab.test, port: 443, reason: "git fetch for the 2024 migration"}
      - {host: "*.github.io", port: 443, reason: "docs an agent once read"}
    mustFail: {hosts: [blocked.lab.test]}
`

// usageFiles writes the policy and a 40-day Squid log in which api is used
// daily, git never, and a sandbox is denied pastebin.com.
func usageFiles(t *testing.T) (policyPath, logPath string) {
	dir := t.TempDir()
	policyPath, logPath = filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "access.log")
	os.WriteFile(policyPath, []byte(usagePolicy), 0o644)
	var b strings.Builder
	end := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	for d := 40; d >= 0; d-- {
		ts := end.Add(-time.Duration(d) * 24 * time.Hour).Unix()
		fmt.Fprintf(&b, "%d.000      3 10.99.1.2 TCP_TUNNEL/200 5100 CONNECT api.lab.test:443 - HIER_DIRECT/10.99.10.10 -\n", ts)
		fmt.Fprintf(&b, "%d.500      0 10.99.1.3 TCP_DENIED/403 3400 CONNECT pastebin.com:443 - HIER_NONE/- text/html\n", ts)
	}
	os.WriteFile(logPath, []byte(b.String()), 0o644)
	return policyPath, logPath
}

func TestEgressUsageCommand(t *testing.T) {
	pol, log := usageFiles(t)
	dir := t.TempDir()
	jsonFile, metrics, html := filepath.Join(dir, "u.json"), filepath.Join(dir, "u.prom"), filepath.Join(dir, "u.html")
	code, out, errb := runApp(t, "", "egress-usage", "--policy", pol, "--log", log, "--json", jsonFile, "--metrics-file", metrics, "--html", html)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (an unused allowance, a risky wildcard)\n%s%s", code, out, errb)
	}
	for _, want := range []string{
		`FAIL egress.allowance-unused git.lab.test:443: no request in the 40 days the record covers`,
		`remove spec.egress.allow[1] (git.lab.test:443)? the reason says "git fetch for the 2024 migration"`,
		`FAIL egress.allowance-wildcard *.github.io:443: github.io is a multi-tenant suffix`,
		`the reason says "docs an agent once read"`,
		"10.99.1.3  pastebin.com:443  41",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	var doc struct {
		EgressUsage struct {
			Allowances []struct {
				Host     string
				Requests int64
				Verdict  string
			}
			Denied []struct{ Host string }
		} `json:"egressUsage"`
		Findings []struct{ Check, Status string }
	}
	raw, err := os.ReadFile(jsonFile)
	if err != nil || json.Unmarshal(raw, &doc) != nil {
		t.Fatalf("json report: %v\n%s", err, raw)
	}
	if a := doc.EgressUsage.Allowances; len(a) != 3 || a[0].Requests != 41 || a[1].Verdict != "fail" {
		t.Errorf("allowances in the JSON report: %+v", a)
	}
	prom, _ := os.ReadFile(metrics)
	for _, want := range []string{`sandprobe_egress_allowance_requests{allowance="api.lab.test:443"} 41`, "sandprobe_egress_allowances_unused 2", "sandprobe_egress_allowances_risky 1", `sandprobe_egress_denied_attempts{host="pastebin.com:443"} 41`} {
		if !strings.Contains(string(prom), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if page, _ := os.ReadFile(html); !strings.Contains(string(page), `id="record"`) {
		t.Errorf("the page has no record section")
	}
}

// Bad input is one line naming the flag or file, exit 2; a log that holds
// no record (logging off, the wrong file) could not be judged: exit 3.
func TestEgressUsageErrors(t *testing.T) {
	pol, log := usageFiles(t)
	empty := filepath.Join(t.TempDir(), "empty.log")
	os.WriteFile(empty, nil, 0o644)
	other := filepath.Join(t.TempDir(), "other.log")
	os.WriteFile(other, []byte("just some text\nand more\n"), 0o644)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--policy", pol}, 2, "--log: give at least one proxy log"},
		{[]string{"--policy", pol, "--log", "/nonexistent/access.log"}, 2, "--log /nonexistent/access.log: no such file or directory"},
		{[]string{"--policy", pol, "--log", t.TempDir()}, 2, "is a directory"},
		{[]string{"--policy", pol, "--log", log, "--record-format", "nginx"}, 2, `--record-format: unknown log format "nginx"`},
		{[]string{"--policy", pol, "--log", log, "--unused-days", "0"}, 2, "--unused-days: want a positive number"},
		{[]string{"--log", log}, 2, "--policy is required"},
		{[]string{"--policy", pol, "--log", empty}, 3, empty + ": no records: the source is empty"},
		{[]string{"--policy", pol, "--log", log, "--log", other}, 3, other + ": no records: the first lines are none of the known formats"},
		{[]string{"--policy", pol, "--log", other, "--record-format", "squid"}, 3, "none of 2 lines is a squid record (line 1: no Unix time in the first field)"},
	} {
		code, out, errb := runApp(t, "", append([]string{"egress-usage"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errb, tc.want) || strings.Count(strings.TrimSpace(errb), "\n") > 0 || out != "" {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want exit %d and %q on one line", tc.args, code, errb, out, tc.code, tc.want)
		}
	}
}
