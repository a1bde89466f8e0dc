package lab

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sourcegraph/conc/iter"
	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

// ErrnoName names what a dial or a read ended with the way the lab's
// tables do: ETIMEDOUT for a timeout, else the errno (ECONNREFUSED, ...).
func ErrnoName(err error) string {
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return "ETIMEDOUT"
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		if n := unix.ErrnoName(en); n != "" {
			return n
		}
	}
	return "E?" + err.Error()
}

// Query asks server one DNS question over UDP and says what came back:
// "RCODE addr addr ..." (NXDOMAIN and REFUSED told apart), "TIMEOUT", or
// the errno.
func Query(server string, port int, name string, qtype dnsmessage.Type, timeout time.Duration) string {
	qname, err := dnsmessage.NewName(strings.TrimSuffix(name, ".") + ".")
	if err != nil {
		return "FORMERR"
	}
	id := uint16(rand.IntN(65536))
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: qname, Type: qtype, Class: dnsmessage.ClassINET})
	msg, _ := b.Finish()
	c, err := net.Dial("udp", net.JoinHostPort(server, itoa(port)))
	if err != nil {
		return ErrnoName(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(msg); err != nil {
		return ErrnoName(err)
	}
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if err != nil {
			if ErrnoName(err) == "ETIMEDOUT" {
				return "TIMEOUT"
			}
			return ErrnoName(err)
		}
		var resp dnsmessage.Message
		if resp.Unpack(buf[:n]) == nil && resp.ID == id {
			return describe(resp)
		}
	}
}

func describe(m dnsmessage.Message) string {
	out := []string{rcodeName(m.RCode)}
	for _, a := range m.Answers {
		switch r := a.Body.(type) {
		case *dnsmessage.AResource:
			out = append(out, net.IP(r.A[:]).String())
		case *dnsmessage.AAAAResource:
			out = append(out, net.IP(r.AAAA[:]).String())
		}
	}
	return strings.Join(out, " ")
}

func rcodeName(rc dnsmessage.RCode) string {
	switch rc {
	case dnsmessage.RCodeSuccess:
		return "NOERROR"
	case dnsmessage.RCodeFormatError:
		return "FORMERR"
	case dnsmessage.RCodeServerFailure:
		return "SERVFAIL"
	case dnsmessage.RCodeNameError:
		return "NXDOMAIN"
	case dnsmessage.RCodeNotImplemented:
		return "NOTIMP"
	case dnsmessage.RCodeRefused:
		return "REFUSED"
	}
	return "RCODE" + itoa(int(rc))
}

// QType reads a query type's name (A, AAAA, TXT, MX, ANY).
func QType(s string) (dnsmessage.Type, bool) {
	t, ok := map[string]dnsmessage.Type{"A": dnsmessage.TypeA, "AAAA": dnsmessage.TypeAAAA, "TXT": dnsmessage.TypeTXT,
		"MX": dnsmessage.TypeMX, "ANY": dnsmessage.TypeALL}[strings.ToUpper(s)]
	return t, ok
}

// Connect makes one TCP connection to hostport: "OK" or the errno.
func Connect(hostport string, timeout time.Duration) string {
	c, err := net.DialTimeout("tcp", hostport, timeout)
	if err != nil {
		return ErrnoName(err)
	}
	c.Close()
	return "OK"
}

// Fetch makes one plain HTTP request to hostport and says who answered:
// "OK:<the name the lab listener gave>" ("OK:?" for anyone else), or the
// errno the connection or the read ended with.
func Fetch(hostport string, timeout time.Duration) string {
	c, err := net.DialTimeout("tcp", hostport, timeout)
	if err != nil {
		return ErrnoName(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\nHost: probe\r\n\r\n"); err != nil {
		return ErrnoName(err)
	}
	data, err := io.ReadAll(io.LimitReader(c, 65536))
	if err != nil && len(data) == 0 {
		return ErrnoName(err)
	}
	for _, w := range strings.Fields(string(data)) {
		if name, ok := strings.CutPrefix(w, "host="); ok {
			return "OK:" + name
		}
	}
	return "OK:?"
}

// SweepTarget is one destination of a sweep.
type SweepTarget struct{ Key, HostPort string }

// Sweep fetches every target at once and returns the results in order.
func Sweep(targets []SweepTarget, timeout time.Duration) []string {
	m := iter.Mapper[SweepTarget, string]{MaxGoroutines: len(targets) + 1}
	return m.Map(targets, func(t *SweepTarget) string { return Fetch(t.HostPort, timeout) })
}

func itoa(i int) string { return strconv.Itoa(i) }
