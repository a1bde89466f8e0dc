package lab

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestServedNamesTheHost: a plain GET and an HTTPS request each get a body
// naming the host, the name asked for and how, and the lab writes it down.
func TestServedNamesTheHost(t *testing.T) {
	var log syncBuf
	s := &Served{Names: map[string]string{"127.0.0.1": "api.lab.test"}, Log: &log}
	plain, secure := listen(t), listen(t)
	go s.ServeHTTP(plain, nil)
	go s.ServeHTTP(secure, &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}})

	if got := Fetch(plain.Addr().String(), 2*time.Second); got != "OK:api.lab.test" {
		t.Errorf("Fetch = %q, want OK:api.lab.test", got)
	}
	c, err := tls.Dial("tcp", secure.Addr().String(), &tls.Config{ServerName: "fronted.lab.test", InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /x HTTP/1.1\r\nHost: api.lab.test\r\n\r\n")
	resp, _ := io.ReadAll(c)
	c.Close()
	if !strings.HasPrefix(string(resp), "HTTP/1.0 200 OK\r\n") || !strings.Contains(string(resp), "X-Lab-Host: api.lab.test\r\n") ||
		!strings.HasSuffix(string(resp), "scheme=https sni=fronted.lab.test hostheader=api.lab.test\n") {
		t.Errorf("HTTPS answer:\n%s", resp)
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[1], " 127.0.0.1 fronted.lab.test "+port(secure)+" https /x") {
		t.Errorf("served log:\n%s", log.String())
	}
}

func port(ln net.Listener) string { _, p, _ := net.SplitHostPort(ln.Addr().String()); return p }

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "t"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"api.lab.test"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestAuthority: records, the wildcard zone and NXDOMAIN, over UDP and
// TCP, and every question in the log.
func TestAuthority(t *testing.T) {
	var log syncBuf
	a := &Authority{
		Records:   map[string][]netip.Addr{"blocked.lab.test": {netip.MustParseAddr("10.99.20.20"), netip.MustParseAddr("fd99:0:0:20::20")}},
		Wildcards: map[string][]netip.Addr{"canary.lab.test": {netip.MustParseAddr("10.99.20.21")}},
		Log:       &log,
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go a.ServeUDP(pc)
	ln := listen(t)
	go a.ServeTCP(ln)
	udpPort := pc.LocalAddr().(*net.UDPAddr).Port
	for _, c := range []struct {
		name string
		qt   dnsmessage.Type
		want string
	}{
		{"blocked.lab.test", dnsmessage.TypeA, "NOERROR 10.99.20.20"},
		{"Blocked.Lab.Test", dnsmessage.TypeAAAA, "NOERROR fd99:0:0:20::20"},
		{"x1.canary.lab.test", dnsmessage.TypeA, "NOERROR 10.99.20.21"},
		{"example.org", dnsmessage.TypeA, "NXDOMAIN"},
	} {
		if got := Query("127.0.0.1", udpPort, c.name, c.qt, 2*time.Second); got != c.want {
			t.Errorf("Query(%s) = %q, want %q", c.name, got, c.want)
		}
	}
	// TCP: one length-prefixed question
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("tcp.canary.lab.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q, _ := b.Finish()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(append([]byte{byte(len(q) >> 8), byte(len(q))}, q...))
	var n [2]byte
	io.ReadFull(c, n[:])
	resp := make([]byte, int(n[0])<<8|int(n[1]))
	io.ReadFull(c, resp)
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil || describe(m) != "NOERROR 10.99.20.21" || m.ID != 7 || !m.Authoritative {
		t.Errorf("TCP answer %v: %v", describe(m), err)
	}
	if got := log.String(); !strings.Contains(got, "udp 127.0.0.1 A example.org NXDOMAIN\n") || !strings.Contains(got, "tcp 127.0.0.1 A tcp.canary.lab.test NOERROR\n") {
		t.Errorf("query log:\n%s", got)
	}
}
