package audit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/egresslog"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

const basePolicy = `apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: usage}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  egress:
    proxy: http://10.99.31.28:3128
    allow:
%s
    mustFail: {hosts: [blocked.lab.test]}
`

func loadPolicy(t *testing.T, allow ...string) *policy.Policy {
	t.Helper()
	p, err := policy.Load([]byte(fmt.Sprintf(basePolicy, "      - "+strings.Join(allow, "\n      - "))))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// squidLine writes one native Squid line at t.
func squidLine(t time.Time, client, tag string, status int, method, url, ua string) string {
	return fmt.Sprintf("%d.%03d %6d %s %s/%03d %d %s %s - HIER_DIRECT/10.99.10.10 - 120 %q\n", t.Unix(), t.Nanosecond()/1e6, 0, client, tag, status, 4000, method, url, ua)
}

func judgeFile(t *testing.T, p *policy.Policy, log string, days int) (*report.EgressUsage, []report.Finding) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	tally, used, err := Read(context.Background(), []Source{FileSource(path, egresslog.FormatAuto, nil)}, 2)
	if err != nil {
		t.Fatal(err)
	}
	return Judge(p, tally, used, Options{UnusedDays: days})
}

func find(fs []report.Finding, check, subject string) *report.Finding {
	for i := range fs {
		if fs[i].Check == check && fs[i].Subject == subject {
			return &fs[i]
		}
	}
	return nil
}

// An aged log: 40 days of traffic in which api.lab.test is used every day,
// git.lab.test only in the first days, objects (a wildcard) never, and the
// probe's own marked attempts reach all three every day.
func agedLog(end time.Time) string {
	var b strings.Builder
	for d := 40; d >= 0; d-- {
		day := end.Add(-time.Duration(d) * 24 * time.Hour)
		b.WriteString(squidLine(day, "10.99.1.2", "TCP_TUNNEL", 200, "CONNECT", "api.lab.test:443", "agent/1"))
		b.WriteString(squidLine(day.Add(time.Minute), "10.99.1.3", "TCP_TUNNEL", 200, "CONNECT", "api.lab.test:443", "agent/1"))
		if d > 35 {
			b.WriteString(squidLine(day.Add(2*time.Minute), "10.99.1.2", "TCP_TUNNEL", 200, "CONNECT", "git.lab.test:443", "git/2.39"))
		}
		for _, h := range []string{"api.lab.test:443", "git.lab.test:443", "x.objects.lab.test:443"} {
			b.WriteString(squidLine(day.Add(3*time.Minute), "10.99.1.9", "TCP_TUNNEL", 200, "CONNECT", h, "sandprobe/1.0 nonce=n"+fmt.Sprint(d)))
		}
		b.WriteString(squidLine(day.Add(4*time.Minute), "10.99.1.3", "TCP_DENIED", 403, "CONNECT", "pastebin.com:443", "curl/8"))
		b.WriteString(squidLine(day.Add(5*time.Minute), "10.99.1.3", "TCP_DENIED", 403, "CONNECT", "pastebin.com:443", "curl/8"))
	}
	return b.String()
}

func TestUsageAgedLog(t *testing.T) {
	end := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	p := loadPolicy(t,
		`{host: api.lab.test, port: 443, reason: "the model API"}`,
		`{host: git.lab.test, port: 443, reason: "git fetch for the migration of 2024"}`,
		`{host: "*.objects.lab.test", port: 443, reason: "release assets", probe: x.objects.lab.test}`,
	)
	u, fs := judgeFile(t, p, agedLog(end), 30)
	api := find(fs, CheckUnused, "api.lab.test:443")
	if api == nil || api.Status != report.Pass {
		t.Fatalf("api.lab.test: %+v", api)
	}
	if a := u.Allowances[0]; a.Requests != 82 || a.SandboxCount != 2 || a.BytesOut != 82*120 || !a.LastUse.Equal(end.Add(time.Minute)) {
		t.Errorf("api usage: %+v", a)
	}
	git := find(fs, CheckUnused, "git.lab.test:443")
	if git == nil || git.Status != report.Fail || !strings.Contains(git.Fix, `the reason says "git fetch for the migration of 2024"`) || !strings.Contains(git.Actual, "last used") {
		t.Errorf("git.lab.test: %+v", git)
	}
	obj := find(fs, CheckUnused, "*.objects.lab.test:443")
	if obj == nil || obj.Status != report.Fail || !strings.Contains(obj.Actual, "no request in the 40 days") || !strings.Contains(obj.Fix, `"release assets"`) {
		t.Errorf("objects: %+v", obj)
	}
	if u.ProbeRecords != 41*3 {
		t.Errorf("probe records %d, want %d (left out)", u.ProbeRecords, 41*3)
	}
	if len(u.Denied) != 1 || u.Denied[0].Host != "pastebin.com" || u.Denied[0].Count != 82 || u.Denied[0].Sandbox != "10.99.1.3" {
		t.Errorf("denied: %+v", u.Denied)
	}
	if wb := find(fs, CheckWouldBlock, ""); wb == nil || wb.Status != report.Pass {
		t.Errorf("would-block: %+v", wb)
	}
	// The same allowance on a record of ten days is not unused for 30.
	u, fs = judgeFile(t, p, agedLog(end)[len(agedLog(end))*3/4:], 30)
	if f := find(fs, CheckUnused, "*.objects.lab.test:443"); f == nil || f.Status != report.Inconclusive {
		t.Errorf("short record: %+v (window %s to %s)", f, u.From, u.To)
	}
}

// The audit stage: under a narrowed policy, exactly what was reached and
// is no longer allowed is listed, per sandbox, with first and last seen;
// denied attempts and the probe's own are not.
func TestWouldBlock(t *testing.T) {
	end := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	narrowed := loadPolicy(t, `{host: api.lab.test, port: 443, reason: "the model API"}`)
	u, fs := judgeFile(t, narrowed, agedLog(end), 30)
	var got []string
	for _, f := range fs {
		if f.Check == CheckWouldBlock {
			if f.Status != report.Fail {
				t.Errorf("would-block %s: %s", f.Subject, f.Status)
			}
			got = append(got, f.Target+" "+f.Subject)
		}
	}
	if strings.Join(got, ",") != "sandbox/10.99.1.2 git.lab.test:443" {
		t.Errorf("would block %v", got)
	}
	if w := u.WouldBlock[0]; w.Count != 5 || !w.First.Equal(end.Add(-40*24*time.Hour+2*time.Minute)) || !w.Last.Equal(end.Add(-36*24*time.Hour+2*time.Minute)) {
		t.Errorf("would-block entry %+v", w)
	}
}

func TestRiskyWildcard(t *testing.T) {
	for _, h := range []string{"*", "*.github.io", "*.s3.amazonaws.com", "*.githubusercontent.com", "*.azurewebsites.net", "*.herokuapp.com", "*.vercel.app", "*.amazonaws.com", "*.blob.core.windows.net", "*.com", "*.co.uk", "*.cloudfront.net", "*.pages.dev"} {
		if RiskyWildcard(h) == "" {
			t.Errorf("%s: not named risky", h)
		}
	}
	for _, h := range []string{"*.github.com", "*.myorg.github.io", "*.lab.test", "api.github.io", "*.anthropic.com", "github.io"} {
		if why := RiskyWildcard(h); why != "" {
			t.Errorf("%s: %s", h, why)
		}
	}
	p := loadPolicy(t, `{host: "*.github.io", port: 443, reason: "docs an agent once read"}`, `{host: "*.corp.test", port: 443, reason: "our own services"}`)
	_, fs := judgeFile(t, p, agedLog(time.Now()), 30)
	f := find(fs, CheckWildcard, "*.github.io:443")
	if f == nil || f.Status != report.Fail || !strings.Contains(f.Fix, `the reason says "docs an agent once read"`) {
		t.Errorf("*.github.io: %+v", f)
	}
	if f := find(fs, CheckWildcard, "*.corp.test:443"); f == nil || f.Status != report.Pass {
		t.Errorf("*.corp.test: %+v", f)
	}
}

// Every worker's tally merges into the same counts as one.
func TestTallyMerge(t *testing.T) {
	log := agedLog(time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC))
	var counts []string
	for _, workers := range []int{1, 4} {
		path := filepath.Join(t.TempDir(), "a.log")
		os.WriteFile(path, []byte(log), 0o644)
		tally, _, err := Read(context.Background(), []Source{FileSource(path, egresslog.FormatSquid, nil)}, workers)
		if err != nil {
			t.Fatal(err)
		}
		n := int64(0)
		tally.each(func(e entry) { n += e.count })
		counts = append(counts, fmt.Sprintf("%d keys %d records %d probe", tally.keys.n, n, tally.probe))
	}
	if counts[0] != counts[1] {
		t.Errorf("1 worker: %s; 4 workers: %s", counts[0], counts[1])
	}
}

// Flows to the declared proxy and resolver are the allowed path: a
// narrowed policy does not "block" them.
func TestWouldBlockSkipsTheProxyPath(t *testing.T) {
	p := loadPolicy(t, `{host: api.lab.test, port: 443, reason: "the model API"}`)
	p.Spec.Egress.ProxyLocation = &policy.Location{CIDRs: []string{"10.99.31.28/32"}}
	flows := `{"flow":{"time":"2026-12-02T05:31:40Z","verdict":"FORWARDED","IP":{"source":"10.0.1.5","destination":"10.99.31.28"},"l4":{"TCP":{"destination_port":3128,"flags":{"SYN":true}}},"source":{"namespace":"sandboxes","pod_name":"agent-7"},"traffic_direction":"EGRESS"}}
{"flow":{"time":"2026-12-02T05:31:41Z","verdict":"FORWARDED","IP":{"source":"10.0.1.5","destination":"203.0.113.9"},"l4":{"TCP":{"destination_port":443,"flags":{"SYN":true}}},"source":{"namespace":"sandboxes","pod_name":"agent-7"},"destination_names":["pastebin.com"],"traffic_direction":"EGRESS"}}
`
	u, _ := judgeFile(t, p, flows, 30)
	if len(u.WouldBlock) != 1 || u.WouldBlock[0].Host != "pastebin.com" || u.WouldBlock[0].Sandbox != "sandboxes/agent-7" {
		t.Errorf("would block %+v, want pastebin.com from sandboxes/agent-7 only", u.WouldBlock)
	}
}
