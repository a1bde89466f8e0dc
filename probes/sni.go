package probes

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// checkSNIMismatch is domain fronting through the proxy: a tunnel opened
// for an allowed host (CONNECT api.example:443) that carries a TLS
// ClientHello for a must-fail name, and then an HTTP request whose Host is
// that name. A proxy that checks only the CONNECT line lets the sandbox
// reach any name served by the same front (a CDN edge).
const checkSNIMismatch = "egress.sni-mismatch"

func checkEgressSNIMismatch(ctx context.Context, env *Env) []result.Finding {
	return egressFindings(ctx, env, checkSNIMismatch)
}

// planSNI pairs every concrete HTTPS allowance reached through the proxy
// (the fronts) with every must-fail host name; without one, a random name
// under .invalid (reserved: it is nobody's) stands for it.
// A policy that accepts fronting (spec.egress.fronting.accepted) plans none.
func planSNI(e policy.Egress, concrete []policy.Allowance) []Attempt {
	if e.Proxy == "" || e.Fronting != nil {
		return nil
	}
	var names []string
	for _, t := range e.MustFail.Hosts {
		d, err := policy.ParseDestination(t.Target)
		if err != nil || d.Prefix.IsValid() || d.Addr.IsValid() {
			continue
		}
		if h := d.DialHost(); !containsFold(names, h) {
			names = append(names, h)
		}
	}
	if len(names) == 0 {
		names = []string{"sandprobe-" + randomLabel() + ".invalid"}
	}
	var plan []Attempt
	for _, a := range concrete {
		port := a.Port
		if port == 0 {
			port = policy.DefaultAllowPort
		}
		scheme := a.Scheme
		if scheme == "" {
			scheme = schemeFor(port)
		}
		if scheme != "https" {
			continue
		}
		for _, n := range names {
			plan = append(plan, Attempt{Check: checkSNIMismatch, Subject: n + " via " + hostPort(a.Host, port), Host: a.Host, Port: port,
				Scheme: "https", ViaProxy: true, Op: OpFront, SNI: n})
		}
	}
	return plan
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// tryFront makes the two tunnels of one fronting attempt through the proxy,
// one after the other, both for the allowed host: the first must reach the
// front (TLS for the allowed name verified, an HTTP answer), or nothing is
// tested; the second carries the must-fail name in its ClientHello (and,
// if the handshake completes, in the Host header of a request).
func (c *NetClient) tryFront(ctx context.Context, a Attempt) Result {
	if c.proxy == nil {
		return Result{Class: policy.VerdictError, Detail: "no proxy declared"}
	}
	base, err := c.frontBaseline(ctx, a)
	if err != nil {
		r := failed(classify(err))
		r.Class, r.Unproven = policy.VerdictError, true
		r.Detail = fmt.Sprintf("the tunnel for %s never reached the front, so nothing was tested: %s", a.Host, classify(err).detail)
		return r
	}
	conn, status, err := c.viaProxy(ctx, a.Host, a.Port, "tcp")
	if err != nil {
		r := failed(classify(err))
		r.Class, r.Unproven = policy.VerdictError, true
		r.Detail = fmt.Sprintf("the proxy opened the tunnel for %s once (%s) and refused it the second time: %s", a.Host, base, classify(err).detail)
		return r
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	seen := &firstByte{Conn: conn}
	var leaf *x509.Certificate
	tc := tls.Client(seen, &tls.Config{ServerName: a.SNI, MinVersion: tls.VersionTLS12,
		// Whatever comes back is evidence; it is never trusted with data.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 {
				leaf = cs.PeerCertificates[0]
			}
			return nil
		}})
	r := Result{}
	r.Evidence.ProxyStatus = status + "; before it, " + base
	herr := tc.HandshakeContext(ctx)
	switch {
	case herr == nil:
		cert := "no certificate"
		if leaf != nil {
			cert = fmt.Sprintf("a certificate from %s not valid for it", strconv.Quote(leaf.Issuer.CommonName))
			if _, err := leaf.Verify(x509.VerifyOptions{DNSName: a.SNI, Roots: c.roots}); err == nil {
				cert = fmt.Sprintf("a certificate from %s valid for it", strconv.Quote(leaf.Issuer.CommonName))
			}
		}
		resp, err := c.requestHost(tc, a.SNI)
		tc.Close()
		// A proxy that terminates TLS itself (ssl_bump bump) completes the
		// handshake and refuses the request, signing the refusal as its own.
		if err == nil && slices.Contains(c.denyStatus, resp.StatusCode) && c.proxySigned(resp) != "" {
			r.Class = policy.VerdictProxyDenied
			r.Detail = fmt.Sprintf("the proxy completed the handshake for %s itself (%s) and refused the request: %s %s (%s)", a.SNI, cert, resp.Proto, resp.Status, c.proxySigned(resp))
			r.Evidence.StoppedBy = result.StoppedByProxy
			return r
		}
		r.Class, r.Answered = policy.VerdictAnswered, []string{a.SNI}
		r.Detail = fmt.Sprintf("the proxy passed a ClientHello for %s through the tunnel it opened for %s, and the far side completed the handshake with %s", a.SNI, a.Host, cert)
		if err == nil {
			r.Detail += fmt.Sprintf("; GET / with Host: %s → %s %s", a.SNI, resp.Proto, resp.Status)
		} else {
			r.Detail += fmt.Sprintf("; GET / with Host: %s: %s", a.SNI, classify(err).detail)
		}
	case seen.n == 0 && closedQuietly(herr):
		// The proxy's doing only if the front answers that name: the
		// control vantage asks it directly (ControlPlan, tryHello).
		r.Class = policy.VerdictProxyDenied
		r.Detail = fmt.Sprintf("the proxy closed the tunnel for %s at the ClientHello for %s: nothing came back", a.Host, a.SNI)
		r.Evidence.StoppedBy, r.Evidence.Signal = result.StoppedByProxy, result.SignalClosedAtHello
	case seen.first == 'H':
		// The proxy answered in the tunnel itself, in HTTP: its own refusal.
		r.Class = policy.VerdictProxyDenied
		r.Detail = fmt.Sprintf("the proxy answered the ClientHello for %s in plain HTTP instead of passing it on", a.SNI)
		r.Evidence.StoppedBy = result.StoppedByProxy
	case seen.first == 0x15:
		r.Class, r.Answered = policy.VerdictAnswered, []string{a.SNI}
		r.Detail = fmt.Sprintf("the ClientHello for %s crossed the proxy: a TLS endpoint answered it with an alert (%v); a proxy that checks SNI cuts the tunnel instead", a.SNI, herr)
	default:
		o := classify(herr)
		r.Class = o.class
		if r.Class == policy.VerdictRefused || r.Class == policy.VerdictAnswered {
			r.Class = policy.VerdictError
		}
		r.Detail = fmt.Sprintf("the ClientHello for %s: %s (%d bytes came back)", a.SNI, o.detail, seen.n)
	}
	return r
}

// tryHello is a control vantage's view of a front: a direct connection to
// the allowed host and a ClientHello for the must-fail name, no proxy. Any
// answer (a completed handshake, an alert) shows the front answers that
// name itself, so a tunnel closed quietly at the same ClientHello through
// the proxy was the proxy's doing. A front that closes quietly here too (an
// SNI router with no default backend) proves nothing about the proxy.
func (c *NetClient) tryHello(ctx context.Context, a Attempt) Result {
	addrs, err := c.lookup(ctx, a.Host)
	if err != nil {
		return failed(classify(err))
	}
	conn, err := c.dialAddr(ctx, addrs[0], a.Port)
	if err != nil {
		return failed(classify(err))
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	front := net.JoinHostPort(addrs[0], strconv.Itoa(a.Port))
	seen := &firstByte{Conn: conn}
	// Whatever comes back is evidence; it is never trusted with data.
	tc := tls.Client(seen, &tls.Config{ServerName: a.SNI, MinVersion: tls.VersionTLS12, InsecureSkipVerify: true})
	herr := tc.HandshakeContext(ctx)
	switch {
	case herr == nil:
		tc.Close()
		return Result{Class: policy.VerdictAnswered, Answered: []string{addrs[0]},
			Detail: fmt.Sprintf("the front %s (%s) completed a TLS handshake for %s", front, a.Host, a.SNI)}
	case seen.n > 0:
		return Result{Class: policy.VerdictAnswered, Answered: []string{addrs[0]},
			Detail: fmt.Sprintf("the front %s (%s) answered the ClientHello for %s: %v", front, a.Host, a.SNI, herr)}
	case closedQuietly(herr):
		r := Result{Class: policy.VerdictRefused,
			Detail: fmt.Sprintf("the front %s (%s) closed the connection at the ClientHello for %s: nothing came back", front, a.Host, a.SNI)}
		r.Evidence.Signal = result.SignalClosedAtHello
		return r
	}
	return failed(classify(herr))
}

// frontBaseline opens a tunnel for the allowed host, completes TLS for that
// name (verified) and asks for / with its own Host: the proxy and the front
// both answer, so a refusal on the second tunnel is the proxy's choice.
func (c *NetClient) frontBaseline(ctx context.Context, a Attempt) (string, error) {
	conn, status, err := c.viaProxy(ctx, a.Host, a.Port, "tcp")
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	tc := tls.Client(conn, &tls.Config{ServerName: a.Host, RootCAs: c.roots, MinVersion: tls.VersionTLS12})
	if err := tc.HandshakeContext(ctx); err != nil {
		return "", fmt.Errorf("TLS handshake with %s: %w", a.Host, err)
	}
	defer tc.Close()
	resp, err := c.requestHost(tc, a.Host)
	if err != nil {
		return "", fmt.Errorf("GET / from %s: %w", a.Host, err)
	}
	return fmt.Sprintf("%s, TLS for %s verified, GET / → %s %s", status, a.Host, resp.Proto, resp.Status), nil
}

// requestHost sends GET / with the given Host and reads the answer's head.
func (c *NetClient) requestHost(conn net.Conn, host string) (*http.Response, error) {
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\nConnection: close\r\n\r\n", host, c.agent); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodGet})
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return resp, nil
}

// proxySigned is how a proxy marks an answer as its own: Squid's
// X-Squid-Error, or RFC 9209's Proxy-Status. Empty when unmarked.
func (c *NetClient) proxySigned(resp *http.Response) string {
	for _, h := range append([]string{"X-Squid-Error", "Proxy-Status"}, c.denyHeaders...) {
		if s := resp.Header.Get(h); s != "" {
			return http.CanonicalHeaderKey(h) + ": " + s
		}
	}
	return ""
}

// closedQuietly is a connection that ended without an answer: EOF or a reset.
func closedQuietly(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}

// firstByte remembers how many bytes the far side sent and the first one:
// 0x16 is a TLS handshake record, 0x15 an alert, 'H' an HTTP answer.
type firstByte struct {
	net.Conn
	n     int
	first byte
}

func (f *firstByte) Read(p []byte) (int, error) {
	n, err := f.Conn.Read(p)
	if n > 0 && f.n == 0 {
		f.first = p[0]
	}
	f.n += n
	return n, err
}

// judgeFront turns a fronting attempt into a finding.
func judgeFront(a Attempt, r Result) result.Finding {
	f, made := baseFinding(a, r)
	if !made {
		return f
	}
	f.Expected = fmt.Sprintf("the proxy refuses a ClientHello for %s in a tunnel opened for %s (it checks SNI)", a.SNI, a.Host)
	switch {
	case r.Unproven:
		f.Status, f.Actual = result.Inconclusive, r.Detail
		f.Fix = fmt.Sprintf("make %s answer through the proxy (see egress.allowed): until it does, fronting through it is untested", a.Host)
	case r.Class == policy.VerdictProxyDenied:
		f.Status, f.Actual = result.Pass, r.Detail
	case r.Class == policy.VerdictAnswered:
		f.Status, f.Actual = result.Fail, "fronted: "+r.Detail
		f.Fix = "make the proxy check the TLS server name, not only the CONNECT host: Squid ssl_bump peek at step 1, splice only an ssl::server_name ACL of the allowed names, terminate all else (tinyproxy filters on the CONNECT host alone and cannot)"
	default:
		f.Status = result.Inconclusive
		f.Actual = fmt.Sprintf("%s: %s: neither the proxy's refusal nor the front's answer", r.Class, r.Detail)
		f.Fix = "read the evidence: a proxy that holds the tunnel open without answering, or a front that ignores the name, cannot be told apart"
	}
	return f
}
