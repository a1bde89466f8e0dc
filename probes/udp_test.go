package probes

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// quicServer answers each probe datagram with Version Negotiation (as
// every QUIC server does for a version it does not speak) when answer is
// set, else reads and stays silent (a UDP port that takes datagrams but
// speaks no QUIC, or a drop); it returns its port.
func quicServer(t *testing.T, answer bool) int {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			p := buf[:n]
			if !answer || len(p) < quicProbeSize || binary.BigEndian.Uint32(p[1:5]) != quicGreaseVersion {
				continue
			}
			dl := int(p[5])
			dcid, scid := p[6:6+dl], p[7+dl:7+dl+int(p[6+dl])]
			vn := []byte{0x80, 0, 0, 0, 0, byte(len(scid))}
			vn = append(append(append(append(vn, scid...), byte(len(dcid))), dcid...), 0, 0, 0, 1)
			pc.WriteTo(vn, from)
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).Port
}

// TestQUICProbe: the datagram is what a QUIC server reads as a client's
// first packet (a long header, 1,200 bytes) with a reserved version, so it
// must answer; it carries the run's agent string.
func TestQUICProbe(t *testing.T) {
	p := quicProbe("sandprobe nonce=n-1")
	if len(p) != quicProbeSize || p[0]&0xc0 != 0xc0 || binary.BigEndian.Uint32(p[1:5])&0x0f0f0f0f != 0x0a0a0a0a || p[5] != 8 || p[14] != 8 {
		t.Fatalf("not a long-header packet of a reserved version: % x", p[:24])
	}
	if !strings.Contains(string(p), "sandprobe nonce=n-1") {
		t.Error("the probe does not carry the run's nonce")
	}
}

// TestUDPOutcomes: a QUIC server's Version Negotiation is an answer (a
// failure for a must-fail destination, naming the versions); a closed
// port's ICMP port-unreachable a refusal; a port that takes datagrams and
// says nothing a timeout, which proves nothing without the control
// (runner.ApplyControl), never an answer.
func TestUDPOutcomes(t *testing.T) {
	c, err := NewNetClient(policy.Egress{})
	if err != nil {
		t.Fatal(err)
	}
	closed := func() int {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		pc.Close()
		return port
	}()
	for _, tc := range []struct {
		name   string
		port   int
		class  string
		detail string
		status result.Status
	}{
		{"QUIC answers", quicServer(t, true), policy.VerdictAnswered, "QUIC version negotiation (0x1)", result.Fail},
		{"closed port", closed, policy.VerdictRefused, "ECONNREFUSED", result.Pass},
		{"silent port", quicServer(t, false), policy.VerdictTimeout, "no datagram back", result.Pass},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Attempt{Check: checkUDP, Subject: hostPort("127.0.0.1", tc.port) + udpSuffix, Host: "127.0.0.1", Port: tc.port, Op: OpUDP, AllAddrs: true}
			rs := c.RunAttempts(context.Background(), []Attempt{a}, RunOptions{Timeout: 700 * time.Millisecond})
			r := rs[0]
			if r.Class != tc.class || !strings.Contains(r.Detail, tc.detail) {
				t.Fatalf("%s (%s), want %s with %q", r.Class, r.Detail, tc.class, tc.detail)
			}
			f := judge(a, r, policy.Egress{})
			if f.Status != tc.status {
				t.Errorf("verdict %s (%s), want %s", f.Status, f.Actual, tc.status)
			}
			if f.Status == result.Fail && !strings.Contains(f.Fix, "deny UDP") {
				t.Errorf("fix %q", f.Fix)
			}
		})
	}
}

// TestPlanUDP: every direct must-fail host and IP gets one QUIC probe on
// 443/udp (a host named twice, once), allowed hosts only when a proxy is
// their only door; the control dials the same.
func TestPlanUDP(t *testing.T) {
	e := mustPolicy(t, `
  egress:
    proxy: http://proxy.test:3128
    allow: [{host: api.test, port: 443, reason: r}]
    mustFail:
      hosts: [blocked.test, "blocked.test:80", {target: pinned.test, addresses: [192.0.2.7]}]
      ips: [198.51.100.1, 203.0.113.0/30]
`).Spec.Egress
	var got []string
	for _, a := range planUDP(e, []policy.Allowance{{Host: "api.test", Port: 443}}) {
		got = append(got, a.Subject+"="+strings.Join(a.Addresses, ","))
	}
	want := "blocked.test:443/udp= pinned.test:443/udp=192.0.2.7 198.51.100.1:443/udp= 203.0.113.1:443/udp= api.test:443/udp="
	if strings.Join(got, " ") != want {
		t.Errorf("plan %v, want %s", got, want)
	}
	e.Proxy = ""
	if n := len(planUDP(e, nil)); n != 4 {
		t.Errorf("without a proxy, %d attempts, want the 4 must-fail ones", n)
	}
	ctl := 0
	for _, a := range ControlPlan(e) {
		if a.Op == OpUDP {
			ctl++
		}
	}
	if ctl != 4 {
		t.Errorf("the control dials %d QUIC probes, want 4", ctl)
	}
}
