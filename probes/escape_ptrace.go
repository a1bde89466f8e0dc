package probes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/result"
)

func checkPtrace(_ context.Context, env *Env) []result.Finding {
	sets, err := capSets()
	if err != nil {
		return []result.Finding{errorf("", "%v", err)}
	}
	return []result.Finding{judgePtrace("/proc", os.Getpid(), sets["CapEff"]&(1<<capSysPtrace) != 0, ptraceSyscall())}
}

// judgePtrace looks for another process this one could attach to, without
// attaching to anything. Opening /proc/PID/maps (mode 0444, closed unread)
// makes the kernel run its ptrace access check and nothing else
// (PTRACE_MODE_READ): same uid and a dumpable target, or CAP_SYS_PTRACE. Attaching needs that and more, which
// this reads without trying: Yama's ptrace_scope (1: descendants only,
// 2: CAP_SYS_PTRACE only, 3: never) and a seccomp filter on ptrace(2).
// The probe's own threads and children are not "another process".
func judgePtrace(procDir string, self int, capPtrace bool, syscallErr error) result.Finding {
	const exp = "no other process this one can ptrace"
	procs, err := listProcs(procDir)
	if err != nil {
		return errorf("", "%v", err)
	}
	scope := -1 // no Yama: the classic rules
	if b, err := os.ReadFile(filepath.Join(procDir, "sys/kernel/yama/ptrace_scope")); err == nil {
		scope, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	mine := map[int]bool{self: true}
	for changed := true; changed; { // the probe's descendants, whatever their order in /proc
		changed = false
		for _, p := range procs {
			if !mine[p.pid] && mine[p.ppid] {
				mine[p.pid], changed = true, true
			}
		}
	}
	var readable []string
	others := 0
	for _, p := range procs {
		if mine[p.pid] || p.kthread || p.state == 'Z' || p.state == 'X' {
			continue
		}
		others++
		f, err := os.Open(filepath.Join(procDir, strconv.Itoa(p.pid), "maps"))
		if err != nil {
			continue
		}
		f.Close()
		// An exiting process has no memory: the kernel opens its maps
		// without a check. One that ended meanwhile proves nothing.
		if p.gone(procDir) {
			others--
			continue
		}
		readable = append(readable, fmt.Sprintf("%d %s (uid %d)", p.pid, p.comm, p.uid))
	}
	evidence := fmt.Sprintf("%s visible; the kernel's ptrace read check admits %d of them; %s; CAP_SYS_PTRACE %s; ptrace(2) %s",
		count(others, "other process", "other processes"), len(readable), yamaWord(scope), heldWord(capPtrace), syscallWord(syscallErr))
	if len(readable) > 0 {
		evidence += "; admitted: " + firstN(readable, 4)
	}
	switch {
	case others == 0:
		return pass("", exp, "no other process is visible", evidence)
	case len(readable) == 0:
		return pass("", exp, "the kernel's ptrace check refuses every other process", evidence)
	case syscallErr != nil:
		return pass("", exp, "ptrace(2) is filtered ("+errnoName(syscallErr)+"), though the kernel's read check admits "+firstN(readable, 2), evidence)
	case scope == 3:
		return pass("", exp, "Yama forbids every attach (ptrace_scope 3)", evidence)
	case scope == 1 && !capPtrace:
		return pass("", exp, "Yama ptrace_scope 1 lets this process attach only to its own descendants", evidence)
	case scope == 2 && !capPtrace:
		return pass("", exp, "Yama ptrace_scope 2 lets only a holder of CAP_SYS_PTRACE attach", evidence)
	}
	return fail("", exp, fmt.Sprintf("%s can be ptraced: %s", count(len(readable), "other process", "other processes"), firstN(readable, 3)), evidence)
}

func yamaWord(scope int) string {
	if scope < 0 {
		return "no Yama (classic rules: any process of the same uid)"
	}
	return fmt.Sprintf("Yama ptrace_scope %d", scope)
}

func heldWord(b bool) string {
	if b {
		return "held"
	}
	return "not held"
}

func syscallWord(err error) string {
	if err == nil {
		return "reaches the kernel (ESRCH for a request about itself)"
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return "refused before the kernel: " + unix.ErrnoName(errno)
	}
	return err.Error()
}
