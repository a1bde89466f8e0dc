package lab

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/sourcegraph/conc"
)

// Served is one lab listener's configuration: what name each of its
// addresses answers as, and where it writes down what it served.
type Served struct {
	Names map[string]string // address (normalised) -> name
	// Log, when set, gets one line per request answered:
	// "time client host port scheme path".
	Log io.Writer
	mu  sync.Mutex
}

// normAddr gives an address the form the lab's tables use: no zone, no
// IPv4-mapped IPv6.
func normAddr(s string) string {
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return s
	}
	return a.WithZone("").Unmap().String()
}

// ServeHTTP answers every connection on ln with one HTTP/1.0 response whose
// body names the host that was reached; with tlsConf it first does the TLS
// handshake (in the connection's own goroutine, so a silent client never
// blocks accepting). It returns when ln is closed.
func (s *Served) ServeHTTP(ln net.Listener, tlsConf *tls.Config) error {
	var wg conc.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		wg.Go(func() { s.answer(c, tlsConf) })
	}
}

func (s *Served) answer(c net.Conn, tlsConf *tls.Config) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	local := normAddr(c.LocalAddr().String())
	port := c.LocalAddr().(*net.TCPAddr).Port
	scheme, sni := "http", ""
	if tlsConf != nil {
		tc := tls.Server(c, tlsConf)
		if err := tc.Handshake(); err != nil {
			return
		}
		c, scheme, sni = tc, "https", tc.ConnectionState().ServerName
	}
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		io.WriteString(c, "HTTP/1.0 400 Bad Request\r\nConnection: close\r\n\r\n")
		return
	}
	name := local
	if n, ok := s.Names[local]; ok {
		name = n
	}
	hostHeader := req.Host
	asked := ""
	if tlsConf != nil {
		asked = " sni=" + orDash(sni)
	}
	asked += " hostheader=" + strings.ReplaceAll(orDash(hostHeader), " ", "")
	body := fmt.Sprintf("sandprobe-lab host=%s addr=%s port=%d scheme=%s%s\n", name, local, port, scheme, asked)
	s.record(c, sni, hostHeader, name, port, scheme, req.RequestURI)
	head := fmt.Sprintf("HTTP/1.0 200 OK\r\nServer: sandprobe-lab/1\r\nDate: %s\r\nContent-Type: text/plain\r\n"+
		"Content-Length: %d\r\nX-Lab-Host: %s\r\nConnection: close\r\n\r\n",
		time.Now().UTC().Format(http.TimeFormat), len(body), name)
	if req.Method == http.MethodHead {
		body = ""
	}
	io.WriteString(c, head+body)
}

// record writes the lab's own line about what it served: the name asked
// for (SNI, else the Host header, else the address's name).
func (s *Served) record(c net.Conn, sni, hostHeader, name string, port int, scheme, path string) {
	if s.Log == nil {
		return
	}
	host := sni
	if host == "" {
		host = hostHeader
		if i := strings.LastIndex(host, ":"); i >= 0 {
			host = host[:i]
		}
		host = strings.Trim(host, "[]")
	}
	if host == "" {
		host = name
	}
	if i := strings.IndexByte(path, ' '); i >= 0 {
		path = path[:i]
	}
	line := fmt.Sprintf("%.3f %s %s %d %s %s\n", float64(time.Now().UnixMilli())/1000, normAddr(c.RemoteAddr().String()),
		strings.ToLower(host), port, scheme, path)
	s.mu.Lock()
	defer s.mu.Unlock()
	io.WriteString(s.Log, line)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteReady tells whoever started a lab daemon that it listens: the pid in
// path, written atomically.
func WriteReady(path string) error {
	if path == "" {
		return nil
	}
	if err := os.WriteFile(path+".tmp", fmt.Appendf(nil, "%d\n", os.Getpid()), 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// quicMinDatagram is the least a QUIC server reads as a client's first
// packet (RFC 9000 §14.1); shorter ones it may drop unanswered.
const quicMinDatagram = 1200

// ServeQUIC answers, on one address's UDP socket, every datagram that
// begins a QUIC connection (a long header of at least 1,200 bytes) with
// the Version Negotiation packet a QUIC server sends for a version it does
// not speak (RFC 9000 §17.2.1), offering QUIC v1: the lab's must-fail
// targets speak enough QUIC to answer a probe, as most of the web does.
// One socket per address, so each answer leaves from the address asked.
// It returns when pc is closed.
func ServeQUIC(pc net.PacketConn) error {
	buf := make([]byte, 65536)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		if vn := versionNegotiation(buf[:n]); vn != nil {
			pc.WriteTo(vn, from)
		}
	}
}

// versionNegotiation is the answer to a long-header packet with a version
// other than 0 and 1, or nil when the datagram is none.
func versionNegotiation(p []byte) []byte {
	if len(p) < quicMinDatagram || p[0]&0x80 == 0 {
		return nil
	}
	version := uint32(p[1])<<24 | uint32(p[2])<<16 | uint32(p[3])<<8 | uint32(p[4])
	if version == 0 || version == 1 {
		return nil
	}
	dl := int(p[5])
	if 6+dl >= len(p) {
		return nil
	}
	dcid := p[6 : 6+dl]
	sl := int(p[6+dl])
	if 7+dl+sl > len(p) {
		return nil
	}
	scid := p[7+dl : 7+dl+sl]
	out := []byte{0x80 | p[0]&0x7f, 0, 0, 0, 0, byte(sl)}
	out = append(out, scid...)
	out = append(out, byte(dl))
	out = append(out, dcid...)
	return append(out, 0, 0, 0, 1)
}
