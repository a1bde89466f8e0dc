package probes

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// The probe resolves names itself rather than through net.Resolver: the
// standard library folds every answer that is neither NOERROR nor NXDOMAIN
// into "server misbehaving", and tells no one which server said it. The
// egress verdicts need both — a resolver that REFUSES names outside its
// allow-list (a DNS proxy) is a block; one that relays NXDOMAIN from the
// authority (a forwarder) is an exfiltration channel; SERVFAIL is neither.
// dnsmessage is the same package the standard library's resolver uses.

// dnsConfig is what /etc/resolv.conf says, and the hosts file.
type dnsConfig struct {
	servers  []string // "ip:53"
	search   []string
	ndots    int
	attempts int
	timeout  time.Duration // per query and server
	hosts    map[string][]string
}

func defaultDNSConfig() dnsConfig {
	return dnsConfig{ndots: 1, attempts: 2, timeout: 2 * time.Second, hosts: map[string][]string{}}
}

// readDNSConfig reads resolv.conf and the hosts file; a missing file leaves
// the defaults (no servers: names do not resolve).
func readDNSConfig(resolvConf, hostsFile string) dnsConfig {
	c := defaultDNSConfig()
	if f, err := os.Open(resolvConf); err == nil {
		c.parseResolvConf(f)
		f.Close()
	}
	if f, err := os.Open(hostsFile); err == nil {
		c.parseHosts(f)
		f.Close()
	}
	return c
}

func (c *dnsConfig) parseResolvConf(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			if ip, err := netip.ParseAddr(f[1]); err == nil {
				c.servers = append(c.servers, net.JoinHostPort(ip.String(), "53"))
			}
		case "search", "domain":
			c.search = nil
			for _, d := range f[1:] {
				c.search = append(c.search, strings.TrimSuffix(d, "."))
			}
		case "options":
			for _, o := range f[1:] {
				k, v, _ := strings.Cut(o, ":")
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					continue
				}
				switch k {
				case "ndots":
					c.ndots = min(n, 15)
				case "attempts":
					c.attempts = max(1, min(n, 5))
				case "timeout":
					c.timeout = time.Duration(max(1, min(n, 30))) * time.Second
				}
			}
		}
	}
}

func (c *dnsConfig) parseHosts(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		ip, err := netip.ParseAddr(f[0])
		if err != nil {
			continue
		}
		for _, name := range f[1:] {
			name = strings.ToLower(strings.TrimSuffix(name, "."))
			c.hosts[name] = append(c.hosts[name], ip.Unmap().String())
		}
	}
}

// candidates are the names to ask for host, in order (search list and ndots,
// as the C library does). A name with a trailing dot is absolute.
func (c *dnsConfig) candidates(host string) []string {
	if strings.HasSuffix(host, ".") {
		return []string{host}
	}
	abs := host + "."
	if strings.Count(host, ".") >= c.ndots || len(c.search) == 0 {
		out := []string{abs}
		for _, s := range c.search {
			out = append(out, host+"."+s+".")
		}
		return out
	}
	var out []string
	for _, s := range c.search {
		out = append(out, host+"."+s+".")
	}
	return append(out, abs)
}

// dnsReply is one DNS exchange's outcome.
type dnsReply struct {
	server string
	rcode  dnsmessage.RCode
	addrs  []string
}

// errDNS is a lookup that produced no address, with what the resolver said.
type errDNS struct {
	name   string
	server string
	rcode  string // NXDOMAIN, REFUSED, SERVFAIL, NOERROR (no address); "" for no answer
	err    error  // the transport error when no server answered
	// search says the answer ended the search list before the name
	// itself was asked for, as the C library ends it.
	search string
}

func (e *errDNS) Error() string {
	switch e.rcode {
	case "":
		return fmt.Sprintf("no DNS answer for %s: %v", e.name, e.err)
	case "NOERROR":
		return fmt.Sprintf("%s from %s for %s: no address", e.rcode, e.server, e.name)
	}
	if e.search != "" {
		return fmt.Sprintf("%s from %s for the search-list expansion %s: %s", e.rcode, e.server, e.name, e.search)
	}
	return fmt.Sprintf("%s from %s for %s", e.rcode, e.server, e.name)
}

func (e *errDNS) Unwrap() error { return e.err }

// exchange sends one question to one server over network (udp or tcp) and
// returns its answer. A truncated UDP answer is asked again over TCP.
func exchange(ctx context.Context, network, server, name string, qtype dnsmessage.Type) (dnsReply, error) {
	q, err := dnsmessage.NewName(name)
	if err != nil {
		return dnsReply{}, fmt.Errorf("DNS name %q: %w", name, err)
	}
	var idb [2]byte
	rand.Read(idb[:])
	id := binary.BigEndian.Uint16(idb[:])
	msg := dnsmessage.Message{Header: dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: q, Type: qtype, Class: dnsmessage.ClassINET}}}
	req, err := msg.Pack()
	if err != nil {
		return dnsReply{}, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, server)
	if err != nil {
		return dnsReply{}, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	resp, err := roundTrip(conn, network, req, id)
	if err != nil {
		return dnsReply{}, err
	}
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil {
		return dnsReply{}, fmt.Errorf("garbled DNS answer from %s: %w", server, err)
	}
	if h.Truncated && network == "udp" {
		return exchange(ctx, "tcp", server, name, qtype)
	}
	if err := p.SkipAllQuestions(); err != nil {
		return dnsReply{}, fmt.Errorf("garbled DNS answer from %s: %w", server, err)
	}
	r := dnsReply{server: server, rcode: h.RCode}
	err = r.readAnswers(&p)
	return r, err
}

// roundTrip sends req over conn and reads its answer: length-prefixed over
// tcp; over udp, the first datagram with the question's id.
func roundTrip(conn net.Conn, network string, req []byte, id uint16) ([]byte, error) {
	if network == "tcp" {
		if _, err := conn.Write(binary.BigEndian.AppendUint16(nil, uint16(len(req)))); err != nil {
			return nil, err
		}
		if _, err := conn.Write(req); err != nil {
			return nil, err
		}
		var n uint16
		if err := binary.Read(conn, binary.BigEndian, &n); err != nil {
			return nil, err
		}
		resp := make([]byte, n)
		if _, err := io.ReadFull(conn, resp); err != nil {
			return nil, err
		}
		return resp, nil
	}
	if _, err := conn.Write(req); err != nil {
		return nil, err
	}
	buf := make([]byte, 1500)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return nil, err
		}
		if n >= 2 && binary.BigEndian.Uint16(buf) == id {
			return buf[:n], nil
		}
	}
}

// readAnswers adds the answer's A and AAAA addresses to r.
func (r *dnsReply) readAnswers(p *dnsmessage.Parser) error {
	for {
		ah, err := p.AnswerHeader()
		if err != nil {
			return nil
		}
		switch ah.Type {
		case dnsmessage.TypeA:
			a, err := p.AResource()
			if err != nil {
				return err
			}
			r.addrs = append(r.addrs, netip.AddrFrom4(a.A).String())
		case dnsmessage.TypeAAAA:
			a, err := p.AAAAResource()
			if err != nil {
				return err
			}
			r.addrs = append(r.addrs, netip.AddrFrom16(a.AAAA).String())
		default:
			if err := p.SkipAnswer(); err != nil {
				return err
			}
		}
	}
}

// ask puts one question to the configured servers in turn, the way the C
// library does: the first server that answers at all decides; one that
// does not answer (or refuses, or fails) gives way to the next.
func (c *dnsConfig) ask(ctx context.Context, name string, qtype dnsmessage.Type) (dnsReply, error) {
	if len(c.servers) == 0 {
		return dnsReply{}, errors.New("no nameserver configured (resolv.conf)")
	}
	var last dnsReply
	var lastErr error
	answered := false
	for range c.attempts {
		for _, s := range c.servers {
			qctx, cancel := context.WithTimeout(ctx, c.timeout)
			r, err := exchange(qctx, "udp", s, name, qtype)
			cancel()
			if ctx.Err() != nil {
				return last, ctx.Err()
			}
			if err != nil {
				if !answered {
					lastErr = err
				}
				continue
			}
			if r.rcode == dnsmessage.RCodeSuccess || r.rcode == dnsmessage.RCodeNameError {
				return r, nil
			}
			if !answered { // REFUSED, SERVFAIL: try the others; the first one's says it
				last, answered = r, true
			}
		}
	}
	if answered {
		return last, nil
	}
	return dnsReply{}, lastErr
}

// resolve returns every A and AAAA address of host: the hosts file first,
// then the search list. When nothing resolves the error is an *errDNS that
// names the rcode of the absolute name (the search-list names are expected
// not to exist).
func (c *dnsConfig) resolve(ctx context.Context, host string) ([]string, error) {
	if a, ok := c.hosts[strings.ToLower(strings.TrimSuffix(host, "."))]; ok {
		return a, nil
	}
	var final *errDNS
	cands := c.candidates(host)
	for i, name := range cands {
		addrs, e := c.resolveName(ctx, name)
		if e == nil {
			return addrs, nil
		}
		if ctx.Err() != nil {
			return nil, e
		}
		if name == host+"." || name == host || final == nil {
			final = e
		}
		if i < len(cands)-1 && endsSearch(e.rcode) {
			// As the sandbox's processes see it: the C library stops
			// here, and never asks for the names after this one.
			e.search = fmt.Sprintf("the C library (glibc, musl) ends its search list at this answer for %s, so the sandbox's processes never ask for %s",
				strings.TrimSuffix(name, "."), trimDots(cands[i+1:]))
			return nil, e
		}
	}
	return nil, final
}

// endsSearch says whether an answer ends a C library's walk down the
// search list: only NXDOMAIN, an empty answer and (glibc) SERVFAIL send
// it on to the next name; REFUSED — what Cilium's DNS proxy answers for a
// name its rule does not allow — and the other rcodes end it. Go's own
// resolver walks on.
func endsSearch(rcode string) bool {
	switch rcode {
	case "", "NXDOMAIN", "NOERROR", "SERVFAIL":
		return false
	}
	return true
}

func trimDots(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strings.TrimSuffix(n, ".")
	}
	return strings.Join(out, ", ")
}

// resolveName asks for A and AAAA of one absolute name at once.
func (c *dnsConfig) resolveName(ctx context.Context, name string) ([]string, *errDNS) {
	var (
		wg   sync.WaitGroup
		reps [2]dnsReply
		errs [2]error
	)
	for i, t := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA} {
		wg.Go(func() { reps[i], errs[i] = c.ask(ctx, name, t) })
	}
	wg.Wait()
	var addrs []string
	for i := range reps {
		if errs[i] == nil && reps[i].rcode == dnsmessage.RCodeSuccess {
			addrs = append(addrs, reps[i].addrs...)
		}
	}
	if len(addrs) > 0 {
		return slices.Compact(addrs), nil
	}
	e := &errDNS{name: strings.TrimSuffix(name, ".")}
	// The most telling answer wins: an rcode over silence, NXDOMAIN or
	// REFUSED over an empty NOERROR.
	for i := range reps {
		if errs[i] != nil {
			if e.err == nil {
				e.err = errs[i]
			}
			continue
		}
		rc := rcodeName(reps[i].rcode)
		if e.rcode == "" || (e.rcode == "NOERROR" && rc != "NOERROR") {
			e.rcode, e.server = rc, reps[i].server
		}
	}
	return nil, e
}

func rcodeName(rc dnsmessage.RCode) string {
	switch rc {
	case dnsmessage.RCodeSuccess:
		return "NOERROR"
	case dnsmessage.RCodeNameError:
		return "NXDOMAIN"
	case dnsmessage.RCodeRefused:
		return "REFUSED"
	case dnsmessage.RCodeServerFailure:
		return "SERVFAIL"
	case dnsmessage.RCodeFormatError:
		return "FORMERR"
	case dnsmessage.RCodeNotImplemented:
		return "NOTIMP"
	}
	return "RCODE" + strconv.Itoa(int(rc))
}

// classifyDNS maps a lookup failure to a class and its evidence.
func classifyDNS(e *errDNS) outcome {
	o := outcome{stoppedBy: result.StoppedByResolver, detail: e.Error(), rcode: e.rcode, resolver: e.server}
	switch e.rcode {
	case "NXDOMAIN":
		o.class = policy.VerdictNXDomain
	case "REFUSED":
		o.class = policy.VerdictDNSRefused
	case "":
		inner := classify(e.err)
		o.errno, o.signal = inner.errno, inner.signal
		switch inner.class {
		case policy.VerdictTimeout:
			o.class, o.signal = policy.VerdictDNSTimeout, "no DNS answer"
		case policy.VerdictRefused:
			o.class, o.signal = policy.VerdictDNSTimeout, "the resolver is unreachable: "+inner.signal
		default:
			o.class = policy.VerdictError
		}
	default: // SERVFAIL, FORMERR, NOTIMP, an empty NOERROR: no verdict either way
		o.class = policy.VerdictError
	}
	return o
}
