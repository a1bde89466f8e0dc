//go:build linux

package probes

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// The Linux interfaces the checks ask the kernel through, in one place so
// the package builds elsewhere too (sys_other.go): the offline commands'
// macOS binaries read the catalogue; no check runs there.

const (
	capSysModule = unix.CAP_SYS_MODULE
	capSysPtrace = unix.CAP_SYS_PTRACE
	stRdonly     = unix.ST_RDONLY
	tmpfsMagic   = unix.TMPFS_MAGIC
)

// capSets reads the five capability sets with syscalls (capget, prctl)
// rather than /proc text, which gVisor and some runtimes fill differently.
func capSets() (map[string]uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil, fmt.Errorf("capget: %w", err)
	}
	join := func(lo, hi uint32) uint64 { return uint64(lo) | uint64(hi)<<32 }
	sets := map[string]uint64{
		"CapEff": join(data[0].Effective, data[1].Effective),
		"CapPrm": join(data[0].Permitted, data[1].Permitted),
		"CapInh": join(data[0].Inheritable, data[1].Inheritable),
	}
	var bnd, amb uint64
	for c := 0; c < 64; c++ {
		v, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past CAP_LAST_CAP
		}
		if err != nil {
			return nil, fmt.Errorf("prctl(PR_CAPBSET_READ, %d): %w", c, err)
		}
		if v == 1 {
			bnd |= 1 << uint(c)
		}
		a, err := unix.PrctlRetInt(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_IS_SET, uintptr(c), 0, 0)
		if err == nil && a == 1 {
			amb |= 1 << uint(c)
		}
	}
	sets["CapBnd"] = bnd
	sets["CapAmb"] = amb
	return sets, nil
}

// noNewPrivs is prctl(PR_GET_NO_NEW_PRIVS).
func noNewPrivs() (int, error) { return unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) }

// seccompMode is prctl(PR_GET_SECCOMP).
func seccompMode() (int, error) { return unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0) }

// ptraceSyscall asks whether ptrace(2) itself is allowed, harmlessly: a
// request about this very process, which is not our tracee, fails with
// ESRCH when the call reaches the kernel; a seccomp filter that forbids
// ptrace answers EPERM (or ENOSYS) before that.
func ptraceSyscall() error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_PEEKUSR, uintptr(os.Getpid()), 0, 0, 0, 0)
	if e == unix.ESRCH {
		return nil
	}
	return e
}

// kernelLog reads the kernel ring buffer without privileges. Linux usually
// refuses (dmesg_restrict, no CAP_SYSLOG): that refusal is evidence too.
func kernelLog() (string, error) {
	buf := make([]byte, 64<<10)
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// openFileLimit is the process's soft RLIMIT_NOFILE (Go raises it to the
// hard limit at start); 0 when it cannot be read.
func openFileLimit() uint64 {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return r.Cur
}
