//go:build linux

package local

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// deniedSyscalls is a RuntimeDefault-like deny list: what a sandboxed
// process has no business calling. Denied calls fail with EPERM.
var deniedSyscalls = []uintptr{
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE,
	unix.SYS_DELETE_MODULE, unix.SYS_REBOOT, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_MOUNT,
	unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_UNSHARE, unix.SYS_SETNS, unix.SYS_BPF,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY, unix.SYS_ACCT, unix.SYS_SETTIMEOFDAY,
	unix.SYS_CLOCK_SETTIME, unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_USERFAULTFD, unix.SYS_PERF_EVENT_OPEN,
	unix.SYS_FSOPEN, unix.SYS_FSMOUNT, unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_QUOTACTL,
}

// auditArch is the seccomp_data.arch value for this build's architecture.
func auditArch() (uint32, error) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, nil
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, nil
	}
	return 0, fmt.Errorf("seccomp: no filter for %s", runtime.GOARCH)
}

// installSeccomp loads a classic-BPF filter on the calling thread: kill on a
// foreign architecture, EPERM for the deny list, allow the rest.
func installSeccomp() error {
	arch, err := auditArch()
	if err != nil {
		return err
	}
	const (
		offNr   = 0 // offsetof(struct seccomp_data, nr)
		offArch = 4 // offsetof(struct seccomp_data, arch)
	)
	ld := func(off uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
	}
	ret := func(v uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: v} }
	jeq := func(v uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: v, Jt: jt, Jf: jf}
	}
	prog := []unix.SockFilter{
		ld(offArch),
		jeq(arch, 1, 0),
		ret(unix.SECCOMP_RET_KILL_PROCESS),
		ld(offNr),
	}
	n := len(deniedSyscalls)
	for i, nr := range deniedSyscalls {
		// On a match jump to the EPERM return after the remaining tests and the allow.
		prog = append(prog, jeq(uint32(nr), uint8(n-i), 0))
	}
	prog = append(prog, ret(unix.SECCOMP_RET_ALLOW), ret(unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM)))
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("install seccomp filter: %w", err)
	}
	return nil
}
