package main

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/sandprobe/sandprobe/internal/lab"
)

// labRootLinks are sp-* links in the root namespace (hack/cluster's own,
// sp-node* and sp-cni0, are not the lab's).
func labRootLinks() []string {
	var links []string
	for _, line := range strings.Split(out("ip", "-o", "link", "show"), "\n") {
		f := strings.SplitN(line, ": ", 3)
		if len(f) < 2 {
			continue
		}
		dev, _, _ := strings.Cut(f[1], "@")
		if strings.HasPrefix(dev, "sp-") && !strings.HasPrefix(dev, "sp-node") && !strings.HasPrefix(dev, "sp-cni") {
			links = append(links, dev)
		}
	}
	return links
}

var linkNetns = regexp.MustCompile(`link-netns (\S+)`)

func grepLines(text, re string) string {
	var hits []string
	r := regexp.MustCompile(re)
	for _, line := range strings.Split(text, "\n") {
		if r.MatchString(line) {
			hits = append(hits, line)
		}
	}
	return strings.Join(hits, "\n")
}

func (s *selftestRun) safety() {
	s.check("lab.json is valid JSON", "ok", out("sh", "-c", "jq -e . "+s.l.Dir+"/lab.json >/dev/null && echo ok"))
	st := strings.Fields(firstLine(out(s.bin, "status")))
	s.check("lab status says up", "lab: up", strings.Join(st[:min(2, len(st))], " "))
	s.check("root ns: no sp-* interface", "", strings.Join(labRootLinks(), " "))
	s.check("root ns: no route into 10.99.0.0/16", "", grepLines(out("ip", "-4", "route", "show", "table", "all"), `(^|[^0-9])10\.99\.`))
	s.check("root ns: no route into fd99::/48", "", grepLines(out("ip", "-6", "route", "show", "table", "all"), `(?i)fd99:`))
	s.check("root ns: no nft table sp_cni", "", grepLines(out("nft", "list", "tables"), "sp_cni"))
	var bad []string
	for _, ns := range lab.Namespaces {
		for _, line := range strings.Split(out("ip", "-n", ns, "-o", "link", "show"), "\n") {
			f := strings.SplitN(line, ": ", 3)
			if len(f) < 2 {
				continue
			}
			dev, _, _ := strings.Cut(f[1], "@")
			if dev == "lo" {
				continue
			}
			peer := ""
			if m := linkNetns.FindStringSubmatch(line); m != nil {
				peer = m[1]
			}
			if !strings.HasPrefix(dev, "sp-") {
				bad = append(bad, ns+":"+dev+"(not sp-)")
			}
			if !slices.Contains(lab.Namespaces, peer) {
				bad = append(bad, ns+":"+dev+"(peer="+peer+")")
			}
		}
	}
	s.check("every lab veth's peer is in a lab namespace", "", strings.Join(bad, " "))
	links := 0
	for _, line := range strings.Split(out("ip", "-n", lab.NSSandbox, "-o", "link", "show"), "\n") {
		if !strings.Contains(line, ": lo:") {
			links++
		}
	}
	peer := linkNetns.FindStringSubmatch(out("ip", "-n", lab.NSSandbox, "-o", "link", "show", lab.IfSandbox))
	s.check("sp-sandbox has exactly one link (to sp-router)", "1 sp-router", itoa(links)+" "+last(peer))
	s.check("sp-router has no default route (v4+v6)", "", strings.TrimSpace(out("ip", "-n", lab.NSRouter, "route", "show", "default")+out("ip", "-n", lab.NSRouter, "-6", "route", "show", "default")))
	s.noWayOut()
	s.check("sp-router forwards (only between lab links)", "1 1", strings.Join(strings.Fields(out("ip", "netns", "exec", lab.NSRouter, "cat", "/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding")), " "))
	s.check("sandbox resolv.conf points at the lab resolver", lab.ResolverIP4+" "+lab.ResolverIP6, strings.Join(nameservers("/etc/netns/"+lab.NSSandbox+"/resolv.conf"), " "))
}

// noWayOut: route LOOKUPS (never a packet) from every lab namespace, and
// through the router as if forwarded from the sandbox, to addresses outside
// the lab: the machine's own, its gateways, its resolver, public ones.
func (s *selftestRun) noWayOut() {
	var outside []string
	for _, line := range strings.Split(out("ip", "-o", "addr", "show", "scope", "global"), "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[1] != "lo" {
			a, _, _ := strings.Cut(f[3], "/")
			outside = append(outside, a)
		}
	}
	for _, fam := range []string{"-4", "-6"} {
		if f := strings.Fields(out("ip", fam, "route", "show", "default")); len(f) > 2 {
			outside = append(outside, f[2])
		}
	}
	outside = append(outside, nameservers("/etc/resolv.conf")...)
	outside = append(outside, "1.1.1.1", "8.8.8.8", "2606:4700:4700::1111", "169.254.169.254", "10.244.0.10", "192.168.1.1")
	unreachable := func(o string) bool { return strings.Contains(o, "unreachable") || strings.Contains(o, "No route") }
	var bad []string
	for _, a := range outside {
		for _, ns := range lab.Namespaces {
			o := out("ip", "-n", ns, "route", "get", a)
			// the sandbox's only way out is its default route to sp-router ...
			if !unreachable(o) && !(ns == lab.NSSandbox && strings.Contains(o, "dev "+lab.IfSandbox)) {
				bad = append(bad, ns+"->"+a+"["+o+"]")
			}
		}
		// ... and sp-router cannot forward it anywhere
		src := lab.SandboxIP4
		if strings.Contains(a, ":") {
			src = lab.SandboxIP6
		}
		if o := out("ip", "-n", lab.NSRouter, "route", "get", a, "from", src, "iif", lab.IfRouterSandbox); !unreachable(o) {
			bad = append(bad, "forward:"+a+"["+o+"]")
		}
	}
	s.check("no route from any lab ns to "+itoa(len(outside))+" outside addrs", "", strings.Join(bad, " "))
}

func nameservers(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var ns []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fl := strings.Fields(sc.Text()); len(fl) > 1 && fl[0] == "nameserver" {
			ns = append(ns, fl[1])
		}
	}
	return ns
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}
