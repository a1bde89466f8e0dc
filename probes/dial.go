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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// NetClient dials from inside the sandbox (or from a control vantage):
// directly, or through the declared forward proxy, optionally completing a
// TLS handshake.
type NetClient struct {
	dns   dnsConfig
	proxy *url.URL
	roots *x509.CertPool
	// denyStatus are the statuses by which the proxy refuses a destination.
	denyStatus []int
	// denyHeaders sign a refusal the proxy serves inside a tunnel, besides
	// X-Squid-Error and Proxy-Status (spec.egress.proxyDenyHeaders).
	denyHeaders []string
	// agent is the User-Agent of every request the probe sends through the
	// proxy: "sandprobe", and the run's nonce when there is one, so the
	// proxy's record tells this run's attempts from others' (audit/).
	agent string
	// proxyAddrs resolves the proxy's name once per run (see proxyAddrs).
	proxyAddrs proxyResolver
	// keepResolved records in each dial's evidence what its host name
	// resolved to (the control vantage's, for the runner's DNS-only
	// follow-up).
	keepResolved bool
}

// proxyResolver holds the proxy's addresses once resolved. Resolving the
// name per attempt, through the search list, made a DNS storm (names × the
// search list × every attempt at once) whose queries timed out under load.
type proxyResolver struct {
	sem   chan struct{} // a lock that a waiting attempt can give up on
	addrs []string
	err   error // a verdict of the resolver itself (NXDOMAIN, REFUSED): kept too
}

// NewNetClient builds the client the policy's egress section describes: its
// proxy and the CA bundle it trusts besides the system roots.
func NewNetClient(e policy.Egress) (*NetClient, error) {
	c := &NetClient{dns: readDNSConfig("/etc/resolv.conf", "/etc/hosts"), denyStatus: e.ProxyDenyStatuses(), denyHeaders: e.ProxyDenyHeaders, agent: "sandprobe"}
	c.proxyAddrs.sem = make(chan struct{}, 1)
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

// useDNSServer makes the client ask one DNS server for every name, with no
// search list and no hosts file (tests: a loopback server).
func (c *NetClient) useDNSServer(server string) {
	c.dns = defaultDNSConfig()
	c.dns.servers, c.dns.attempts = []string{server}, 1
}

// withNonce marks every request through the proxy with the run's nonce.
func (c *NetClient) withNonce(nonce string) {
	if nonce != "" {
		c.agent = "sandprobe nonce=" + nonce
	}
}

// resolveProxy returns the proxy's addresses, asking the resolver once per
// run: attempts that start together wait for the first one's answer. An
// answer (addresses, or the resolver's own NXDOMAIN or REFUSED) is kept;
// silence is not, so a later attempt asks again.
func (c *NetClient) resolveProxy(ctx context.Context) ([]string, error) {
	r := &c.proxyAddrs
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-r.sem }()
	if r.addrs != nil || r.err != nil {
		return r.addrs, r.err
	}
	addrs, err := c.lookup(ctx, c.proxy.Hostname())
	var own *errDNS
	switch {
	case err == nil:
		r.addrs = addrs
	case errors.As(err, &own) && own.rcode != "":
		r.err = err
	}
	return addrs, err
}

// errProxyDenied is a proxy refusing a destination with its deny status
// (403, 407 or what spec.egress.proxyDenyStatus declares).
type errProxyDenied struct{ status string }

func (e *errProxyDenied) Error() string { return "the proxy refused: " + e.status }

// errProxyUpstream is a proxy that accepted the destination — its
// allow-list let it through — but could not reach it (5xx).
type errProxyUpstream struct{ status string }

func (e *errProxyUpstream) Error() string {
	return "the proxy let it through but could not reach it: " + e.status
}

// errProxyOther is a proxy answer that is neither a tunnel, nor its deny,
// nor an upstream failure (400, 404, 405 …): it proves nothing either way.
type errProxyOther struct{ status string }

func (e *errProxyOther) Error() string {
	return "the proxy answered " + e.status + ", which is not its declared deny status"
}

// lookup resolves a name to every address (A and AAAA).
func (c *NetClient) lookup(ctx context.Context, host string) ([]string, error) {
	if ip := net.ParseIP(host); ip != nil {
		return []string{host}, nil
	}
	return c.dns.resolve(ctx, host)
}

// dialAddr connects TCP to one address (no resolution).
func (c *NetClient) dialAddr(ctx context.Context, addr string, port int) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
}

// viaProxy asks the proxy for host:port — CONNECT for TLS and unknown
// schemes, an absolute-URL GET for plain HTTP — and returns the tunnel (for
// CONNECT) or nil (for GET, whose answer is the proof).
func (c *NetClient) viaProxy(ctx context.Context, host string, port int, scheme string) (net.Conn, string, error) {
	pport, _ := strconv.Atoi(c.proxy.Port())
	addrs, err := c.resolveProxy(ctx)
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
		req = fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\nConnection: close\r\n\r\n", target, target, c.agent)
	} else {
		req = fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\n\r\n", target, target, c.agent)
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
	conn.SetDeadline(time.Time{})
	switch {
	case slices.Contains(c.denyStatus, resp.StatusCode):
		conn.Close()
		return nil, status, &errProxyDenied{status: resp.Status}
	case method == "CONNECT" && resp.StatusCode == http.StatusOK:
		return conn, status, nil
	case resp.StatusCode >= 500:
		conn.Close()
		return nil, status, &errProxyUpstream{status: resp.Status}
	case method == "GET":
		conn.Close()
		return nil, status, nil // the origin answered through the proxy
	}
	conn.Close()
	return nil, status, &errProxyOther{status: resp.Status}
}

// handshake completes TLS with the name and reports the version and issuer.
func (c *NetClient) handshake(ctx context.Context, conn net.Conn, host string) (string, error) {
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

// envoyLocalReply says why an HTTP answer is an Envoy sidecar's own
// gateway error rather than the destination's ("" when it is not): a
// mesh that routes outbound traffic only to known services (Istio's
// outboundTrafficPolicy REGISTRY_ONLY) answers every plain-HTTP request
// for another host with a 502 from its BlackHoleCluster, signed
// `server: envoy`, and no upstream was reached. An answer an upstream gave
// through Envoy (a mesh that lets the request out, ALLOW_ANY) carries
// `x-envoy-upstream-service-time`; a site served by Envoy answers with its
// own status. Either is an answer.
func envoyLocalReply(resp *http.Response) string {
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
	default:
		return ""
	}
	if !strings.EqualFold(resp.Header.Get("Server"), "envoy") || resp.Header.Get("X-Envoy-Upstream-Service-Time") != "" {
		return ""
	}
	return fmt.Sprintf("HTTP: GET / → %s %s from server: envoy with no upstream time (an Envoy local reply)", resp.Proto, resp.Status)
}

// whoAnswered asks a connection that was accepted for application-level
// proof that the destination is what took it: a TLS server certificate
// (https), an HTTP status line (http), or for other ports any byte, or a
// connection that stays open. A mesh sidecar's blackhole or a CNI's
// transparent proxy accepts every connection and closes it at once with
// no byte exchanged: that is intercepted, neither an answer nor a deny.
// An allowance's certificate must verify; a must-fail target's is only
// evidence.
func (c *NetClient) whoAnswered(ctx context.Context, conn net.Conn, a Attempt) (outcome, string) {
	answered := func(info string) (outcome, string) { return outcome{class: policy.VerdictAnswered}, info }
	fb := &firstByte{Conn: conn}
	silent := func(err error) (outcome, string) {
		what := "accepted, then closed with no byte exchanged"
		if !closedQuietly(err) {
			what = "accepted, but nothing came back: " + classify(err).detail
		}
		return outcome{class: policy.VerdictIntercepted, detail: what}, what + ": something in the path (a mesh sidecar, a transparent proxy) took the connection, or the destination"
	}
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	switch a.Scheme {
	case "https":
		// An address as ServerName is verified against the IP SANs, and
		// sent as no SNI.
		cfg := &tls.Config{ServerName: a.Host, RootCAs: c.roots, MinVersion: tls.VersionTLS12}
		if !a.MustAnswer() {
			cfg.InsecureSkipVerify = true // evidence only: nothing is sent after the handshake
		}
		tc := tls.Client(fb, cfg)
		err := tc.HandshakeContext(ctx)
		if err != nil && fb.n == 0 {
			return silent(err)
		}
		if err != nil && a.MustAnswer() {
			e := fmt.Errorf("TLS handshake with %s: %w", a.Host, err)
			return outcome{class: policy.VerdictError, detail: e.Error()}, e.Error()
		}
		if err != nil {
			return answered("a TLS server answered: " + err.Error())
		}
		st := tc.ConnectionState()
		info := fmt.Sprintf("TLS %s with %s", tls.VersionName(st.Version), a.Host)
		if len(st.PeerCertificates) > 0 {
			info += fmt.Sprintf(" (issuer %q)", st.PeerCertificates[0].Issuer.CommonName)
		}
		return answered(info)
	case "http":
		if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\nConnection: close\r\n\r\n", hostPort(a.Host, a.Port), c.agent); err != nil {
			return silent(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(fb), &http.Request{Method: http.MethodGet})
		switch {
		case err != nil && fb.n == 0:
			return silent(err)
		case err != nil:
			return answered(fmt.Sprintf("connected; %d bytes back, not HTTP", fb.n))
		}
		resp.Body.Close()
		if why := envoyLocalReply(resp); why != "" {
			return outcome{class: policy.VerdictIntercepted, detail: why}, why + ": the mesh's sidecar answered for a destination it did not reach"
		}
		return answered(fmt.Sprintf("HTTP: GET / → %s %s", resp.Proto, resp.Status))
	}
	// Another protocol: wait a little for a banner, or for a close.
	wait := 500 * time.Millisecond
	if d, ok := ctx.Deadline(); ok && time.Until(d)/2 < wait {
		wait = time.Until(d) / 2
	}
	conn.SetReadDeadline(time.Now().Add(wait))
	var b [1]byte
	n, err := conn.Read(b[:])
	switch {
	case n > 0:
		return answered("connected; the destination spoke first")
	case err != nil && closedQuietly(err):
		return silent(err)
	}
	return answered(fmt.Sprintf("connected; the connection stayed open %s", wait.Round(time.Millisecond)))
}

// refusedInTunnel looks inside a tunnel the proxy opened (200) for a
// must-fail HTTPS destination. A TLS-bumping proxy (Squid on an ssl-bump
// port) answers 200 to every CONNECT, denied ones too, and serves its
// refusal inside TLS with its own certificate. Only that counts as the
// proxy's refusal: a deny status (spec.egress.proxyDenyStatus) that the
// proxy signs as its own (X-Squid-Error, or RFC 9209's Proxy-Status). A
// bare 403 behind a certificate not valid for the destination is not
// enough: a destination with a self-signed certificate says that too.
// A deny status without a signature cannot be told from the destination's
// own refusal: that is unsigned, neither a deny nor an answer. Anything
// else came from the destination.
func (c *NetClient) refusedInTunnel(ctx context.Context, conn net.Conn, host string) (refused, unsigned bool, detail string) {
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	var leaf *x509.Certificate
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true, // evidence only: nothing is sent but a GET
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 {
				leaf = cs.PeerCertificates[0]
			}
			return nil
		}}
	if net.ParseIP(host) == nil {
		cfg.ServerName = host
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return false, false, "TLS inside the tunnel: " + classify(err).detail
	}
	defer tc.Close()
	valid, issuer := false, ""
	if leaf != nil {
		issuer = leaf.Issuer.CommonName
		_, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: c.roots})
		valid = err == nil
	}
	if _, err := fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\nConnection: close\r\n\r\n", host, c.agent); err != nil {
		return false, false, "TLS inside the tunnel, then " + classify(err).detail
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), &http.Request{Method: http.MethodGet})
	if err != nil {
		return false, false, "TLS inside the tunnel, then " + classify(err).detail
	}
	resp.Body.Close()
	signed := c.proxySigned(resp)
	cert := fmt.Sprintf("a certificate from %q %s for %s", issuer, map[bool]string{true: "valid", false: "not valid"}[valid], host)
	switch {
	case slices.Contains(c.denyStatus, resp.StatusCode) && signed != "":
		return true, false, fmt.Sprintf("the proxy served its refusal inside TLS (%s): %s %s (%s)", cert, resp.Proto, resp.Status, signed)
	case slices.Contains(c.denyStatus, resp.StatusCode):
		return false, true, fmt.Sprintf("TLS inside the tunnel with %s, GET / → %s %s with no proxy signature (X-Squid-Error, Proxy-Status or spec.egress.proxyDenyHeaders): the proxy's refusal or the destination's, it cannot be told", cert, resp.Proto, resp.Status)
	}
	return false, false, fmt.Sprintf("TLS inside the tunnel with %s, GET / → %s %s", cert, resp.Proto, resp.Status)
}

// outcome is a classified error: the verdict class, a short detail, and
// the evidence fields it fills.
type outcome struct {
	class, detail     string
	errno, signal     string
	stoppedBy, status string
	rcode, resolver   string
}

// fill copies the outcome's evidence into an attempt's.
func (o outcome) fill(ev *result.Attempt) {
	ev.Errno, ev.Signal, ev.StoppedBy = o.errno, o.signal, o.stoppedBy
	if o.status != "" {
		ev.ProxyStatus = o.status
	}
	if o.rcode != "" || o.resolver != "" {
		ev.Rcode, ev.Resolver = o.rcode, o.resolver
	}
}

// signals says what each errno of a failed connect means on the wire.
var signals = map[syscall.Errno]string{
	syscall.ECONNREFUSED:  "TCP reset or ICMP port-unreachable",
	syscall.EHOSTUNREACH:  "ICMP host-unreachable (IPv4: also admin-prohibited)",
	syscall.ENETUNREACH:   "ICMP net-unreachable, or no route",
	syscall.EADDRNOTAVAIL: "no source address of this family: the sandbox has no such network",
	syscall.EACCES:        "ICMPv6 admin-prohibited, or a local firewall",
	syscall.EPERM:         "a local firewall refused the packet",
	syscall.ETIMEDOUT:     "no answer: dropped",
}

// classify maps an attempt's error to a verdict class, a short detail and
// who stopped it.
func classify(err error) outcome {
	if err == nil {
		return outcome{class: policy.VerdictAnswered}
	}
	var pd *errProxyDenied
	if errors.As(err, &pd) {
		return outcome{class: policy.VerdictProxyDenied, detail: err.Error(), stoppedBy: result.StoppedByProxy, status: pd.status}
	}
	var own *errDNS
	if errors.As(err, &own) {
		return classifyDNS(own)
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		switch {
		case dnsErr.IsNotFound:
			return outcome{class: policy.VerdictNXDomain, detail: "NXDOMAIN: " + dnsErr.Name, stoppedBy: result.StoppedByResolver}
		case dnsErr.IsTimeout:
			return outcome{class: policy.VerdictDNSTimeout, detail: "no DNS answer for " + dnsErr.Name + " in time", stoppedBy: result.StoppedByResolver, signal: "no DNS answer"}
		}
		return outcome{class: policy.VerdictError, detail: "DNS: " + dnsErr.Err + " for " + dnsErr.Name, stoppedBy: result.StoppedByResolver}
	}
	var pu *errProxyUpstream
	if errors.As(err, &pu) {
		return outcome{class: policy.VerdictProxyForwarded, detail: err.Error(), stoppedBy: result.StoppedByUpstream, status: pu.status}
	}
	var po *errProxyOther
	if errors.As(err, &po) {
		return outcome{class: policy.VerdictError, detail: err.Error(), stoppedBy: result.StoppedByProxy, status: po.status}
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		o := outcome{errno: unix.ErrnoName(errno), signal: signals[errno], stoppedBy: result.StoppedByNetwork}
		switch errno {
		case syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EADDRNOTAVAIL, syscall.EACCES, syscall.EPERM:
			o.class = policy.VerdictRefused
			o.detail = fmt.Sprintf("%s (%s)", o.errno, o.signal)
			return o
		case syscall.ETIMEDOUT:
			o.class, o.detail = policy.VerdictTimeout, "ETIMEDOUT (no answer: dropped)"
			return o
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return timedOut()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return timedOut()
	}
	return outcome{class: policy.VerdictError, detail: strings.TrimSpace(err.Error())}
}

// timedOut is an attempt that got no answer within its own timeout.
func timedOut() outcome {
	return outcome{class: policy.VerdictTimeout, detail: "no answer within the timeout (dropped)",
		errno: "ETIMEDOUT", signal: "no answer: dropped", stoppedBy: result.StoppedByNetwork}
}
