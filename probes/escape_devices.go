package probes

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/sandprobe/sandprobe/result"
)

// defaultDevice reports whether a character device is in the set every
// container runtime gives a container (the OCI runtime spec's defaults):
// null 1:3, zero 1:5, full 1:7, random 1:8, urandom 1:9, tty 5:0,
// console 5:1, ptmx 5:2 and the pseudo-terminals (136–143).
func defaultDevice(d devNode) bool {
	if d.block {
		return false
	}
	switch {
	case d.major == 1 && slices.Contains([]uint32{3, 5, 7, 8, 9}, d.minor):
		return true
	case d.major == 5 && d.minor <= 2:
		return true
	case d.major >= 136 && d.major <= 143:
		return true
	}
	return false
}

// gvisorDevices are devices gVisor's Sentry implements itself (FUSE, TUN):
// under gVisor they reach nothing of the host's.
func gvisorDevice(d devNode) bool {
	return !d.block && d.major == 10 && (d.minor == 229 || d.minor == 200)
}

func checkDevices(_ context.Context, env *Env) []result.Finding {
	mounts := visibleMounts(readMounts(os.DirFS("/")))
	return []result.Finding{judgeDevices(deviceNodes("/dev", mounts), env.Policy.Spec.Devices, underGVisor(env))}
}

// judgeDevices fails on every device node outside the default set that the
// policy does not declare (spec.devices), by device number, so a device
// under another name is still caught.
func judgeDevices(nodes []devNode, declared []string, gvisor bool) result.Finding {
	exp := "only the default device set (null, zero, full, random, urandom, tty, console, ptmx, pts)"
	if len(declared) > 0 {
		exp += " and " + joinOr(declared, "")
	}
	var extra, allowed []string
	for _, d := range nodes {
		switch {
		case defaultDevice(d):
		case slices.Contains(declared, d.path):
			allowed = append(allowed, d.String()+" (declared)")
		case gvisor && gvisorDevice(d):
			allowed = append(allowed, d.String()+" (gVisor's own)")
		default:
			extra = append(extra, d.String())
		}
	}
	evidence := fmt.Sprintf("%s under /dev and the mount points", count(len(nodes), "device node", "device nodes"))
	if len(allowed) > 0 {
		evidence += "; allowed: " + firstN(allowed, 4)
	}
	if len(extra) > 0 {
		return fail("", exp, fmt.Sprintf("%s beyond the default set: %s", count(len(extra), "device node", "device nodes"), firstN(extra, 5)), evidence)
	}
	return pass("", exp, "only default devices", evidence)
}
