package lab

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// squidConf: the same allow-list as tinyproxy's on the CONNECT host
// (dstdomain -n: no reverse lookup of IP literals), and on the TLS server
// name of what goes through a tunnel: peek at the ClientHello (step 1),
// splice the allowed names, terminate every other. Squid answers 200 to a
// denied CONNECT on an ssl-bump port and serves its 403 inside TLS, with
// the proxy's certificate: no certificate is minted.
func (l *Lab) squidConf(d string) string {
	// ".git.lab.test" covers git.lab.test too, and squid refuses both in one ACL
	var names string
	for _, p := range AllowedPatterns {
		if !slices.Contains(AllowedPatterns, "*."+p) {
			names += " " + strings.TrimPrefix(p, "*")
		}
	}
	var b strings.Builder
	b.WriteString("# sandprobe lab egress proxy, squid flavour\n")
	for _, ip := range []string{ProxyIP4, "[" + ProxyIP6 + "]"} {
		fmt.Fprintf(&b, "http_port %s:%d ssl-bump tls-cert=%s/proxy.pem tls-key=%s/proxy.key generate-host-certificates=off\n", ip, ProxyPort, d, d)
	}
	fmt.Fprintf(&b, "pid_filename none\ncache_log stdio:%s/cache.log\n", d)
	// sandprobe's logformat: the native one plus the bytes the client sent
	// and its User-Agent (where the probe's nonce is; docs/egress.md)
	b.WriteString("logformat sandprobe %ts.%03tu %6tr %>a %Ss/%03>Hs %<st %rm %ru %[un %Sh/%<a %mt %>st \"%{User-Agent}>h\"\n")
	if l.isBroken("proxy-nolog") {
		b.WriteString("# BROKEN proxy-nolog: no access log\naccess_log none\n")
	} else {
		fmt.Fprintf(&b, "access_log stdio:%s/access.log sandprobe\n", d)
	}
	fmt.Fprintf(&b, "cache_store_log none\nnetdb_filename none\ncache deny all\ncache_mem 8 MB\ncoredump_dir %s\nicp_port 0\nhtcp_port 0\n"+
		"pinger_enable off\nshutdown_lifetime 0 seconds\nmax_filedescriptors 4096\nvisible_hostname sp-proxy\nforwarded_for delete\n"+
		"acl lab_clients src 10.99.0.0/16 fd99::/48\nacl Safe_ports port 80 443\nacl step1 at_step SslBump1\n"+
		"http_access deny !lab_clients\nhttp_access deny !Safe_ports\n", d)
	if l.isBroken("proxy-open") {
		b.WriteString("# BROKEN proxy-open: no filter, every host and every name allowed\nhttp_access allow lab_clients\nssl_bump splice all\n")
		return b.String()
	}
	if l.isBroken("proxy-allows-blocked") {
		names += " blocked.lab.test"
	}
	fmt.Fprintf(&b, "acl allowed_hosts dstdomain -n%s\nacl allowed_sni ssl::server_name%s\nhttp_access allow allowed_hosts\nhttp_access deny all\n"+
		"ssl_bump peek step1\nssl_bump splice allowed_sni\nssl_bump terminate all\n", names, names)
	return b.String()
}

// writeSquid writes squid's configuration and its copy of the proxy's
// key, owned by the user squid runs as.
func (l *Lab) writeSquid() (string, error) {
	d := filepath.Join(l.Dir, "proxy", "squid")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", err
	}
	uid := -1
	if u, err := user.Lookup("proxy"); err == nil {
		uid, _ = strconv.Atoi(u.Uid)
	}
	for _, f := range []struct {
		name string
		mode os.FileMode
	}{{"proxy.key", 0o400}, {"proxy.pem", 0o444}} {
		b, err := os.ReadFile(filepath.Join(l.Dir, "tls", f.name))
		if err != nil {
			return "", err
		}
		p := filepath.Join(d, f.name)
		os.Remove(p)
		if err := os.WriteFile(p, b, f.mode); err != nil {
			return "", err
		}
		os.Chown(p, uid, -1)
	}
	conf := filepath.Join(d, "squid.conf")
	if err := os.WriteFile(conf, []byte(l.squidConf(d)), 0o644); err != nil {
		return "", err
	}
	os.Chown(d, uid, -1)
	// Squid opens its log as user proxy: a log someone else created or
	// rotated in place (a test, logrotate run as root) must stay its own
	if _, err := os.Stat(filepath.Join(d, "access.log")); err == nil {
		os.Chown(filepath.Join(d, "access.log"), uid, -1)
	}
	return conf, nil
}

// ProxyFlavour is the proxy that runs (or runs at the next start).
func (l *Lab) ProxyFlavour() string {
	b, err := os.ReadFile(filepath.Join(l.Dir, "state", "proxy-flavour"))
	if f := strings.TrimSpace(string(b)); err == nil && f != "" {
		return f
	}
	return "tinyproxy"
}

func (l *Lab) startProxy() error {
	if l.ProxyFlavour() == "squid" {
		conf, err := l.writeSquid()
		if err != nil {
			return err
		}
		return l.start("squid", NSProxy, "squid", "-N", "-f", conf)
	}
	conf, filter := l.tinyproxyConf()
	d := filepath.Join(l.Dir, "proxy")
	if err := os.WriteFile(filepath.Join(d, "tinyproxy.conf"), []byte(conf), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d, "filter"), []byte(filter), 0o644); err != nil {
		return err
	}
	return l.start("tinyproxy", NSProxy, "tinyproxy", "-d", "-c", filepath.Join(d, "tinyproxy.conf"))
}

func (l *Lab) restartProxy() error {
	l.stop("tinyproxy")
	l.stop("squid")
	if err := l.startProxy(); err != nil {
		return err
	}
	return l.waitListen(NSProxy, "tcp", ProxyPort, l.ProxyFlavour())
}
