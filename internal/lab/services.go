package lab

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// dnsmasqConf: healthy, what Cilium's DNS proxy with toFQDNs matchPattern
// rules is — the allowed names (and the proxy's) answer, every other name
// is REFUSED (no upstream); broken (dns-open), what a plain CoreDNS
// (`forward .`) is — every other name goes to the internet's DNS.
func (l *Lab) dnsmasqConf() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# sandprobe lab resolver\nno-resolv\nno-hosts\nno-poll\ndomain-needed\nbogus-priv\nbind-interfaces\n"+
		"listen-address=%s\nlisten-address=%s\nport=%d\nuser=root\npid-file=\nlog-queries\nlog-facility=-\n", ResolverIP4, ResolverIP6, ResolverPort)
	// a cluster's pods search <ns>.svc.cluster.local first: NXDOMAIN there
	// lets a resolver walking the search list go on to the real name
	b.WriteString("local=/cluster.local/\n")
	// ... except the names `lab cluster-dns` gives it, as a cluster's DNS
	// answers a headless Service with its pods (re-read on SIGHUP)
	fmt.Fprintf(&b, "addn-hosts=%s\n", l.clusterHosts())
	if l.isBroken("dns-open") {
		fmt.Fprintf(&b, "# BROKEN dns-open: a forwarder; every other name goes to the authority\nserver=%s\nserver=%s\n", AuthorityIP4, AuthorityIP6)
		return b.String()
	}
	b.WriteString("# healthy: only the allowed names and the proxy's; everything else REFUSED\n")
	for _, h := range AllowedHosts {
		fmt.Fprintf(&b, "host-record=%s,%s,%s\n", h.Name, h.IP4, h.IP6)
	}
	fmt.Fprintf(&b, "address=/*.git.lab.test/%s\naddress=/*.git.lab.test/%s\nhost-record=proxy.lab.test,%s,%s\n", GitWildcardIP4, GitWildcardIP6, ProxyIP4, ProxyIP6)
	return b.String()
}

// clusterHosts is the hosts file of the cluster.local names the resolver answers.
func (l *Lab) clusterHosts() string { return filepath.Join(l.Dir, "dns", "cluster.hosts") }

// SetClusterRecords makes the resolver answer each NAME=ADDRESS, NAME under
// cluster.local, as a cluster's DNS answers a headless Service's name with
// its pods' addresses (the test cluster has no DNS of its own: the lab
// resolver is its clusterDNS). It replaces the records set before; none
// clears them. dnsmasq re-reads them on SIGHUP, without a restart.
func (l *Lab) SetClusterRecords(records []string) error {
	var b strings.Builder
	for _, r := range records {
		name, addr, _ := strings.Cut(r, "=")
		ip, err := netip.ParseAddr(addr)
		if err != nil || !strings.HasSuffix(name, ".cluster.local") || strings.ContainsAny(name, " \t#") {
			return fmt.Errorf("%q: want NAME.cluster.local=ADDRESS", r)
		}
		fmt.Fprintf(&b, "%s %s\n", ip, name)
	}
	tmp := l.clusterHosts() + ".new"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, l.clusterHosts()); err != nil {
		return err
	}
	pid := l.pidOf("dnsmasq")
	if !pidInLab(pid) {
		return errors.New("the lab resolver (dnsmasq) is not running")
	}
	l.say("cluster DNS: %d record(s)", len(records))
	return syscall.Kill(pid, syscall.SIGHUP)
}

func (l *Lab) startDNS() error {
	if !exists(l.clusterHosts()) {
		if err := os.WriteFile(l.clusterHosts(), nil, 0o644); err != nil {
			return err
		}
	}
	conf := filepath.Join(l.Dir, "dns", "dnsmasq.conf")
	if err := os.WriteFile(conf, []byte(l.dnsmasqConf()), 0o644); err != nil {
		return err
	}
	return l.start("dnsmasq", NSDNS, "dnsmasq", "--keep-in-foreground", "--conf-file="+conf)
}

func (l *Lab) restartDNS() error {
	l.stop("dnsmasq")
	if err := l.startDNS(); err != nil {
		return err
	}
	return l.waitListen(NSDNS, "udp", ResolverPort, "dnsmasq")
}

func (l *Lab) startAuthority() error {
	args := []string{"authority"}
	for _, a := range nsAddrs(NSExt) {
		args = append(args, "--listen", a[0], "--listen", a[1])
	}
	for _, r := range labRecords() {
		args = append(args, "--record", r.Name+"="+r.IP4+","+r.IP6)
	}
	args = append(args, "--wildcard", "git.lab.test="+GitWildcardIP4+","+GitWildcardIP6,
		"--wildcard", CanaryZone+"="+DNSOpenIP4+","+DNSOpenIP6,
		"--log", filepath.Join(l.Dir, "dns", "queries.log"), "--ready", filepath.Join(l.Dir, "run", "authority.ready"))
	os.Remove(filepath.Join(l.Dir, "run", "authority.ready"))
	return l.start("authority", NSExt, append([]string{l.bin()}, args...)...)
}

// servers are the lab's HTTP/HTTPS listeners: name, namespace, certificate.
var servers = [][3]string{{"srv-api", NSAPI, "api"}, {"srv-git", NSGit, "git"}, {"srv-ext", NSExt, "ext"}, {"srv-meta", NSMeta, "meta"}}

// serverNames: the name each address of a server answers as.
func serverNames(name, ns string) [][2]string {
	var m [][2]string
	switch name {
	case "srv-ext":
		for _, t := range RawTargets {
			m = append(m, [2]string{t.IP4, "raw-" + t.Key}, [2]string{t.IP6, "raw-" + t.Key})
		}
		for _, t := range BlockedHosts {
			m = append(m, [2]string{t.IP4, t.Key}, [2]string{t.IP6, t.Key})
		}
	case "srv-meta":
		for _, s := range MetadataStandins {
			n := MetadataName
			if s.IP4 != MetadataIP4 {
				n = "metadata-standin-for-" + s.StandsFor[0]
			}
			m = append(m, [2]string{s.IP4, n}, [2]string{s.IP6, n})
		}
	default:
		for _, h := range AllowedHosts {
			if h.NS == ns {
				m = append(m, [2]string{h.IP4, h.Name}, [2]string{h.IP6, h.Name})
			}
		}
	}
	return m
}

func (l *Lab) startServer(name, ns, cert string) error {
	args := []string{l.bin(), "serve"}
	for _, m := range serverNames(name, ns) {
		args = append(args, "--map", m[0]+"="+m[1])
	}
	tls := filepath.Join(l.Dir, "tls", cert)
	args = append(args, "--cert", tls+".pem", "--key", tls+".key", "--http-port", strconv.Itoa(HTTPPort), "--https-port", strconv.Itoa(HTTPSPort), "--quic-port", strconv.Itoa(HTTPSPort),
		"--ready", filepath.Join(l.Dir, "run", name+".ready"), "--served", filepath.Join(l.Dir, "served", name+".log"))
	os.Remove(filepath.Join(l.Dir, "run", name+".ready"))
	return l.start(name, ns, args...)
}

// ensure starts each named server that does not run, and waits for it.
func (l *Lab) ensureServers(names ...string) error {
	for _, s := range servers {
		if !slices.Contains(names, s[0]) || l.alive(s[0]) {
			continue
		}
		l.stop(s[0])
		if err := l.startServer(s[0], s[1], s[2]); err != nil {
			return err
		}
	}
	for _, n := range names {
		if err := l.waitReady(n); err != nil {
			return err
		}
	}
	return nil
}

// tinyproxyConf filters on the host name of CONNECT and GET (ere).
func (l *Lab) tinyproxyConf() (conf, filter string) {
	d := filepath.Join(l.Dir, "proxy")
	var b strings.Builder
	fmt.Fprintf(&b, "# sandprobe lab egress proxy\nPort %d\nTimeout 60\nMaxClients 512\n", ProxyPort)
	if l.isBroken("proxy-nolog") {
		b.WriteString("# BROKEN proxy-nolog: only critical messages, no attempt written down\nLogLevel Critical\n")
	} else {
		b.WriteString("LogLevel Connect\n")
	}
	fmt.Fprintf(&b, "LogFile \"%s/access.log\"\nDefaultErrorFile \"/usr/share/tinyproxy/default.html\"\nStatHost \"tinyproxy.stats.invalid\"\n"+
		"Allow 10.99.0.0/16\nAllow fd99::/48\nViaProxyName \"sp-proxy\"\nConnectPort 443\nConnectPort 80\n", d)
	if l.isBroken("proxy-open") {
		b.WriteString("# BROKEN proxy-open: no filter, every host allowed\nFilterDefaultDeny No\n")
	} else {
		fmt.Fprintf(&b, "Filter \"%s/filter\"\nFilterType ere\nFilterDefaultDeny Yes\n", d)
	}
	var f strings.Builder
	for _, p := range AllowedPatterns {
		if rest, ok := strings.CutPrefix(p, "*."); ok {
			fmt.Fprintf(&f, "^[a-z0-9-]+(\\.[a-z0-9-]+)*\\.%s$\n", strings.ReplaceAll(rest, ".", "\\."))
		} else {
			fmt.Fprintf(&f, "^%s$\n", strings.ReplaceAll(p, ".", "\\."))
		}
	}
	if l.isBroken("proxy-allows-blocked") {
		f.WriteString("^blocked\\.lab\\.test$\n")
	}
	return b.String(), f.String()
}
