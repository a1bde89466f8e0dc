package local_test

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// frontingPolicy is the lab's policy with fronting tested, not accepted,
// and one more must-fail name: fronted.lab.test, which the api front
// (sp-api) serves under its certificate but the proxy must not allow.
func frontingPolicy(t *testing.T) []byte {
	t.Helper()
	var out []string
	for _, line := range strings.Split(string(labPolicy(t)), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "fronting:") {
			continue
		}
		out = append(out, line)
		if strings.TrimSpace(line) == "hosts:" {
			out = append(out,
				"        - target: fronted.lab.test                      # served by the api front; not allowed",
				"          expect: refused",
				"          addresses: [10.99.10.10, \"fd99:0:0:10::10\"]")
		}
	}
	doc := []byte(strings.Join(out, "\n"))
	if bytes.Equal(doc, labPolicy(t)) || !bytes.Contains(doc, []byte("fronted.lab.test")) {
		t.Fatal("fixtures/lab-policy.yaml changed shape: no fronting line or no mustFail hosts")
	}
	return doc
}

// TestLabFronting: domain fronting through the proxy, against both of the
// lab's proxies. tinyproxy filters on the CONNECT host alone: every
// ClientHello for a must-fail name in a tunnel opened for an allowed HTTPS
// host reaches the front, so egress.sni-mismatch fails, and every other
// egress check still passes. Squid (ssl_bump peek, splice an SNI ACL,
// terminate the rest) cuts each such tunnel: everything passes, each
// fronting deny proven by the control asking the front directly. With the
// fronts down, or the probe unable to verify the front's TLS, nothing was
// tested: inconclusive under either proxy, never a pass.
func TestLabFronting(t *testing.T) {
	script := testenv.Lab(t)
	if _, err := exec.LookPath("squid"); err != nil {
		testenv.Missing(t, "the lab's squid flavour needs squid (hack/install-deps.sh installs squid-openssl)")
	}
	doc := frontingPolicy(t)
	const subject = "fronted.lab.test via api.lab.test:443"
	for _, c := range []struct {
		proxy string
		want  report.Status
	}{
		{"tinyproxy", report.Fail},
		{"squid", report.Pass},
	} {
		t.Run(c.proxy, func(t *testing.T) {
			labCmd(t, script, "proxy", c.proxy)
			run := labRun(t, doc)
			fs := egressOnly(run)
			sni := 0
			for name, f := range fs {
				if f.Check != "egress.sni-mismatch" {
					if f.Status != report.Pass {
						t.Errorf("%s: %s — %s", name, f.Status, report.ExpectedActual(f))
					}
					continue
				}
				sni++
				if f.Status != c.want {
					t.Errorf("%s: %s, want %s — %s (%s)", name, f.Status, c.want, report.ExpectedActual(f), f.Evidence)
					continue
				}
				ev := f.Attempt
				if ev == nil || !ev.Attempted || !strings.Contains(ev.ProxyStatus, "200") || !strings.Contains(ev.ProxyStatus, "verified") {
					t.Errorf("%s: the evidence does not show both tunnels opened and the front verified first: %+v", name, ev)
				}
				switch c.want {
				case report.Fail:
					if f.Class != policy.VerdictAnswered || !strings.Contains(f.Actual, "fronted") || !strings.Contains(f.Fix, "ssl_bump") {
						t.Errorf("%s: %s %q fix %q", name, f.Class, f.Actual, f.Fix)
					}
				case report.Pass:
					if f.Class != policy.VerdictProxyDenied || ev == nil || ev.StoppedBy != report.StoppedByProxy {
						t.Errorf("%s: %s, stopped by %q", name, f.Class, stoppedBy(f))
					}
					// Squid's terminate closes the tunnel quietly: a deny
					// only because sp-control, asking the front directly
					// for the same name, got an answer.
					if f.Deny != report.DenyProven || f.Control != policy.VerdictAnswered {
						t.Errorf("%s: deny %q control %q, want proven by an answer (%s)", name, f.Deny, f.Control, f.Evidence)
					}
				}
			}
			// Three HTTPS allowances through the proxy, three must-fail names.
			if sni != 9 {
				t.Errorf("%d egress.sni-mismatch findings, want 9: %v", sni, names(run.Findings))
			}
			f := fs["egress.sni-mismatch "+subject]
			t.Logf("%s %s: %s | %s", c.proxy, subject, f.Status, f.Actual)
			if c.want == report.Fail && !strings.Contains(f.Actual, "valid for it") {
				t.Errorf("the front's certificate for fronted.lab.test is not in the evidence: %s", f.Actual)
			}
			// Squid serves its refusal of a denied CONNECT inside TLS: the
			// must-fail hosts still pass, on the proxy's own word.
			if f := fs["egress.must-fail blocked.lab.test:443 via proxy"]; f.Class != policy.VerdictProxyDenied || f.Attempt == nil || !strings.Contains(f.Attempt.ProxyStatus, "403") {
				t.Errorf("blocked.lab.test via proxy: %s %s (%+v)", f.Status, f.Class, f.Attempt)
			}
		})
	}
	// Nothing to front through: the front is down, or its TLS cannot be
	// verified (no lab CA). Inconclusive, whichever proxy.
	noCA := bytes.Replace(doc, []byte("    caFile: /run/sandprobe-lab/ca.pem\n"), nil, 1)
	for _, c := range []struct {
		name, proxy string
		broken      []string
		doc         []byte
	}{
		{"tinyproxy, fronts down", "tinyproxy", []string{"allowed-down"}, doc},
		{"squid, fronts down", "squid", []string{"allowed-down"}, doc},
		{"tinyproxy, front's TLS not verifiable", "tinyproxy", nil, noCA},
	} {
		t.Run(c.name, func(t *testing.T) {
			labCmd(t, script, "proxy", c.proxy)
			if c.broken != nil {
				labCmd(t, script, append([]string{"break"}, c.broken...)...)
			}
			defer labCmd(t, script, "heal")
			run := labRun(t, c.doc)
			n := 0
			for name, f := range egressOnly(run) {
				if f.Check != "egress.sni-mismatch" {
					continue
				}
				n++
				if f.Status != report.Inconclusive || !strings.Contains(f.Actual, "nothing was tested") {
					t.Errorf("%s: %s — %s", name, f.Status, f.Actual)
				}
			}
			if n != 9 {
				t.Errorf("%d egress.sni-mismatch findings, want 9", n)
			}
		})
	}
}
