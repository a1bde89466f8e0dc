package probes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/result"
)

// procSysDirs hold the host-wide kernel tunables (kernel.core_pattern runs a
// program as root on the host when anything dumps core; kernel.modprobe is
// what the kernel runs to load a module). kernel.hostname and
// kernel.domainname belong to the sandbox's own UTS namespace and
// kernel.ns_last_pid (mode 0666, a write needs CAP_SYS_ADMIN) to its PID
// namespace: they are left out.
var procSysDirs = []string{"kernel", "vm", "fs"}
var procSysOwn = []string{"kernel/hostname", "kernel/domainname", "kernel/ns_last_pid"}

// sysDirs hold host-wide sysfs attributes (uevent_helper is run as root on
// every device event); the cgroup tree is escape.cgroup's.
var sysDirs = []string{"kernel", "kernel/mm/transparent_hugepage", "power", "module/kernel/parameters"}

func checkProcSys(_ context.Context, env *Env) []result.Finding {
	return judgeProcSys("/proc", "/sys")
}

// judgeProcSys asks the kernel, file by file, whether this process may write
// the host-wide tunables under /proc/sys, /proc/sysrq-trigger and /sys
// (access(2) only: nothing is written). A read-only mount answers EROFS; a
// writable mount still protects them from a non-root uid with EACCES.
func judgeProcSys(procDir, sysDir string) []result.Finding {
	var out []result.Finding
	var files []string
	for _, d := range procSysDirs {
		for _, f := range regularFiles(filepath.Join(procDir, "sys", d)) {
			rel, _ := filepath.Rel(filepath.Join(procDir, "sys"), f)
			if !slices.Contains(procSysOwn, rel) {
				files = append(files, f)
			}
		}
	}
	out = append(out, writableFiles(filepath.Join(procDir, "sys"), "no host-wide kernel tunable writable", files))
	trigger := filepath.Join(procDir, "sysrq-trigger")
	switch err := writableFile(trigger); {
	case err == nil:
		out = append(out, fail(trigger, "not writable", "writable (a write reboots or crashes the host)", describeMountOf(trigger)))
	case isNotExist(err):
		out = append(out, pass(trigger, "not writable", "absent", "stat: no such file"))
	default:
		out = append(out, pass(trigger, "not writable", accessWord(err), describeMountOf(trigger)))
	}
	var sys []string
	for _, d := range sysDirs {
		sys = append(sys, regularFiles(filepath.Join(sysDir, d))...)
	}
	out = append(out, writableFiles(sysDir, "no host-wide sysfs attribute writable", sys))
	return out
}

// writableFiles is one finding for a tree: the files this process may write.
func writableFiles(subject, exp string, files []string) result.Finding {
	var writable []string
	var first error
	for _, f := range files {
		err := writableFile(f)
		if err == nil {
			writable = append(writable, f)
		} else if first == nil {
			first = err
		}
	}
	evidence := fmt.Sprintf("access(W_OK) on %d files; %s", len(files), describeMountOf(subject))
	switch {
	case len(files) == 0:
		return pass(subject, exp, "nothing to write: no such files", evidence)
	case len(writable) > 0:
		return fail(subject, exp, fmt.Sprintf("%d of %d files are writable by this process (%s)", len(writable), len(files), firstN(writable, 3)), evidence)
	}
	return pass(subject, exp, fmt.Sprintf("none of %d files is writable (%s)", len(files), accessWord(first)), evidence)
}

// describeMountOf says whether the filesystem at p is mounted read-only.
func describeMountOf(p string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		if os.IsNotExist(err) {
			return p + " does not exist"
		}
		return "statfs " + p + ": " + errnoName(err)
	}
	if st.Flags&stRdonly != 0 {
		return p + " is mounted read-only"
	}
	return p + " is mounted read-write"
}
