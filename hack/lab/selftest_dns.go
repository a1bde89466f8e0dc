package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/sandprobe/sandprobe/internal/lab"
)

// dnsq asks a resolver from inside a namespace, with the lab's own client.
func (s *selftestRun) dnsq(ns, name, qtype, server string, timeout ...string) string {
	args := []string{"netns", "exec", ns, s.bin, "dns", name, qtype, "--server", server}
	if len(timeout) > 0 {
		args = append(args, "--timeout", timeout[0])
	}
	return out("ip", args...)
}

func (s *selftestRun) dns() {
	q := func(name, qt, server string) string { return s.dnsq(lab.NSSandbox, name, qt, server) }
	// the sandbox's resolver answers the allowed names (and the proxy's)
	// only: everything else is REFUSED, as a DNS proxy with an allow-list does
	for _, h := range lab.AllowedHosts {
		s.check("dns A "+h.Name, "NOERROR "+h.IP4, q(h.Name, "A", lab.ResolverIP4))
		s.check("dns AAAA "+h.Name+" (v6 resolver)", "NOERROR "+h.IP6, q(h.Name, "AAAA", lab.ResolverIP6))
	}
	s.check("dns A proxy.lab.test", "NOERROR "+lab.ProxyIP4, q("proxy.lab.test", "A", lab.ResolverIP4))
	s.check("dns wildcard anything.git.lab.test", "NOERROR "+lab.GitWildcardIP4, q("anything.git.lab.test", "A", lab.ResolverIP4))
	rnd := fmt.Sprintf("r%d", rand.IntN(1<<30))
	for _, n := range []string{"blocked.lab.test", "exfil.lab.test", lab.MetadataName, rnd + ".lab.test", rnd + "." + lab.CanaryZone, "example.com"} {
		s.check("dns "+n+" -> REFUSED (outside the allow-list)", "REFUSED", q(n, "A", lab.ResolverIP4))
	}
	s.check("dns x.sbx.svc.cluster.local -> NXDOMAIN (a pod's search list)", "NXDOMAIN", q("x.sbx.svc.cluster.local", "A", lab.ResolverIP4))
	s.clusterDNS(q)
	// the internet's DNS (the authority), reachable from the service namespaces only
	auth := func(name, server string) string { return s.dnsq(lab.NSDNS, name, "A", server) }
	s.check("authority: blocked.lab.test", "NOERROR 10.99.20.20", auth("blocked.lab.test", lab.AuthorityIP4))
	s.check("authority: canary wildcard", "NOERROR "+lab.DNSOpenIP4, auth(rnd+"."+lab.CanaryZone, lab.AuthorityIP6))
	s.check("authority: anything else NXDOMAIN", "NXDOMAIN", auth(rnd+".example.org", lab.AuthorityIP4))
	s.check("authority answers on a must-fail IP too", "NOERROR 10.99.10.10", auth("api.lab.test", "10.99.20.10"))
	s.check("authority logs every query", "1", s.countLog(" "+rnd+".example.org "))
	s.check("the sandbox cannot reach the authority", "TIMEOUT", s.dnsq(lab.NSSandbox, "api.lab.test", "A", lab.AuthorityIP4, "1"))
	s.check("getent (libc resolver) api.lab.test", "10.99.10.10", firstField(sbx("getent", "ahostsv4", "api.lab.test")))
	err := exec.Command("ip", "netns", "exec", lab.NSSandbox, "getent", "hosts", rnd+".lab.test").Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	s.check("getent "+rnd+".lab.test fails (exit 2)", "2", itoa(code))
	s.rnd = rnd
}

// countLog counts the authority's log lines containing sub.
func (s *selftestRun) countLog(sub string) string {
	b, _ := os.ReadFile(s.l.Dir + "/dns/queries.log")
	return itoa(strings.Count(string(b), sub))
}

func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

// dnsBroken: dns-open makes the resolver a forwarder: what the authority
// says comes back, and the authority saw it.
func (s *selftestRun) dnsBroken() {
	q := func(name, qt, server string) string { return s.dnsq(lab.NSSandbox, name, qt, server) }
	s.brk("dns-open", "")
	s.check("break dns-open: blocked.lab.test answered (forwarded)", "NOERROR 10.99.20.20", q("blocked.lab.test", "A", lab.ResolverIP4))
	s.check("  "+s.rnd+"."+lab.CanaryZone+" answered (canary)", "NOERROR "+lab.DNSOpenIP6, q(s.rnd+"."+lab.CanaryZone, "AAAA", lab.ResolverIP6))
	s.check("  "+s.rnd+".lab.test NXDOMAIN relayed", "NXDOMAIN", q(s.rnd+".lab.test", "A", lab.ResolverIP4))
	s.check("  ... and the authority saw it", "1", s.countLog(" "+s.rnd+".lab.test "))
	s.check("  api.lab.test still right", "NOERROR 10.99.10.10", q("api.lab.test", "A", lab.ResolverIP4))
	s.heal("dns-open", "")
	s.check("heal dns-open: blocked.lab.test REFUSED", "REFUSED", q("blocked.lab.test", "A", lab.ResolverIP4))
}

// clusterDNS: `lab cluster-dns` makes the resolver answer a headless
// Service's name (re-read on SIGHUP, no restart), and clearing it makes the
// name NXDOMAIN again.
func (s *selftestRun) clusterDNS(q func(name, qt, server string) string) {
	const name = "broker.f.svc.cluster.local"
	settle := func(want string) string { // SIGHUP is handled between queries
		var got string
		for range 40 {
			if got = q(name, "A", lab.ResolverIP4); got == want {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		return got
	}
	if err := s.l.SetClusterRecords([]string{name + "=10.99.10.10"}); err != nil {
		s.check("lab cluster-dns "+name, "nil", err.Error())
		return
	}
	s.check("cluster-dns: "+name+" answers", "NOERROR 10.99.10.10", settle("NOERROR 10.99.10.10"))
	if err := s.l.SetClusterRecords(nil); err != nil {
		s.check("lab cluster-dns (clear)", "nil", err.Error())
		return
	}
	s.check("cluster-dns cleared: "+name+" NXDOMAIN", "NXDOMAIN", settle("NXDOMAIN"))
}
