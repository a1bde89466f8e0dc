package probes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandprobe/sandprobe/result"
)

// initPIDNamespace is PROC_PID_INIT_INO: the inode of the kernel's first PID
// namespace (the host's), the same on every Linux since 3.8.
const initPIDNamespace = 0xEFFFFFFC

func checkHostPID(_ context.Context, env *Env) []result.Finding {
	return []result.Finding{judgeHostPID("/proc", underGVisor(env))}
}

// judgeHostPID looks for the host's PID namespace two ways. Kernel threads
// (kthreadd and its children) live only in the initial PID namespace, so
// seeing one means the sandbox sees the host's processes; that holds on any
// runtime, and gVisor never shows one. The namespace's inode is the
// kernel's constant for the initial namespace on Linux (it also catches a
// /proc mounted with hidepid, which hides kernel threads); under gVisor it
// numbers the Sentry's own namespaces and proves nothing, so it is left out.
func judgeHostPID(procDir string, gvisor bool) result.Finding {
	const exp = "a PID namespace of its own (no host process visible)"
	procs, err := listProcs(procDir)
	if err != nil {
		return errorf("", "%v", err)
	}
	link, _ := os.Readlink(filepath.Join(procDir, "self", "ns", "pid"))
	var kthreads []string
	for _, p := range procs {
		if p.kthread {
			kthreads = append(kthreads, fmt.Sprintf("%d %s", p.pid, p.comm))
		}
	}
	evidence := fmt.Sprintf("namespace %s; %s visible", orNone(link), count(len(procs), "process", "processes"))
	if len(kthreads) > 0 {
		evidence += "; kernel threads: " + firstN(kthreads, 4)
		return fail("", exp, fmt.Sprintf("the host's PID namespace: %s visible (%s)", count(len(kthreads), "kernel thread is", "kernel threads are"), firstN(kthreads, 2)), evidence)
	}
	if gvisor {
		return pass("", exp, "gVisor's own PID namespace: no kernel thread is visible", evidence+"; gVisor's namespaces are the Sentry's, never the host's")
	}
	if nsInode(link) == initPIDNamespace {
		return fail("", exp, "the kernel's initial PID namespace (the host's), though its kernel threads are hidden", evidence+fmt.Sprintf("; inode %d is PROC_PID_INIT_INO", uint64(initPIDNamespace)))
	}
	return pass("", exp, "a PID namespace of its own: no kernel thread is visible", evidence)
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
