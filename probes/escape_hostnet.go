package probes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sandprobe/sandprobe/result"
)

// initNetNamespace is PROC_NET_INIT_INO, the inode recent kernels give the
// initial network namespace; older kernels number it dynamically (from
// 0xF0000000 up), so no other namespace ever has this one.
const initNetNamespace = 0xEFFFFFF9

// initNetOnly are net.core sysctls the kernel registers only in the initial
// network namespace (the host's): a namespace of its own does not have them.
var initNetOnly = []string{"netdev_max_backlog", "netdev_budget", "dev_weight", "bpf_jit_enable", "busy_poll", "busy_read", "rps_sock_flow_entries", "flow_limit_table_len"}

// hostInterfacePrefixes name interfaces a node has and a pod does not:
// bridges, veth ends, CNI devices, physical NICs.
var hostInterfacePrefixes = []string{"docker", "cni", "cbr", "flannel", "cali", "cilium", "kube-", "weave", "vxlan", "veth", "virbr", "br-", "ens", "enp", "eno", "wlan", "wlp", "bond", "tunl"}

func checkHostNet(_ context.Context, env *Env) []result.Finding {
	return []result.Finding{judgeHostNet("/proc/sys/net/core", "/proc/thread-self", underGVisor(env))}
}

// judgeHostNet tells the host's network namespace from one of the
// sandbox's own. On Linux the kernel says so itself: sysctls that exist only
// in the initial namespace, and the initial namespace's inode. gVisor's
// /proc/sys/net is the Sentry's, so there the only evidence is which
// interfaces the sandbox sees (a node's bridges and NICs, or gVisor's own).
func judgeHostNet(netCore, self string, gvisor bool) result.Finding {
	const exp = "a network namespace of its own (not the host's)"
	link, _ := os.Readlink(filepath.Join(self, "ns", "net"))
	ifaces := interfaces(filepath.Join(self, "net", "dev"))
	var hostLike []string
	for _, i := range ifaces {
		if slices.ContainsFunc(hostInterfacePrefixes, func(p string) bool { return strings.HasPrefix(i, p) }) {
			hostLike = append(hostLike, i)
		}
	}
	evidence := fmt.Sprintf("namespace %s; interfaces: %s", orNone(link), joinOr(ifaces, "none"))
	if gvisor {
		if len(hostLike) > 0 {
			return fail("", exp, "the host's network (gVisor with host networking): the node's interfaces are visible ("+firstN(hostLike, 4)+")", evidence)
		}
		return pass("", exp, "gVisor's own network stack: no node interface is visible", evidence+"; gVisor's /proc/sys/net is the Sentry's, so only the interfaces tell")
	}
	var present []string
	for _, name := range initNetOnly {
		if _, err := os.Stat(filepath.Join(netCore, name)); err == nil {
			present = append(present, name)
		}
	}
	evidence += fmt.Sprintf("; %s holds %d of the initial namespace's own sysctls (%s)", netCore, len(present), joinOr(present, "none"))
	switch {
	case len(present) >= 2:
		return fail("", exp, "the host's network namespace: the kernel shows it the sysctls only the initial namespace has ("+firstN(present, 3)+")", evidence)
	case nsInode(link) == initNetNamespace:
		return fail("", exp, "the host's network namespace (the kernel's initial one)", evidence+fmt.Sprintf("; inode %d is PROC_NET_INIT_INO", uint64(initNetNamespace)))
	}
	return pass("", exp, "a network namespace of its own: the initial namespace's sysctls are absent", evidence)
}

// interfaces reads the interface names from a net/dev file.
func interfaces(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, "|") {
			out = append(out, strings.TrimSpace(name))
		}
	}
	return out
}
