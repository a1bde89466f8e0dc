package probes

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsAnswer is what the loopback DNS server says to one question.
type dnsAnswer struct {
	rcode dnsmessage.RCode
	addrs []netip.Addr
}

// dnsServer is a loopback DNS server (UDP and TCP on one port) that answers
// every question with answer(name) and logs each name it was asked, the way
// the lab's authority does. Unit tests point the probe's resolver at it, so
// no test ever asks the host's resolver.
type dnsServer struct {
	addr   string
	answer func(name string) dnsAnswer
	mu     sync.Mutex
	log    []string
	// silentAfter, when set, is how many questions it answers before it
	// goes silent (a deny that lands after the first queries).
	silentAfter int
}

func (s *dnsServer) goSilentAfter(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.silentAfter = n
}

func (s *dnsServer) queries() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.log...)
}

func newDNSServer(t *testing.T, answer func(name string) dnsAnswer) *dnsServer {
	t.Helper()
	var pc net.PacketConn
	var l net.Listener
	for range 20 { // a UDP port whose TCP twin is free too
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if l, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil {
		t.Fatal("no UDP+TCP port pair free on loopback")
	}
	t.Cleanup(func() { pc.Close(); l.Close() })
	s := &dnsServer{addr: pc.LocalAddr().String(), answer: answer}
	reply := s.reply
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if out := reply(buf[:n]); out != nil {
				pc.WriteTo(out, from)
			}
		}
	}()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					var n uint16
					if err := binary.Read(c, binary.BigEndian, &n); err != nil {
						return
					}
					req := make([]byte, n)
					if _, err := io.ReadFull(c, req); err != nil {
						return
					}
					out := reply(req)
					if out == nil {
						return
					}
					c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(out))))
					c.Write(out)
				}
			}()
		}
	}()
	return s
}

// reply answers one query as answer says, and logs the name asked; nil
// for a query it cannot read.
func (s *dnsServer) reply(req []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	name := strings.TrimSuffix(q.Name.String(), ".")
	s.mu.Lock()
	s.log = append(s.log, name)
	silent := s.silentAfter > 0 && len(s.log) > s.silentAfter
	s.mu.Unlock()
	if silent {
		return nil
	}
	a := s.answer(name)
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RCode: a.rcode})
	b.EnableCompression()
	b.StartQuestions()
	b.Question(q)
	b.StartAnswers()
	for _, ip := range a.addrs {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}
		switch {
		case ip.Is4() && q.Type == dnsmessage.TypeA:
			b.AResource(rh, dnsmessage.AResource{A: ip.As4()})
		case ip.Is6() && q.Type == dnsmessage.TypeAAAA:
			b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: ip.As16()})
		}
	}
	out, _ := b.Finish()
	return out
}

// zone answers the names it holds and says rcode to every other.
func zone(rcode dnsmessage.RCode, names map[string][]netip.Addr) func(string) dnsAnswer {
	return func(name string) dnsAnswer {
		if a, ok := names[name]; ok {
			return dnsAnswer{rcode: dnsmessage.RCodeSuccess, addrs: a}
		}
		return dnsAnswer{rcode: rcode}
	}
}
