package probes

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// egress.udp: a sandbox whose TCP is closed may still have UDP out — a
// rule widened for HTTP/3, a policy that lists only TCP ports — and QUIC
// carries HTTPS over it. A UDP send proves nothing by itself (nothing comes
// back from a datagram that got through to a port nobody serves), so the
// probe sends what a QUIC server must answer: a long-header packet of
// 1,200 bytes (the least a server reads as a new connection) with a
// reserved version, which every QUIC server answers with a Version
// Negotiation packet (RFC 9000 §6, RFC 8999). Any datagram back is an
// answer; an ICMP error a refusal; silence a timeout, proven only where
// the control vantage got an answer from the same address, and not
// applicable where nothing answers the control either (most hosts speak
// no QUIC: that is nothing to keep the sandbox from).
const (
	checkUDP = "egress.udp"
	// OpUDP sends the QUIC probe to each address of Host on Port/udp.
	OpUDP = "udp"
	// QUICPort is where QUIC (HTTP/3) listens.
	QUICPort = 443
	// quicProbeSize is the datagram's size: RFC 9000 §14.1's minimum for a
	// client's first packet, below which a server may drop it unanswered.
	quicProbeSize = 1200
	// udpSuffix ends the subjects: "blocked.example:443/udp".
	udpSuffix = "/udp"
)

// quicGreaseVersion follows RFC 9000 §15's reserved pattern 0x?a?a?a?a:
// no server supports it, so each answers with Version Negotiation.
const quicGreaseVersion = 0x1a2a3a4a

// planUDP is the QUIC probe to every direct must-fail destination (hosts
// and IPs, each on 443/udp) and, with a proxy, to each allowed host's own
// addresses: HTTP/3 straight to an allowed host goes around the proxy as
// surely as a direct TCP connection does.
func planUDP(e policy.Egress, concrete []policy.Allowance) []Attempt {
	var plan []Attempt
	seen := map[string]bool{}
	add := func(host string, addrs []string) {
		sub := hostPort(host, QUICPort) + udpSuffix
		if seen[sub] {
			return
		}
		seen[sub] = true
		plan = append(plan, Attempt{Check: checkUDP, Subject: sub, Host: host, Port: QUICPort, Op: OpUDP, AllAddrs: true, Addresses: addrs})
	}
	for _, t := range slices.Concat(e.MustFail.Hosts, e.MustFail.IPs) {
		if host, _, ok := t.Dial(); ok {
			add(host, t.Addresses)
		}
	}
	if e.Proxy != "" {
		for _, a := range concrete {
			add(a.Host, a.Addresses)
		}
	}
	return plan
}

// quicProbe is the datagram: a QUIC long header (fixed bit set, type
// Initial) with the reserved version, random 8-byte connection IDs, and
// padding up to quicProbeSize carrying the probe's agent string with the
// run's nonce (a packet capture or a server's log can tell the probe's).
func quicProbe(agent string) []byte {
	b := make([]byte, 0, quicProbeSize)
	ids := make([]byte, 16)
	rand.Read(ids)
	b = append(b, 0xc0|ids[0]&0x0f)
	b = binary.BigEndian.AppendUint32(b, quicGreaseVersion)
	b = append(b, 8)
	b = append(b, ids[:8]...)
	b = append(b, 8)
	b = append(b, ids[8:]...)
	b = append(b, agent...)
	return append(b, make([]byte, quicProbeSize-len(b))...)
}

// tryUDP sends the QUIC probe to every address of the attempt's host.
func (c *NetClient) tryUDP(ctx context.Context, a Attempt) Result {
	addrs, err := c.lookup(ctx, a.Host)
	var dns outcome
	if err != nil {
		dns = classify(err)
		if len(a.Addresses) == 0 {
			r := failed(dns)
			r.Unresolved = true
			return r
		}
	}
	resolved := slices.Clone(addrs)
	for _, k := range a.Addresses {
		if !slices.Contains(addrs, k) {
			addrs = append(addrs, k)
		}
	}
	r := c.sendAll(ctx, a, addrs)
	if err != nil {
		r.Detail = dns.detail + "; the declared addresses: " + r.Detail
		r.Evidence.Rcode, r.Evidence.Resolver = dns.rcode, dns.resolver
	}
	if c.keepResolved && net.ParseIP(a.Host) == nil {
		r.Evidence.Resolved = resolved
	}
	return r
}

// sendAll sends the probe to each address at once; an answer from any is
// the attempt's answer, else the first address's outcome stands.
func (c *NetClient) sendAll(ctx context.Context, a Attempt, addrs []string) Result {
	type sent struct {
		o    outcome
		info string
		took time.Duration
	}
	res := make([]sent, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			t0 := time.Now()
			o, info := c.sendQUIC(ctx, addr, a.Port)
			res[i] = sent{o: o, info: info, took: time.Since(t0)}
		})
	}
	wg.Wait()
	out := Result{}
	var parts []string
	for i, s := range res {
		parts = append(parts, net.JoinHostPort(addrs[i], strconv.Itoa(a.Port))+"/udp: "+s.info)
		if s.o.class == policy.VerdictAnswered {
			out.Answered = append(out.Answered, addrs[i])
		}
		if len(addrs) > 1 {
			out.Evidence.Addresses = append(out.Evidence.Addresses, result.AddressAttempt{
				Address: addrs[i], Class: s.o.class, Errno: s.o.errno, Signal: s.o.signal, Waited: s.took.Seconds()})
		}
	}
	out.Detail = strings.Join(parts, "; ")
	out.Class = res[0].o.class
	res[0].o.fill(&out.Evidence)
	if len(out.Answered) > 0 {
		out.Class = policy.VerdictAnswered
		out.Evidence.Errno, out.Evidence.Signal, out.Evidence.StoppedBy = "", "", ""
	}
	return out
}

// sendQUIC sends the probe to one address and waits, until the attempt's
// deadline, for a datagram back (an answer) or an ICMP error (a refusal,
// read back on the connected socket).
func (c *NetClient) sendQUIC(ctx context.Context, addr string, port int) (outcome, string) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", net.JoinHostPort(addr, strconv.Itoa(port)))
	if err != nil {
		o := classify(err)
		return o, o.detail
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	if _, err := conn.Write(quicProbe(c.agent)); err != nil {
		o := classify(err)
		return o, o.detail
	}
	buf := make([]byte, 1500)
	n, err := conn.Read(buf)
	if err != nil {
		o := classify(err)
		if o.class == policy.VerdictTimeout {
			o.detail = "no datagram back within the timeout (dropped, or nothing serves QUIC there)"
		}
		return o, o.detail
	}
	if b := buf[:n]; n >= 7 && b[0]&0x80 != 0 && binary.BigEndian.Uint32(b[1:5]) == 0 {
		var vs []string
		if off := 6 + int(b[5]); off < n {
			off += 1 + int(b[off])
			for ; off+4 <= n; off += 4 {
				vs = append(vs, fmt.Sprintf("%#x", binary.BigEndian.Uint32(b[off:off+4])))
			}
		}
		return outcome{class: policy.VerdictAnswered}, "QUIC version negotiation (" + strings.Join(vs, ", ") + ")"
	}
	return outcome{class: policy.VerdictAnswered}, fmt.Sprintf("a %d-byte datagram back", n)
}
