//go:build !linux

package probes

import (
	"errors"
	"runtime"

	"golang.org/x/sys/unix"
)

// Elsewhere the checks cannot ask the kernel what they ask Linux: each
// says so as an error (never a pass). The package builds so that the
// offline commands (validate, render, drift -f, checks) run on macOS.

var errNotLinux = errors.New("needs Linux, running on " + runtime.GOOS)

const (
	capSysModule = 16 // Linux's numbers, so the catalogue's texts stay true
	capSysPtrace = 19
	stRdonly     = unix.MNT_RDONLY
	tmpfsMagic   = 0x01021994
)

func capSets() (map[string]uint64, error) { return nil, errNotLinux }
func noNewPrivs() (int, error)            { return 0, errNotLinux }
func seccompMode() (int, error)           { return 0, errNotLinux }
func ptraceSyscall() error                { return errNotLinux }
func kernelLog() (string, error)          { return "", errNotLinux }

func openFileLimit() uint64 { return 0 }
