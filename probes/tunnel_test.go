package probes

import (
	"bufio"
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
