package probes

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sandprobe/sandprobe/result"
)

// silentPort is a listener that accepts and never says a word: what a
// half-open path or a sidecar that swallows connections looks like.
func silentPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// TestInClusterPeer: a broker declared with a location is dialled
// directly by its Service name (never through the proxy, which refuses
// everything here) and passes only on an application answer. A broker
// denied by a podSelector typo, or a path that only accepts, is no pass.
func TestInClusterPeer(t *testing.T) {
	const broker = "model-broker.factory.svc.cluster.local"
	dns := newDNSServer(t, zone(dnsmessage.RCodeNameError, map[string][]netip.Addr{broker: {netip.MustParseAddr("127.0.0.1")}}))
	proxy := testProxy(t, nil, func(string) string { return "403 Filtered" })
	cases := []struct {
		name   string
		port   int
		want   result.Status
		actual string
	}{
		{"the broker answers HTTP", origin(t), result.Pass, "answered"},
		{"the broker's pods denied (a podSelector typo)", closedPort(t), result.Fail, "refused"},
		{"accepted, never answered", silentPort(t), result.Inconclusive, "intercepted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := loopbackEgress(t, fmt.Sprintf(`
  egress:
    proxy: %s
    allow:
      - {host: %s, port: %d, reason: r, location: {namespace: factory, podSelector: {matchLabels: {app: model-broker}}, ports: [8080]}}
    metadata: {address: 127.0.0.2, port: %d}
    dns: {arbitraryNames: allow}
    timeout: 1s
`, proxy, broker, c.port, c.port), dns)
			sub := fmt.Sprintf("egress.allowed %s:%d in-cluster", broker, c.port)
			f, ok := fs[sub]
			if !ok {
				t.Fatalf("no %q finding: %v", sub, fs)
			}
			if f.Status != c.want || !strings.Contains(f.Actual, c.actual) {
				t.Errorf("%s %q, want %s containing %q", f.Status, f.Actual, c.want, c.actual)
			}
			if c.want == result.Pass && !strings.Contains(f.Evidence, "HTTP") {
				t.Errorf("a pass without the application's answer in evidence: %q", f.Evidence)
			}
			if c.want != result.Pass && f.Fix == "" {
				t.Errorf("no fix: %+v", f)
			}
			for name := range fs {
				if strings.Contains(name, broker) && name != sub {
					t.Errorf("the broker was also tried as %q: an in-cluster peer is dialled directly, once", name)
				}
			}
		})
	}
}
