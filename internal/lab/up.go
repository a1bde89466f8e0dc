package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Up builds the lab (tearing down any previous one first). A failure, or
// ctx ending (Ctrl-C), tears the half-built lab down again.
func (l *Lab) Up(ctx context.Context) (err error) {
	t0 := time.Now()
	if anyNamespace() || exists(filepath.Join(l.Dir, Marker)) {
		l.say("tearing down the previous lab")
	}
	if err := l.Down(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			fmt.Fprintln(os.Stderr, "lab: up failed; tearing down the half-built lab")
			l.Down()
		}
	}()
	steps := []func() error{l.makeDirs, func() error { return writeCerts(l.Dir) }, l.buildNet, l.applyNft, l.writeResolv,
		l.startDNS, l.startProxy, l.startAllServers, l.startAuthority, l.waitUp, l.writeEnv, l.writeJSON,
		func() error {
			return os.WriteFile(filepath.Join(l.Dir, "source-hash"), []byte(l.SourceHash+"\n"), 0o644)
		}}
	for _, step := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := step(); err != nil {
			return err
		}
	}
	l.say("up in %.2fs; env: %s", time.Since(t0).Seconds(), filepath.Join(l.Dir, "lab.env"))
	return nil
}

func (l *Lab) makeDirs() error {
	for _, d := range []string{"bin", "pids", "logs", "tls", "dns", "proxy", "state", "run", "served"} {
		if err := os.MkdirAll(filepath.Join(l.Dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(l.Dir, Marker), nil, 0o644); err != nil {
		return err
	}
	if err := l.setBroken(nil); err != nil {
		return err
	}
	// the daemons run from the lab's own copy of this program, where
	// hack/leftovers.sh finds them
	return copyFile(l.Bin, l.bin(), 0o755)
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("the lab program %s: %w", from, err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func (l *Lab) startAllServers() error {
	for _, s := range servers {
		if err := l.startServer(s[0], s[1], s[2]); err != nil {
			return err
		}
	}
	return nil
}

func (l *Lab) waitUp() error {
	if err := l.waitListen(NSDNS, "udp", ResolverPort, "dnsmasq"); err != nil {
		return err
	}
	if err := l.waitReady("authority"); err != nil {
		return err
	}
	if err := l.waitListen(NSProxy, "tcp", ProxyPort, l.ProxyFlavour()); err != nil {
		return err
	}
	for _, s := range servers {
		if err := l.waitReady(s[0]); err != nil {
			return err
		}
	}
	return nil
}

// sysctls of every lab namespace: no DAD or RA, and no ICMP rate limit
// (rejects stay deterministic when hit concurrently).
var sysctls = [][2]string{
	{"net/ipv6/conf/all/accept_dad", "0"}, {"net/ipv6/conf/default/accept_dad", "0"},
	{"net/ipv6/conf/all/accept_ra", "0"}, {"net/ipv6/conf/default/accept_ra", "0"},
	{"net/ipv4/icmp_ratelimit", "0"}, {"net/ipv4/icmp_ratemask", "0"}, {"net/ipv6/icmp/ratelimit", "0"},
	{"net/ipv4/icmp_msgs_per_sec", "1000000"}, {"net/ipv4/icmp_msgs_burst", "1000000"},
}

func setSysctls(ns string, kv [][2]string) {
	var script strings.Builder
	for _, s := range kv {
		fmt.Fprintf(&script, "echo %s > /proc/sys/%s 2>/dev/null\n", s[1], s[0])
	}
	exec.Command("ip", "netns", "exec", ns, "sh", "-c", script.String()).Run()
}

// buildNet makes the namespaces and links. Every veth is created inside
// sp-router with its peer created directly in the target namespace, so no
// lab interface ever exists in the root namespace; service namespaces route
// only the lab, the sandbox's default route goes to the router, which has
// none.
func (l *Lab) buildNet() error {
	for _, ns := range Namespaces {
		if err := run("ip", "netns", "add", ns); err != nil {
			return err
		}
		setSysctls(ns, sysctls)
	}
	setSysctls(NSRouter, [][2]string{{"net/ipv4/ip_forward", "1"}, {"net/ipv6/conf/all/forwarding", "1"}})
	var b strings.Builder
	b.WriteString("link set lo up\n")
	for _, k := range Links {
		fmt.Fprintf(&b, "link add sp-r-%s type veth peer name sp-%s0 netns %s\naddr add %s.1/24 dev sp-r-%s\n"+
			"addr add %s::1/64 dev sp-r-%s nodad\nlink set sp-r-%s up\n", k.Short, k.Short, k.NS, k.V4, k.Short, k.V6, k.Short, k.Short)
	}
	if err := runIn(b.String(), "ip", "-n", NSRouter, "-batch", "-"); err != nil {
		return err
	}
	for _, k := range Links {
		b.Reset()
		fmt.Fprintf(&b, "link set lo up\nlink set sp-%s0 up\n", k.Short)
		for _, a := range nsAddrs(k.NS) {
			fmt.Fprintf(&b, "addr add %s/24 dev sp-%s0\naddr add %s/64 dev sp-%s0 nodad\n", a[0], k.Short, a[1], k.Short)
		}
		if k.NS == NSSandbox {
			fmt.Fprintf(&b, "route add default via %s.1 dev sp-%s0\nroute add default via %s::1 dev sp-%s0\n", k.V4, k.Short, k.V6, k.Short)
		} else {
			fmt.Fprintf(&b, "route add 10.99.0.0/16 via %s.1 dev sp-%s0\nroute add fd99::/48 via %s::1 dev sp-%s0\n", k.V4, k.Short, k.V6, k.Short)
		}
		if err := runIn(b.String(), "ip", "-n", k.NS, "-batch", "-"); err != nil {
			return err
		}
	}
	return nil
}

// writeResolv: the sandbox, the proxy and the control resolve through the
// lab resolver; the proxy and the control vantage also know every lab name
// (as any server outside the sandbox does: a control that asked the
// sandbox's resolver would prove nothing about the must-fail names).
func (l *Lab) writeResolv() error {
	var hosts strings.Builder
	for _, r := range labRecords() {
		fmt.Fprintf(&hosts, "%s %s\n%s %s\n", r.IP4, r.Name, r.IP6, r.Name)
	}
	for _, ns := range []string{NSSandbox, NSProxy, NSControl} {
		d := filepath.Join(etcNetns, ns)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		resolv := fmt.Sprintf("nameserver %s\nnameserver %s\noptions timeout:1 attempts:2\n", ResolverIP4, ResolverIP6)
		h := "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
		if ns != NSSandbox {
			h += hosts.String()
		}
		if err := os.WriteFile(filepath.Join(d, "resolv.conf"), []byte(resolv), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, "hosts"), []byte(h), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Down removes everything of the lab; harmless when nothing is up.
func (l *Lab) Down() error {
	l.detach()
	killLabProcesses()
	for _, ns := range Namespaces {
		if nsExists(ns) {
			exec.Command("ip", "netns", "del", ns).Run()
		}
		os.RemoveAll(filepath.Join(etcNetns, ns))
	}
	os.Remove(etcNetns) // only when empty
	// belt and braces: nothing of ours in the root namespace
	links := []string{IfSandbox}
	for _, k := range Links {
		links = append(links, "sp-r-"+k.Short, "sp-"+k.Short+"0")
	}
	for _, ln := range links {
		if exec.Command("ip", "link", "show", ln).Run() == nil {
			exec.Command("ip", "link", "del", ln).Run()
		}
	}
	if exec.Command("nft", "list", "table", "inet", "sp_cni").Run() == nil {
		exec.Command("nft", "delete", "table", "inet", "sp_cni").Run()
	}
	if exists(filepath.Join(l.Dir, Marker)) {
		if err := os.RemoveAll(l.Dir); err != nil {
			return err
		}
	}
	os.Remove(l.Dir + ".lock") // the caller holds it; one lab at a time
	return nil
}

// killLabProcesses kills every process living in a lab namespace (daemons,
// servers, `lab exec` leftovers): TERM twice, then KILL.
func killLabProcesses() {
	for round := 1; round <= 3; round++ {
		pids := labPids()
		if len(pids) == 0 {
			return
		}
		sig := syscall.SIGTERM
		if round == 3 {
			sig = syscall.SIGKILL
		}
		for _, p := range pids {
			syscall.Kill(p, sig)
		}
		for range 50 {
			if len(labPids()) == 0 {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func labPids() []int {
	var pids []int
	for _, ns := range Namespaces {
		if !nsExists(ns) {
			continue
		}
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		for _, f := range strings.Fields(string(out)) {
			if p, err := strconv.Atoi(f); err == nil {
				pids = append(pids, p)
			}
		}
	}
	return pids
}
