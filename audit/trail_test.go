package audit

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/egresslog"
	"github.com/sandprobe/sandprobe/report"
)

// trailRun is a probe run through the proxy: two allowances (a tunnel and
// a plain GET) and two must-fail hosts the proxy refused.
func trailRun(start time.Time) report.Run {
	att := func(status string) *report.Attempt {
		return &report.Attempt{Attempted: true, Started: 0.2, Waited: 0.01, Timeout: 2, ProxyStatus: status}
	}
	return report.Run{StartedAt: start, Findings: []report.Finding{
		{Check: "egress.allowed", Role: report.RoleAllowance, Target: "local/sp-sandbox", Subject: "api.lab.test:443 via proxy", Status: report.Pass, Class: "answered", Attempt: att("CONNECT api.lab.test:443 → 200 Connection established")},
		{Check: "egress.allowed", Role: report.RoleAllowance, Target: "local/sp-sandbox", Subject: "api.lab.test:80 via proxy", Status: report.Pass, Class: "answered", Attempt: att("GET api.lab.test:80 → 200 OK")},
		{Check: "egress.must-fail", Role: report.RoleMustFail, Target: "local/sp-sandbox", Subject: "blocked.lab.test:443 via proxy", Status: report.Pass, Class: "proxy-denied", Attempt: att("403 Filtered")}, // a refusal keeps only the status
		{Check: "egress.must-fail", Role: report.RoleMustFail, Target: "local/sp-sandbox", Subject: "exfil.lab.test:443 via proxy", Status: report.Pass, Class: "proxy-denied", Attempt: att("CONNECT exfil.lab.test:443 → 200 Connection established; then inside TLS: 403 Forbidden (X-Squid-Error: ERR_ACCESS_DENIED 0)")},
		{Check: "egress.must-fail", Role: report.RoleMustFail, Target: "local/sp-sandbox", Subject: "10.99.20.10:443", Status: report.Pass, Class: "timeout", Attempt: &report.Attempt{Attempted: true}},
	}}
}

func scanTrail(t *testing.T, log string, attempts []TrailAttempt) []TrailRecord {
	t.Helper()
	sinks, _, err := egresslog.Scan(context.Background(), strings.NewReader(log), egresslog.Options{Reference: time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)}, NewTrailSinks(attempts))
	if err != nil {
		t.Fatal(err)
	}
	return TrailRecords(sinks)
}

func TestTrail(t *testing.T) {
	start := time.Date(2026, 12, 2, 5, 31, 40, 0, time.UTC)
	run := trailRun(start)
	attempts := TrailAttempts(run, []int{403, 407})
	if len(attempts) != 4 {
		t.Fatalf("%d attempts through the proxy, want 4: %+v", len(attempts), attempts)
	}
	opt := TrailOptions{Nonce: "n0nce", From: start, To: start.Add(3 * time.Second), Source: "access.log"}
	sq := func(sec int, tag, method, url, ua string) string {
		hier := "HIER_DIRECT/10.99.10.10"
		if strings.HasPrefix(tag, "NONE") || strings.Contains(tag, "DENIED") {
			hier = "HIER_NONE/-"
		}
		return strconv.Itoa(1796189500+sec) + ".100      1 10.99.1.2 " + tag + " 100 " + method + " " + url + " - " + hier + " - 50 \"" + ua + "\"\n"
	}
	ua := "sandprobe/1.0 nonce=n0nce"
	// Squid peeking at a tunnel it splices: NONE_NONE/200 with the
	// User-Agent, then TCP_TUNNEL/200 without it when the tunnel closes.
	healthy := sq(0, "NONE_NONE/200", "CONNECT", "api.lab.test:443", ua) +
		sq(0, "TCP_TUNNEL/200", "CONNECT", "api.lab.test:443", "-") +
		sq(0, "TCP_MISS/200", "GET", "http://api.lab.test/", ua) +
		sq(1, "TCP_DENIED/403", "CONNECT", "blocked.lab.test:443", ua) +
		sq(1, "NONE_NONE/200", "CONNECT", "exfil.lab.test:443", ua) +
		sq(1, "TCP_DENIED/403", "GET", "https://exfil.lab.test/", ua) +
		// another sandbox, same destination, same time: not the probe's
		sq(1, "TCP_TUNNEL/200", "CONNECT", "blocked.lab.test:443", "curl/8")
	for _, tc := range []struct {
		name   string
		log    string
		err    error
		want   map[string]report.Status
		actual string
	}{
		{"healthy", healthy, nil, map[string]report.Status{"api.lab.test:443 via proxy": report.Pass, "api.lab.test:80 via proxy": report.Pass, "blocked.lab.test:443 via proxy": report.Pass, "exfil.lab.test:443 via proxy": report.Pass}, ""},
		{"logging off: only another sandbox's line", sq(1, "TCP_TUNNEL/200", "CONNECT", "blocked.lab.test:443", "curl/8"), nil, map[string]report.Status{"api.lab.test:443 via proxy": report.Fail, "blocked.lab.test:443 via proxy": report.Fail}, "no record of it in access.log"},
		{"must-fail recorded allowed", strings.Replace(healthy, "TCP_DENIED/403 100 CONNECT blocked", "TCP_TUNNEL/200 100 CONNECT blocked", 1), nil, map[string]report.Status{"blocked.lab.test:443 via proxy": report.Fail, "api.lab.test:443 via proxy": report.Pass}, "must-fail blocked.lab.test:443 ALLOWED"},
		{"allowed recorded denied", strings.Replace(strings.Replace(healthy, "TCP_TUNNEL/200 100 CONNECT api", "TCP_DENIED/403 100 CONNECT api", 1), "HIER_DIRECT/10.99.10.10 - 50 \"-\"", "HIER_NONE/- - 50 \"-\"", 1), nil, map[string]report.Status{"api.lab.test:443 via proxy": report.Fail}, "the proxy's record says denied where the probe saw allowed"},
		{"rotated", healthy, errors.New("access.log was rotated during the run (inode 12 became 13)"), map[string]report.Status{"api.lab.test:443 via proxy": report.Inconclusive, "exfil.lab.test:443 via proxy": report.Inconclusive}, "rotated during the run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := Trail(attempts, scanTrail(t, tc.log, attempts), opt, tc.err)
			if len(fs) != 4 {
				t.Fatalf("%d findings, want one per attempt: %+v", len(fs), fs)
			}
			for _, f := range fs {
				if want, ok := tc.want[f.Subject]; ok && f.Status != want {
					t.Errorf("%s: %s (%s), want %s", f.Subject, f.Status, f.Actual, want)
				}
				if f.Status != report.Pass && tc.actual != "" && !strings.Contains(f.Actual, tc.actual) && tc.want[f.Subject] == f.Status {
					t.Errorf("%s: %q lacks %q", f.Subject, f.Actual, tc.actual)
				}
			}
		})
	}
}

// tinyproxy keeps no header: the probe's attempts are found by
// destination, method and time, and a host it never wrote down is missing.
func TestTrailTinyproxy(t *testing.T) {
	start := time.Date(2026, 12, 2, 5, 31, 40, 0, time.UTC)
	attempts := TrailAttempts(trailRun(start), []int{403, 407})[:3]
	log := `CONNECT   Dec 02 05:31:40.100 [1]: Connect (file descriptor 5): 10.99.1.2
CONNECT   Dec 02 05:31:40.101 [1]: Request (file descriptor 5): CONNECT api.lab.test:443 HTTP/1.1
CONNECT   Dec 02 05:31:40.102 [1]: Established connection to host "api.lab.test" using file descriptor 8.
CONNECT   Dec 02 05:31:40.110 [1]: Connect (file descriptor 6): 10.99.1.2
CONNECT   Dec 02 05:31:40.111 [1]: Request (file descriptor 6): GET http://api.lab.test/ HTTP/1.1
CONNECT   Dec 02 05:31:40.112 [1]: Established connection to host "api.lab.test" using file descriptor 9.
`
	opt := TrailOptions{Nonce: "n0nce", From: start, To: start.Add(3 * time.Second), Source: "tinyproxy.log", Client: "10.99.1.2"}
	fs := Trail(attempts, scanTrail(t, log, attempts), opt, nil)
	got := map[string]report.Status{}
	for _, f := range fs {
		got[f.Subject] = f.Status
		if f.Status == report.Pass && !strings.Contains(f.Actual, "by destination, method and time") {
			t.Errorf("%s: %s", f.Subject, f.Actual)
		}
	}
	if got["api.lab.test:443 via proxy"] != report.Pass || got["api.lab.test:80 via proxy"] != report.Pass || got["blocked.lab.test:443 via proxy"] != report.Fail {
		t.Errorf("got %v", got)
	}
}
