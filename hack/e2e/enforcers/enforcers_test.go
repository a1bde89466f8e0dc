package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestEnforcers: each verdict attributed to the stage the witness saw it
// stop at (a neighbour, which the witness cannot see, to the node's INPUT
// when the control proved it, or to no one when nothing answers it); with
// --expect healthy, the one that left the node fails the run and the
// not-applicable neighbour does not.
func TestEnforcers(t *testing.T) {
	args := []string{"--junit", "testdata/run.xml", "--witness", "testdata/witness.json", "--lab-json", "testdata/lab.json", "--probe-ip", "10.244.0.7"}
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	want := `egress.must-fail blocked.lab.test:443 via proxy  pass  CONNECT blocked.lab.test:443 at 10.99.31.28:3128  the proxy's deny
egress.must-fail 10.99.20.10:80 direct           pass  10.99.20.10:80                                    kube-router's NetworkPolicy (REJECT at the node)
egress.must-fail exfil.lab.test:443 direct       FAIL  10.99.20.21:443 (exfil.lab.test)                  nobody: it left the node for the lab and answered
egress.dns-bypass 10.99.20.53:53/udp             pass  10.99.20.53:53/udp                                the cluster's safety net (dropped at the node)
egress.dns-exfil                                 pass  a random name                                     the lab resolver (answers no name it does not serve)
egress.must-fail node:10250 (kubelet)            pass  node:10250 (kubelet)                              kube-router's NetworkPolicy (INPUT: the node's own address; the control reached it)
egress.must-fail kubernetes API 10.96.0.1:443    skip  kubernetes API 10.96.0.1:443                      nothing answers it (not applicable): the control got nothing either
enforced by: kube-router's NetworkPolicy 2, the proxy's deny 1, nobody 1, the cluster's safety net 1, the lab resolver 1, nothing answers it 1
`
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	errb.Reset()
	if code := run(append(args, "--expect", "healthy"), &out, &errb); code != 1 {
		t.Fatalf("--expect healthy: exit %d, want 1", code)
	}
	for _, w := range []string{"egress.must-fail exfil.lab.test:443 direct: FAIL, nobody", "egress.dns-bypass 10.99.20.53:53/udp: pass, the cluster's safety net (dropped at the node) (want pass by kube-router's NetworkPolicy)"} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, errb.String())
		}
	}
	if strings.Contains(errb.String(), "kubernetes API") || strings.Contains(errb.String(), "node:10250") {
		t.Errorf("--expect healthy flags a neighbour:\n%s", errb.String())
	}
	if code := run([]string{"--junit", "testdata/run.xml"}, &out, &errb); code != 2 {
		t.Errorf("missing flags: exit %d, want 2", code)
	}
}

// TestDirectWhoCountsDials: the witness counts each dial. A pass whose
// first dial left the node (the new pod not yet isolated) is still
// kube-router's when the node stopped a later dial; a pass where every
// dial left the node was refused by the target, not by the cluster.
func TestDirectWhoCountsDials(t *testing.T) {
	for _, c := range []struct {
		status string
		where  map[string]int
		want   string
	}{
		{"pass", map[string]int{"pre": 3, "mid": 3, "post": 1}, "kube-router's NetworkPolicy (REJECT at the node, once its sync had isolated the new pod: 2 of 3 dials stopped)"},
		{"pass", map[string]int{"pre": 3, "mid": 3, "post": 3}, "nobody: it left the node for the lab (refused by the target itself)"},
		{"FAIL", map[string]int{"pre": 3, "mid": 3, "post": 1}, "nobody: it left the node for the lab and answered"},
		{"pass", map[string]int{"pre": 2, "mid": 2}, "kube-router's NetworkPolicy (REJECT at the node)"},
	} {
		if got := directWho(verdict{status: c.status}, c.where); got != c.want {
			t.Errorf("%s %v: %q, want %q", c.status, c.where, got, c.want)
		}
	}
}

// TestCiliumEvents: the agent's monitor output as v1.20.2 writes it (a
// banner, events cut short and run together) yields its policy drops and
// the names its DNS proxy refused.
func TestCiliumEvents(t *testing.T) {
	ev, err := readCiliumEvents("testdata/cilium-events.json")
	if err != nil {
		t.Fatal(err)
	}
	j := judge{ips: map[string]bool{"10.244.0.120": true}, cilium: ev}
	for _, c := range []struct {
		dst  string
		port int
		ok   bool
	}{{"10.99.20.10", 80, true}, {"10.250.0.1", 6443, true}, {"10.99.11.11", 443, true}, {"10.99.10.10", 443, false}} {
		why, ok := j.dropped(c.dst, c.port, "tcp")
		if ok != c.ok || (ok && !strings.HasPrefix(why, "Policy denied")) {
			t.Errorf("dropped %s:%d = %q, %v; want %v", c.dst, c.port, why, ok, c.ok)
		}
	}
	if n := j.refusedNames(func(q string) bool { return q == "blocked.lab.test" }); n == 0 {
		t.Errorf("the DNS proxy's refusals of blocked.lab.test were not read")
	}
	if n := j.refusedNames(func(q string) bool { return q == "api.lab.test" }); n != 0 {
		t.Errorf("api.lab.test counted refused %d times; it was forwarded", n)
	}
}
