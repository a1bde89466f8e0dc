package main

import (
	"slices"
	"strings"

	"github.com/sandprobe/sandprobe/internal/lab"
)

// sweepTarget is one direct destination and the errno it must fail with
// while healthy, guarded by rule (IPv4 name; NAME6 for IPv6).
type sweepTarget struct{ key, fam, cat, addr, errno, rule string }

func sweepTargets() []sweepTarget {
	var ts []sweepTarget
	for _, h := range lab.AllowedHosts {
		k, _, _ := strings.Cut(h.Name, ".")
		ts = append(ts, sweepTarget{"direct-" + k + "-v4", "4", "allowed", h.IP4, "EHOSTUNREACH", "deny-direct-allowed"},
			sweepTarget{"direct-" + k + "-v6", "6", "allowed", h.IP6, "EACCES", "deny-direct-allowed6"})
	}
	errnos := map[string][2]string{"drop": {"ETIMEDOUT", "ETIMEDOUT"}, "tcp-reset": {"ECONNREFUSED", "ECONNREFUSED"},
		"icmp-port-unreachable": {"ECONNREFUSED", "ECONNREFUSED"}, "icmp-host-unreachable": {"EHOSTUNREACH", "EHOSTUNREACH"},
		"icmp-admin-prohibited": {"EHOSTUNREACH", "EACCES"}, "icmp-net-unreachable": {"ENETUNREACH", "ENETUNREACH"}}
	for _, t := range lab.RawTargets {
		e := errnos[t.Flavour]
		ts = append(ts, sweepTarget{"raw-" + t.Key + "-v4", "4", "raw", t.IP4, e[0], t.Rule}, sweepTarget{"raw-" + t.Key + "-v6", "6", "raw", t.IP6, e[1], t.Rule + "6"})
	}
	ts = append(ts, sweepTarget{"blocked-v4", "4", "blocked", "10.99.20.20", "ETIMEDOUT", "default-deny"},
		sweepTarget{"blocked-v6", "6", "blocked", "fd99:0:0:20::20", "ETIMEDOUT", "default-deny6"},
		sweepTarget{"exfil-v4", "4", "exfil", "10.99.20.21", "ECONNREFUSED", "deny-exfil"},
		sweepTarget{"exfil-v6", "6", "exfil", "fd99:0:0:20::21", "ECONNREFUSED", "deny-exfil6"})
	for _, m := range lab.MetadataStandins {
		ts = append(ts, sweepTarget{"metadata-v4-" + m.IP4, "4", "metadata", m.IP4, "ETIMEDOUT", "deny-metadata"},
			sweepTarget{"metadata-v6-" + m.IP4, "6", "metadata", m.IP6, "ETIMEDOUT", "deny-metadata6"})
	}
	return ts
}

// sweep dials every target at once (2.5 s timeout) into s.sweep.
func (s *selftestRun) doSweep(port string) {
	var args []string
	for _, t := range sweepTargets() {
		a := t.addr
		if t.fam == "6" {
			a = "[" + a + "]"
		}
		args = append(args, t.key+"="+a+":"+port)
	}
	s.sweep = s.sweepRaw("2.5", args)
}

// expectSweep: every target answers iff open says so, otherwise fails with
// its healthy errno.
func (s *selftestRun) expectSweep(label string, open func(sweepTarget) bool) {
	s.doSweep("80")
	var bad, opened []string
	for _, t := range sweepTargets() {
		want := t.errno
		if open(t) {
			want = "OK"
		}
		got := s.sweep[t.key]
		if got == "" {
			got = "missing"
		}
		kind, _, _ := strings.Cut(got, ":")
		if kind == "OK" {
			opened = append(opened, t.key)
		}
		if kind != want {
			bad = append(bad, t.key+"(want "+want+" got "+got+")")
		}
	}
	if len(opened) == 0 {
		opened = []string{"none"}
	}
	if len(bad) == 0 {
		s.record(true, label, "answered: "+strings.Join(opened, " "))
	} else {
		s.record(false, label, strings.Join(bad, " "))
	}
}

func noneOpen(sweepTarget) bool { return false }

func (s *selftestRun) sweeps() {
	s.expectSweep("healthy: every direct target fails as intended", noneOpen)
	for _, t := range sweepTargets() {
		s.check("  "+t.key+" "+t.addr, t.errno, s.sweep[t.key])
	}
	// rules are per address, not per port
	s.doSweep("443")
	s.check("healthy: raw-reset-v4:443 refused", "ECONNREFUSED", s.sweep["raw-reset-v4"])
	s.check("healthy: direct-api-v6:443 EACCES", "EACCES", s.sweep["direct-api-v6"])
	// curl's view of each flavour (what a person sees)
	for _, c := range [][3]string{
		{"DROP -> timeout", "10.99.20.10", "Connection timed out"},
		{"tcp reset -> Connection refused", "10.99.20.11", "Connection refused"},
		{"icmp port-unreach -> Connection refused", "10.99.20.12", "Connection refused"},
		{"icmp host-unreach -> No route to host", "10.99.20.13", "No route to host"},
		{"icmp admin-prohib v4 -> No route to host", "10.99.20.14", "No route to host"},
		{"icmpv6 admin-prohib -> Permission denied", "[fd99:0:0:20::14]", "Permission denied"},
		{"icmp net-unreach -> Network is unreachable", "10.99.20.15", "Network is unreachable"},
	} {
		s.check("curl: "+c[0], c[2], curlErr(c[1]))
	}
}

func curlErr(addr string) string {
	v := sbx("curl", "-sS", "-v", "--max-time", "2.5", "http://"+addr+"/")
	for _, line := range strings.Split(v, "\n") {
		if _, rest, ok := strings.Cut(line, " failed: "); ok && strings.Contains(line, "connect to ") {
			return strings.TrimSpace(rest)
		}
		if strings.Contains(line, "Connection timed out") {
			return "Connection timed out"
		}
	}
	return ""
}

func (s *selftestRun) brokenStates(full bool) {
	for _, c := range []struct {
		state, label string
		open         func(sweepTarget) bool
	}{
		{"egress-open", "everything answers", func(sweepTarget) bool { return true }},
		{"raw-ips-open", "only raw IPs answer", func(t sweepTarget) bool { return t.cat == "raw" }},
		{"metadata-open", "only metadata answers", func(t sweepTarget) bool { return t.cat == "metadata" }},
		{"ipv6-open", "all v6 answers, no v4", func(t sweepTarget) bool { return t.fam == "6" }},
		{"proxy-bypass", "allowed hosts direct", func(t sweepTarget) bool { return t.cat == "allowed" }},
	} {
		s.brk(c.state, "")
		s.expectSweep("break "+c.state+": "+c.label, c.open)
		switch c.state {
		case "metadata-open":
			s.check("  metadata body", "sandprobe-lab host="+lab.MetadataName, curlBody("http://"+lab.MetadataIP4+"/"))
		case "proxy-bypass":
			s.check("  direct https://api.lab.test (TLS)", "sandprobe-lab host=api.lab.test", curlBody("--cacert", s.ca(), "https://api.lab.test/"))
		}
		s.heal(c.state, "")
		s.expectSweep("heal "+c.state, noneOpen)
	}
	s.proxyBroken()
	s.dnsBroken()
	s.flushRules(full)
}

func (s *selftestRun) proxyBroken() {
	px := lab.ProxyURL
	s.brk("proxy-open", "")
	s.check("break proxy-open: CONNECT blocked.lab.test 200", "200/200", curlCode("-k", "-x", px, "https://blocked.lab.test/"))
	s.check("  proxy GET metadata answers", "sandprobe-lab host="+lab.MetadataName, curlBody("-x", px, "http://"+lab.MetadataIP4+"/"))
	s.check("  allowed still 200", "200/200", curlCode("--cacert", s.ca(), "-x", px, "https://api.lab.test/"))
	s.heal("proxy-open", "")
	s.check("heal proxy-open: CONNECT blocked.lab.test 403", "000/403", curlCode("-k", "-x", px, "https://blocked.lab.test/"))
	s.check("  allowed 200 after heal", "200/200", curlCode("--cacert", s.ca(), "-x", px, "https://api.lab.test/"))
	s.brk("allowed-down", "")
	s.check("break allowed-down: CONNECT api -> 500", "000/500", curlCode("--cacert", s.ca(), "-x", px, "https://api.lab.test/"))
	s.checkMatch("  tinyproxy says Unable to connect", "500 Unable to connect", statusLine("-x", px, "http://git.lab.test/"))
	s.heal("allowed-down", "")
	s.check("heal allowed-down: api via proxy 200", "200/200", curlCode("--cacert", s.ca(), "-x", px, "https://api.lab.test/"))
	s.check("  git via proxy 200", "200/200", curlCode("--cacert", s.ca(), "-x", px, "https://git.lab.test/"))
}

// flushRules: each flushed rule makes exactly its own destination answer.
func (s *selftestRun) flushRules(full bool) {
	rules := []string{"deny-raw-reset", "deny-raw-admin-prohibited6", "deny-metadata", "deny-exfil6", "deny-direct-allowed6", "default-deny"}
	if full {
		rules = nil
		for _, t := range sweepTargets() {
			if !slices.Contains(rules, t.rule) {
				rules = append(rules, t.rule)
			}
		}
	}
	for _, r := range rules {
		s.brk("flush-rule", r)
		s.expectSweep("break flush-rule "+r, func(t sweepTarget) bool { return t.rule == r })
		s.heal("flush-rule", r)
	}
	s.brk("flush-rule", "allow-proxy")
	s.check("break flush-rule allow-proxy: proxy unreachable", "000/000", curlCode("--connect-timeout", "2", "--cacert", s.ca(), "-x", lab.ProxyURL, "https://api.lab.test/"))
	s.heal("flush-rule", "allow-proxy")
	s.brk("flush-rule", "allow-dns")
	s.check("break flush-rule allow-dns: v4 resolver times out", "TIMEOUT", s.dnsq(lab.NSSandbox, "api.lab.test", "A", lab.ResolverIP4, "1"))
	s.check("  v6 resolver still answers", "NOERROR 10.99.10.10", s.dnsq(lab.NSSandbox, "api.lab.test", "A", lab.ResolverIP6))
	s.heal("flush-rule", "allow-dns")
	s.check("lab break unknown state is refused", "true", itoaBool(s.l.Break("nonsense", "") != nil))
	s.check("lab break flush-rule NOSUCH is refused", "true", itoaBool(s.l.Break("flush-rule", "no-such-rule") != nil))
	s.brk("egress-open", "")
	s.brk("dns-open", "")
	s.brk("flush-rule", "deny-raw-drop")
	s.checkMatch("lab status lists broken states", "egress-open, dns-open, flush-rule deny-raw-drop", grepLines(out(s.bin, "status"), "^broken"))
	s.heal("", "")
	s.check("lab heal (all) -> healthy", "broken: none (healthy)", grepLines(out(s.bin, "status"), "^broken"))
	s.expectSweep("after heal all: every direct target fails as intended", noneOpen)
	s.check("after heal all: allowed via proxy", "200/200", curlCode("--cacert", s.ca(), "-x", lab.ProxyURL, "https://git.lab.test/"))
}

func itoaBool(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
