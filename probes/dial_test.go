package probes

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sandprobe/sandprobe/result"
)

// agentProxy is a loopback forward proxy that refuses everything (403, as
// tinyproxy's filter does) and records each request's User-Agent.
func agentProxy(t *testing.T) (port int, agents func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	port = serveConns(t, func(c net.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		mu.Lock()
		seen = append(seen, req.Method+" "+req.UserAgent())
		mu.Unlock()
		io.WriteString(c, "HTTP/1.1 403 Filtered\r\nContent-Length: 0\r\n\r\n")
	})
	return port, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// serveConns listens on a loopback port for the test's life and hands
// each connection to handle, closing it after.
func serveConns(t *testing.T, handle func(net.Conn)) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// TestProxyResolvedOncePerRun: the proxy's name is asked for once per run,
// not once per attempt (a run of 12 attempts through a proxy whose name
// walks a search list was a storm of queries that timed out under load),
// and every request through the proxy, CONNECT and plain GET, carries the
// run's nonce in its User-Agent, so the proxy's record names this run.
func TestProxyResolvedOncePerRun(t *testing.T) {
	port, agents := agentProxy(t)
	dns := newDNSServer(t, zone(dnsmessage.RCodeNameError, map[string][]netip.Addr{"proxy.test": loopbackAddr}))
	var hosts []string
	for i := range 10 {
		hosts = append(hosts, fmt.Sprintf("blocked%d.test", i))
	}
	doc := fmt.Sprintf(`
  egress:
    proxy: http://proxy.test:%d
    mustFail: {hosts: [%s, "plain.test:80"]}
    metadata: {address: 127.0.0.2, port: 9}
    dns: {arbitraryNames: allow}
    concurrency: 16
    timeout: 2s
`, port, strings.Join(hosts, ", "))
	env := &Env{Policy: mustPolicy(t, doc), Nonce: "n0nce-42", dnsServer: dns.addr}
	proxied := 0
	for _, fs := range runEgress(context.Background(), env) {
		for _, f := range fs {
			if strings.HasSuffix(f.Subject, " via proxy") {
				proxied++
				if f.Status != result.Pass {
					t.Errorf("%s: %s (%s)", f.Name(), f.Status, f.Actual)
				}
			}
		}
	}
	if proxied != 22 { // 11 must-fail, 10 of them also over plain HTTP, 1 metadata
		t.Fatalf("%d attempts through the proxy, want 22", proxied)
	}
	asked := 0
	for _, q := range dns.queries() {
		if q == "proxy.test" {
			asked++
		}
	}
	if asked != 2 { // A and AAAA, once
		t.Errorf("the proxy's name was asked for %d times in one run, want 2 (A and AAAA once)", asked)
	}
	got := agents()
	methods := map[string]int{}
	for _, a := range got {
		method, agent, _ := strings.Cut(a, " ")
		methods[method]++
		if agent != "sandprobe nonce=n0nce-42" {
			t.Errorf("%s with User-Agent %q, want the run's nonce in it", method, agent)
		}
	}
	if methods["CONNECT"] != 11 || methods["GET"] != 11 {
		t.Errorf("requests %v, want 11 CONNECT and 11 GET", methods)
	}
}
