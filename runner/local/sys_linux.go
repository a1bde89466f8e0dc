//go:build linux

package local

import "syscall"

// sandboxAttr starts the sandbox's first process in new mount, UTS, IPC,
// PID (unless the sandbox shares the host's) and network (unless it joins
// a named one) namespaces, killed if the runner dies.
func sandboxAttr(sb Sandbox) *syscall.SysProcAttr {
	flags := syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC
	if !sb.HostPID {
		flags |= syscall.CLONE_NEWPID
	}
	if sb.NetNS == "" {
		flags |= syscall.CLONE_NEWNET
	}
	return &syscall.SysProcAttr{Cloneflags: uintptr(flags), Pdeathsig: syscall.SIGKILL}
}
