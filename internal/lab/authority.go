package lab

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/sourcegraph/conc"
	"golang.org/x/net/dns/dnsmessage"
)

// Authority is the lab's stand-in for the internet's DNS: it answers its
// records, every name under a wildcard zone, NXDOMAIN for any other name,
// and writes down every question ("proto client qtype name rcode") so a
// test can see which names left.
type Authority struct {
	Records   map[string][]netip.Addr // name (lower case, no trailing dot) -> addresses
	Wildcards map[string][]netip.Addr // zone -> addresses of every name under it
	Log       io.Writer
	mu        sync.Mutex
}

func (a *Authority) lookup(name string) ([]netip.Addr, bool) {
	if addrs, ok := a.Records[name]; ok {
		return addrs, true
	}
	for zone, addrs := range a.Wildcards {
		if strings.HasSuffix(name, "."+zone) {
			return addrs, true
		}
	}
	return nil, false
}

// Answer builds the reply to one query; nil when it is not one question.
func (a *Authority) Answer(req []byte, proto, client string) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil
	}
	q := qs[0]
	name := strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))
	addrs, known := a.lookup(name)
	rcode := dnsmessage.RCodeSuccess
	if !known {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true,
		RecursionDesired: h.RecursionDesired, RCode: rcode})
	b.EnableCompression()
	b.StartQuestions()
	b.Question(q)
	b.StartAnswers()
	rh := dnsmessage.ResourceHeader{Name: q.Name, Type: q.Type, Class: dnsmessage.ClassINET, TTL: 30}
	for _, ad := range addrs {
		switch {
		case ad.Is4() && q.Type == dnsmessage.TypeA:
			b.AResource(rh, dnsmessage.AResource{A: ad.As4()})
		case ad.Is6() && q.Type == dnsmessage.TypeAAAA:
			b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: ad.As16()})
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	a.log(proto, client, q.Type, name, known)
	return out
}

func (a *Authority) log(proto, client string, qtype dnsmessage.Type, name string, known bool) {
	if a.Log == nil {
		return
	}
	qt := fmt.Sprint(uint16(qtype))
	switch qtype {
	case dnsmessage.TypeA:
		qt = "A"
	case dnsmessage.TypeAAAA:
		qt = "AAAA"
	}
	rc := "NOERROR"
	if !known {
		rc = "NXDOMAIN"
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	fmt.Fprintf(a.Log, "%s %s %s %s %s\n", proto, client, qt, name, rc)
}

// ServeUDP answers on one UDP socket (one per address, so an answer comes
// from the address the question went to) until it is closed.
func (a *Authority) ServeUDP(pc net.PacketConn) error {
	buf := make([]byte, 4096)
	for {
		n, peer, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		if out := a.Answer(buf[:n], "udp", normAddr(peer.String())); out != nil {
			pc.WriteTo(out, peer)
		}
	}
}

// ServeTCP answers length-prefixed queries on every connection of ln until
// ln is closed.
func (a *Authority) ServeTCP(ln net.Listener) error {
	var wg conc.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		wg.Go(func() { a.serveConn(c) })
	}
}

func (a *Authority) serveConn(c net.Conn) {
	defer c.Close()
	for {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		req := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		out := a.Answer(req, "tcp", normAddr(c.RemoteAddr().String()))
		if out == nil {
			return
		}
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)); err != nil {
			return
		}
	}
}
