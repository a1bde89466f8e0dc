package probes

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandprobe/sandprobe/policy"
)

// attemptResult is one network attempt, classified.
type attemptResult struct {
	Class    string // a policy.Verdict* value
	Detail   string // what happened, in words (errno, status line, TLS version)
	Took     time.Duration
	Answered []string // addresses that answered (for multi-address targets)
}

// netClient dials from inside the sandbox: directly, or through the declared
// forward proxy, optionally completing a TLS handshake.
type netClient struct {
	resolver *net.Resolver
	proxy    *url.URL
	roots    *x509.CertPool
}

func newNetClient(e policy.Egress) (*netClient, error) {
	c := &netClient{resolver: &net.Resolver{PreferGo: true}}
	if e.Proxy != "" {
		u, err := url.Parse(e.Proxy)
		if err != nil {
			return nil, fmt.Errorf("proxy %q: %w", e.Proxy, err)
		}
		c.proxy = u
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if e.CAFile != "" {
		pem, err := os.ReadFile(e.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file %s: %w", e.CAFile, err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", e.CAFile)
		}
	}
	c.roots = roots
	return c, nil
}

// errProxyDenied is a proxy refusing a destination (CONNECT 403, 407, …).
type errProxyDenied struct{ status string }

func (e *errProxyDenied) Error() string { return "the proxy refused: " + e.status }

// errProxyUpstream is a proxy that accepted the request but could not reach
// the destination (5xx): the destination did not answer.
type errProxyUpstream struct{ status string }

func (e *errProxyUpstream) Error() string { return "the proxy could not reach it: " + e.status }

// lookup resolves a name to every address (A and AAAA).
func (c *netClient) lookup(ctx context.Context, host string) ([]string, error) {
	if ip := net.ParseIP(host); ip != nil {
		return []string{host}, nil
	}
	addrs, err := c.resolver.LookupHost(ctx, host)
	if err != nil {
		return nil, err
	}
	return addrs, nil
}

// dialAddr connects TCP to one address (no resolution).
func (c *netClient) dialAddr(ctx context.Context, addr string, port int) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
}

// viaProxy asks the proxy for host:port — CONNECT for TLS and unknown
// schemes, an absolute-URL GET for plain HTTP — and returns the tunnel (for
// CONNECT) or nil (for GET, whose answer is the proof).
func (c *netClient) viaProxy(ctx context.Context, host string, port int, scheme string) (net.Conn, string, error) {
	pport, _ := strconv.Atoi(c.proxy.Port())
	addrs, err := c.lookup(ctx, c.proxy.Hostname())
	if err != nil {
		return nil, "", fmt.Errorf("resolve proxy %s: %w", c.proxy.Hostname(), err)
	}
	conn, err := c.dialAddr(ctx, addrs[0], pport)
	if err != nil {
		return nil, "", fmt.Errorf("connect to proxy %s: %w", c.proxy.Host, err)
	}
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	target := net.JoinHostPort(host, strconv.Itoa(port))
	var req string
	if scheme == "http" {
		req = fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\nUser-Agent: sandprobe\r\nConnection: close\r\n\r\n", target, target)
	} else {
		req = fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: sandprobe\r\n\r\n", target, target)
	}
	if _, err := conn.Write([]byte(req)); err != nil {
		conn.Close()
		return nil, "", fmt.Errorf("write to proxy: %w", err)
	}
	method := "CONNECT"
	if scheme == "http" {
		method = "GET"
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		conn.Close()
		return nil, "", fmt.Errorf("read proxy answer: %w", err)
	}
	status := fmt.Sprintf("%s %s → %s", method, target, resp.Status)
	switch {
	case method == "CONNECT" && resp.StatusCode == http.StatusOK:
		conn.SetDeadline(time.Time{})
		return conn, status, nil
	case method == "GET" && resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusProxyAuthRequired && resp.StatusCode < 500:
		conn.Close()
		return nil, status, nil // the origin answered through the proxy
	case resp.StatusCode == http.StatusForbidden, resp.StatusCode == http.StatusProxyAuthRequired, resp.StatusCode == http.StatusMethodNotAllowed:
		conn.Close()
		return nil, status, &errProxyDenied{status: resp.Status}
	}
	conn.Close()
	return nil, status, &errProxyUpstream{status: resp.Status}
}

// handshake completes TLS with the name and reports the version and issuer.
func (c *netClient) handshake(ctx context.Context, conn net.Conn, host string) (string, error) {
	tc := tls.Client(conn, &tls.Config{ServerName: host, RootCAs: c.roots, MinVersion: tls.VersionTLS12})
	if err := tc.HandshakeContext(ctx); err != nil {
		return "", fmt.Errorf("TLS handshake with %s: %w", host, err)
	}
	st := tc.ConnectionState()
	detail := fmt.Sprintf("TLS %s with %s", tls.VersionName(st.Version), host)
	if len(st.PeerCertificates) > 0 {
		detail += fmt.Sprintf(" (issuer %q)", st.PeerCertificates[0].Issuer.CommonName)
	}
	tc.Close()
	return detail, nil
}

// classify maps an attempt's error to a verdict class and a short detail.
func classify(err error) (string, string) {
	if err == nil {
		return policy.VerdictAnswered, ""
	}
	var pd *errProxyDenied
	if errors.As(err, &pd) {
		return policy.VerdictProxyDenied, err.Error()
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		switch {
		case dnsErr.IsNotFound:
			return policy.VerdictNXDomain, "NXDOMAIN: " + dnsErr.Name
		case dnsErr.IsTimeout:
			return policy.VerdictDNSTimeout, "no DNS answer for " + dnsErr.Name + " in time"
		}
		return policy.VerdictError, "DNS: " + dnsErr.Err + " for " + dnsErr.Name
	}
	var pu *errProxyUpstream
	if errors.As(err, &pu) {
		return policy.VerdictError, err.Error()
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ECONNREFUSED:
			return policy.VerdictRefused, "ECONNREFUSED (reset or ICMP port-unreachable)"
		case syscall.EHOSTUNREACH:
			return policy.VerdictRefused, "EHOSTUNREACH (ICMP host-unreachable or admin-prohibited)"
		case syscall.ENETUNREACH:
			return policy.VerdictRefused, "ENETUNREACH (ICMP net-unreachable or no route)"
		case syscall.EACCES, syscall.EPERM:
			return policy.VerdictRefused, fmt.Sprintf("%s (administratively prohibited)", errnoName(errno))
		case syscall.ETIMEDOUT:
			return policy.VerdictTimeout, "ETIMEDOUT (no answer: dropped)"
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return policy.VerdictTimeout, "no answer before the deadline (dropped)"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return policy.VerdictTimeout, "no answer before the deadline (dropped)"
	}
	return policy.VerdictError, strings.TrimSpace(err.Error())
}
