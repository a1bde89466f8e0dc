//go:build !linux

package local

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// The local backend builds sandboxes from Linux namespaces: elsewhere it
// builds (so the CLI's offline commands do) and refuses to run.

// Init is the sandbox's first process, which only Linux can start.
func Init() int {
	fmt.Fprintf(os.Stderr, "sandprobe: the local sandbox needs Linux namespaces, running on %s\n", runtime.GOOS)
	return 3
}

func sandboxAttr(Sandbox) *syscall.SysProcAttr { return nil }
