package probes

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/result"
	"github.com/sandprobe/sandprobe/runner"
)

// TestFrontingControl: a tunnel closed quietly at the ClientHello is a
// proxy checking SNI only if the front would have answered that name. The
// way it breaks in the world: a proxy that checks only the CONNECT host
// (tinyproxy) in front of an SNI router with no default backend (HAProxy
// routing on req.ssl_sni), which drops every name it does not route. From
// the sandbox that looks exactly like Squid's terminate; the control
// vantage, asking the front directly, gets the same silence, so the deny
// is unproven and the verdict inconclusive, never a pass. A front that
// serves the name fails the check whatever the control says.
func TestFrontingControl(t *testing.T) {
	for _, c := range []struct {
		name    string
		router  bool // the front drops names it does not serve, saying nothing
		status  result.Status
		deny    string
		control string
	}{
		{"a front serving every name", false, result.Fail, "", ""},
		{"an SNI router with no default backend", true, result.Inconclusive, report.DenyUnproven, "refused"},
	} {
		t.Run(c.name, func(t *testing.T) {
			front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
			front.TLS = &tls.Config{GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
				if c.router && hi.ServerName != "example.com" {
					hi.Conn.Close() // no backend: the connection ends, no alert
					return nil, errors.New("no backend for " + hi.ServerName)
				}
				return nil, nil
			}}
			front.Config.ErrorLog = log.New(io.Discard, "", 0)
			front.StartTLS()
			t.Cleanup(front.Close)
			port := front.Listener.Addr().(*net.TCPAddr).Port
			caFile := filepath.Join(t.TempDir(), "ca.pem")
			if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: front.Certificate().Raw}), 0o644); err != nil {
				t.Fatal(err)
			}
			// Checks the CONNECT line only, as tinyproxy does.
			proxy := testProxy(t, map[string]string{"example.com": "127.0.0.1"}, func(string) string { return "" })
			dns := newDNSServer(t, zone(dnsmessage.RCodeNameError, map[string][]netip.Addr{"example.com": {netip.MustParseAddr("127.0.0.1")}}))
			env := &Env{Policy: mustPolicy(t, fmt.Sprintf(`
  egress:
    proxy: %s
    caFile: %s
    allow: [{host: example.com, port: %d, scheme: https, reason: the front}]
    mustFail: {hosts: [evil.test]}
    dns: {arbitraryNames: allow}
    timeout: 2s
`, proxy, caFile, port)), Nonce: "n", dnsServer: dns.addr}
			subject := fmt.Sprintf("evil.test via example.com:%d", port)
			res := result.ProbeResult{}
			for _, fs := range runEgress(context.Background(), env) {
				res.Findings = append(res.Findings, fs...)
			}
			control := RunControl(context.Background(), env)
			var seen result.Finding
			for _, f := range control.Findings {
				if f.Check == checkSNIMismatch && f.Subject == subject {
					seen = f
				}
			}
			if seen.Status != result.Pass || seen.Attempt == nil || !seen.Attempt.Attempted {
				t.Fatalf("the control did not ask the front directly: %+v (all: %+v)", seen, control.Findings)
			}
			if c.router {
				// What the sandbox alone sees: the proxy's refusal, to all appearances.
				for _, g := range res.Findings {
					if g.Check == checkSNIMismatch && g.Subject == subject && (g.Status != result.Pass || g.Attempt.Signal != result.SignalClosedAtHello) {
						t.Fatalf("the sandbox's own verdict: %s %s %q", g.Status, g.Class, g.Attempt.Signal)
					}
				}
			}
			runner.ApplyControl(&res, runner.NewControl("test/control", control))
			var f result.Finding
			for _, g := range res.Findings {
				if g.Check == checkSNIMismatch && g.Subject == subject {
					f = g
				}
			}
			if f.Status != c.status || f.Deny != c.deny || f.Control != c.control {
				t.Errorf("%s: status %s deny %q control %q, want %s %q %q\n%s\n%s", subject, f.Status, f.Deny, f.Control, c.status, c.deny, c.control, f.Actual, f.Evidence)
			}
		})
	}
}
