package probes

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// selfSigned is a certificate for name that nobody trusts: a
// TLS-intercepting proxy's own, as Squid's ssl-bump without minting.
func selfSigned(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// bumpProxy is a TLS-intercepting forward proxy on loopback: 200 to every
// CONNECT, then TLS with its own certificate, and inside it the answer
// given (a status line and its headers), as Squid's ssl-bump serves its
// refusals.
func bumpProxy(t *testing.T, answer string) string {
	t.Helper()
	cert := selfSigned(t, "proxy.test")
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
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				if req.Method != http.MethodConnect {
					io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nX-Squid-Error: ERR_ACCESS_DENIED 0\r\nContent-Length: 0\r\n\r\n")
					return
				}
				io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
				tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
				if _, err := http.ReadRequest(bufio.NewReader(tc)); err != nil {
					return
				}
				io.WriteString(tc, "HTTP/1.1 "+answer+"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
				tc.Close()
			}()
		}
	}()
	return "http://" + l.Addr().String()
}

// TestUnsignedRefusalInTunnel: a TLS-intercepting proxy answers 200 to
// every CONNECT and refuses inside TLS. Its refusal counts only when it
// signs it (X-Squid-Error, Proxy-Status, or a header the policy declares);
// a bare 403 inside the tunnel cannot be told from the destination's own:
// inconclusive (class intercepted), never a failure — and never a pass.
// A 200 inside the tunnel is the destination answering: a failure.
func TestUnsignedRefusalInTunnel(t *testing.T) {
	dns := newDNSServer(t, zone(dnsmessage.RCodeNameError, nil))
	cases := []struct {
		name, answer, headers string
		want                  result.Status
		class                 string
	}{
		{"Squid's signed refusal", "403 Forbidden\r\nX-Squid-Error: ERR_ACCESS_DENIED 0", "", result.Pass, policy.VerdictProxyDenied},
		{"RFC 9209 Proxy-Status", "403 Forbidden\r\nProxy-Status: corp-proxy; error=destination_ip_prohibited", "", result.Pass, policy.VerdictProxyDenied},
		{"an unsigned 403", "403 Forbidden", "", result.Inconclusive, policy.VerdictIntercepted},
		{"a signature the policy declares", "403 Forbidden\r\nX-Corp-Deny: blocked", "\n    proxyDenyHeaders: [X-Corp-Deny]", result.Pass, policy.VerdictProxyDenied},
		{"a signature the policy does not declare", "403 Forbidden\r\nX-Corp-Deny: blocked", "", result.Inconclusive, policy.VerdictIntercepted},
		{"the destination answers inside the tunnel", "200 OK", "", result.Fail, policy.VerdictAnswered},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := loopbackEgress(t, fmt.Sprintf(`
  egress:
    proxy: %s%s
    mustFail: {hosts: [blocked.test]}
    metadata: {address: 127.0.0.2, port: 9}
    dns: {arbitraryNames: allow}
    timeout: 2s
`, bumpProxy(t, c.answer), c.headers), dns)
			f, ok := fs["egress.must-fail blocked.test:443 via proxy"]
			if !ok || f.Status != c.want || f.Class != c.class {
				t.Fatalf("%s/%s (%s), want %s/%s", f.Status, f.Class, f.Actual, c.want, c.class)
			}
			if f.Status != result.Pass && (f.Fix == "" || f.Attempt == nil || f.Attempt.ProxyStatus == "") {
				t.Errorf("no fix or no evidence of what the proxy said: %+v", f)
			}
		})
	}
}

// blackhole is a loopback listener that accepts every connection and
// closes it at once with no byte sent: a mesh sidecar's BlackHoleCluster,
// a CNI's transparent proxy refusing a destination after the handshake.
func blackhole(t *testing.T) int {
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
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// quiet is a loopback listener that accepts and waits for the client to
// speak (a database, a TLS server on another port): a live destination.
func quiet(t *testing.T) int {
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
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// TestInterceptedIsNoAnswer: a connection accepted and closed at once with
// no byte exchanged is class intercepted — for a must-fail target
// inconclusive, not a failure; for an allowance inconclusive, not a pass —
// whatever the scheme. A live destination gives its proof: a status line,
// a certificate, a banner or a connection that stays open.
func TestInterceptedIsNoAnswer(t *testing.T) {
	bh := blackhole(t)
	web := origin(t)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(tlsSrv.Close)
	tlsPort := tlsSrv.Listener.Addr().(*net.TCPAddr).Port
	open := quiet(t)
	c, err := NewNetClient(policy.Egress{})
	if err != nil {
		t.Fatal(err)
	}
	c.roots.AddCert(tlsSrv.Certificate())
	cases := []struct {
		check, scheme string
		port          int
		class         string
		status        result.Status
	}{
		{checkMustFail, "tcp", bh, policy.VerdictIntercepted, result.Inconclusive},
		{checkMustFail, "http", bh, policy.VerdictIntercepted, result.Inconclusive},
		{checkMustFail, "https", bh, policy.VerdictIntercepted, result.Inconclusive},
		{checkMetadata, "http", bh, policy.VerdictIntercepted, result.Inconclusive},
		{checkAllowed, "http", bh, policy.VerdictIntercepted, result.Inconclusive},
		{checkAllowed, "https", bh, policy.VerdictIntercepted, result.Inconclusive},
		{checkAllowed, "tcp", bh, policy.VerdictIntercepted, result.Inconclusive},
		// Live destinations.
		{checkMustFail, "tcp", open, policy.VerdictAnswered, result.Fail},
		{checkMustFail, "http", web, policy.VerdictAnswered, result.Fail},
		{checkMustFail, "https", tlsPort, policy.VerdictAnswered, result.Fail},
		{checkAllowed, "http", web, policy.VerdictAnswered, result.Pass},
		{checkAllowed, "https", tlsPort, policy.VerdictAnswered, result.Pass},
		{checkAllowed, "tcp", open, policy.VerdictAnswered, result.Pass},
	}
	for _, tc := range cases {
		a := Attempt{Check: tc.check, Subject: fmt.Sprintf("%s %d", tc.scheme, tc.port), Host: "127.0.0.1", Port: tc.port, Scheme: tc.scheme, AllAddrs: tc.check != checkAllowed}
		r := c.RunAttempts(context.Background(), []Attempt{a}, RunOptions{Concurrency: 1, Timeout: 2 * time.Second})[0]
		f := judge(a, r, policy.Egress{})
		if r.Class != tc.class || f.Status != tc.status {
			t.Errorf("%s %s: %s → %s (%s), want %s → %s", tc.check, a.Subject, r.Class, f.Status, r.Detail, tc.class, tc.status)
		}
		if f.Status == result.Inconclusive && (f.Fix == "" || !strings.Contains(f.Actual, "intercepted")) {
			t.Errorf("%s %s: %q / %q", tc.check, a.Subject, f.Actual, f.Fix)
		}
	}
}

// httpAnswer serves one fixed HTTP response on loopback to every request:
// the status line and headers given, an empty body.
func httpAnswer(t *testing.T, head string) int {
	t.Helper()
	return serveConns(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			io.WriteString(c, "HTTP/1.1 "+head+"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
		}
	})
}

// TestEnvoyLocalReply: an Envoy sidecar that routes only to known
// services (Istio's REGISTRY_ONLY) answers a plain-HTTP request for any
// other host with its BlackHoleCluster's 502, signed server: envoy, no
// upstream reached: for a must-fail target that is intercepted —
// inconclusive, not the false alarm of an "answer" — and for an allowance
// no pass. The mesh broken the way meshes break (ALLOW_ANY: the request
// goes out, the upstream's answer carries Envoy's upstream time) fails
// the must-fail target; a site served by Envoy is an answer.
func TestEnvoyLocalReply(t *testing.T) {
	blackholed := httpAnswer(t, "502 Bad Gateway\r\nserver: envoy\r\ndate: Thu, 03 Dec 2026 06:00:00 GMT")
	noUpstream := httpAnswer(t, "503 Service Unavailable\r\nServer: envoy\r\ncontent-type: text/plain")
	allowAny := httpAnswer(t, "200 OK\r\nserver: envoy\r\nx-envoy-upstream-service-time: 14")
	upstream502 := httpAnswer(t, "502 Bad Gateway\r\nserver: envoy\r\nx-envoy-upstream-service-time: 3")
	servedByEnvoy := httpAnswer(t, "301 Moved Permanently\r\nserver: envoy\r\nlocation: https://example.test/")
	otherGateway := httpAnswer(t, "502 Bad Gateway\r\nserver: nginx")
	c, err := NewNetClient(policy.Egress{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		check  string
		port   int
		class  string
		status result.Status
	}{
		{"REGISTRY_ONLY blackhole, must-fail", checkMustFail, blackholed, policy.VerdictIntercepted, result.Inconclusive},
		{"REGISTRY_ONLY blackhole, metadata", checkMetadata, blackholed, policy.VerdictIntercepted, result.Inconclusive},
		{"no healthy upstream, must-fail", checkMustFail, noUpstream, policy.VerdictIntercepted, result.Inconclusive},
		{"REGISTRY_ONLY blackhole, allowance", checkAllowed, blackholed, policy.VerdictIntercepted, result.Inconclusive},
		{"ALLOW_ANY, must-fail", checkMustFail, allowAny, policy.VerdictAnswered, result.Fail},
		{"ALLOW_ANY, the upstream's own 502", checkMustFail, upstream502, policy.VerdictAnswered, result.Fail},
		{"a site served by Envoy", checkMustFail, servedByEnvoy, policy.VerdictAnswered, result.Fail},
		{"another gateway's 502", checkMustFail, otherGateway, policy.VerdictAnswered, result.Fail},
		{"ALLOW_ANY, allowance", checkAllowed, allowAny, policy.VerdictAnswered, result.Pass},
	} {
		a := Attempt{Check: tc.check, Subject: fmt.Sprintf("http %d", tc.port), Host: "127.0.0.1", Port: tc.port, Scheme: "http", AllAddrs: tc.check != checkAllowed}
		r := c.RunAttempts(context.Background(), []Attempt{a}, RunOptions{Concurrency: 1, Timeout: 2 * time.Second})[0]
		f := judge(a, r, policy.Egress{})
		if r.Class != tc.class || f.Status != tc.status {
			t.Errorf("%s: %s → %s (%s), want %s → %s", tc.name, r.Class, f.Status, r.Detail, tc.class, tc.status)
		}
		if tc.class == policy.VerdictIntercepted && !strings.Contains(f.Actual, "server: envoy") {
			t.Errorf("%s: %q does not name the evidence", tc.name, f.Actual)
		}
	}
}
