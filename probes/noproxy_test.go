package probes

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sandprobe/sandprobe/result"
)

func TestNoProxyCovers(t *testing.T) {
	cases := []struct {
		env, host string
		port      int
		want      string
	}{
		{"NO_PROXY=*", "blocked.example", 443, "*"},
		{"no_proxy=.example", "blocked.example", 443, ".example"},
		{"NO_PROXY=example", "blocked.example", 443, "example"},
		{"NO_PROXY=*.example", "a.blocked.example", 443, "*.example"},
		{"NO_PROXY=notexample", "blocked.example", 443, ""},
		{"NO_PROXY=10.0.0.0/8,localhost", "10.1.2.3", 443, "10.0.0.0/8"},
		{"NO_PROXY=169.254.169.254", "169.254.169.254", 80, "169.254.169.254"},
		{"NO_PROXY=blocked.example:80", "blocked.example", 443, ""},
		{"NO_PROXY=blocked.example:443", "blocked.example", 443, "blocked.example:443"},
		{"NO_PROXY=fd00::/8", "fd00:ec2::254", 80, "fd00::/8"},
		{"NO_PROXY=localhost,.svc,.cluster.local", "blocked.example", 443, ""},
	}
	for _, c := range cases {
		if got := readNoProxy([]string{"PATH=/bin", c.env}).covers(c.host, c.port); got != c.want {
			t.Errorf("%s: %s:%d covered by %q, want %q", c.env, c.host, c.port, got, c.want)
		}
	}
}

// TestNoProxyReported: NO_PROXY that covers a must-fail host (or is "*")
// sends the sandbox's HTTP clients to it directly, around the proxy: the
// finding says so, without a verdict of its own — the direct deny still
// decides (healthy: closed, a pass that names it; broken: open, a failure
// whose fix names it). A NO_PROXY of cluster names is not reported.
func TestNoProxyReported(t *testing.T) {
	closed := closedPort(t)
	open := origin(t)
	proxy := connectProxy(t, func(string) bool { return false })
	dns := newDNSServer(t, zone(dnsmessage.RCodeNameError, nil))
	doc := fmt.Sprintf(`
  egress:
    proxy: %s
    mustFail: {ips: ["127.0.0.1:%d", "127.0.0.1:%d"]}
    metadata: {address: 127.0.0.3, port: %d}
    dns: {arbitraryNames: allow}
    timeout: 2s
`, proxy, closed, open, closed)
	run := func(environ ...string) map[string]result.Finding {
		env := &Env{Policy: mustPolicy(t, doc), Environ: environ, dnsServer: dns.addr}
		out := map[string]result.Finding{}
		for _, fs := range runEgress(context.Background(), env) {
			for _, f := range fs {
				out[f.Name()] = f
			}
		}
		return out
	}
	closedName, openName := fmt.Sprintf("egress.must-fail 127.0.0.1:%d", closed), fmt.Sprintf("egress.must-fail 127.0.0.1:%d", open)
	fs := run("NO_PROXY=127.0.0.0/8")
	if f := fs[closedName]; f.Status == result.Fail || !strings.Contains(f.Evidence, `NO_PROXY="127.0.0.0/8" covers 127.0.0.1`) {
		t.Errorf("%s: %s, evidence %q", closedName, f.Status, f.Evidence)
	}
	if f := fs[openName]; f.Status != result.Fail || !strings.Contains(f.Fix, "take 127.0.0.1 out of NO_PROXY") {
		t.Errorf("%s: %s, fix %q", openName, f.Status, f.Fix)
	}
	if f := fs[fmt.Sprintf("egress.metadata 127.0.0.3:%d", closed)]; !strings.Contains(f.Evidence, "covers 127.0.0.3") {
		t.Errorf("metadata: evidence %q", f.Evidence)
	}
	if f := fs[closedName+" via proxy"]; strings.Contains(f.Evidence, "NO_PROXY") {
		t.Errorf("the attempt through the proxy names NO_PROXY: %q", f.Evidence)
	}
	for name, f := range run("no_proxy=localhost,.svc,.cluster.local") {
		if strings.Contains(f.Evidence, "no_proxy") {
			t.Errorf("%s: reported a no_proxy that covers no must-fail host: %q", name, f.Evidence)
		}
	}
}
