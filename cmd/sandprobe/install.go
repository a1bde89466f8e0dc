package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sandprobe/sandprobe/report"
)

// cmdInstall copies this static binary to a path. The probe pod's init
// container runs it to carry sandprobe into the real sandbox image through an
// emptyDir, without changing that image.
func (a *app) cmdInstall(_ context.Context, args []string) int {
	fs := a.flagSet("install", "DEST")
	if err := fs.Parse(args); err != nil {
		return report.ExitBadInput
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return report.ExitBadInput
	}
	dest := fs.Arg(0)
	if err := installSelf(dest); err != nil {
		fmt.Fprintf(a.stderr, "sandprobe install: %v\n", err)
		return report.ExitCouldNotRun
	}
	return report.ExitOK
}

// installSelf copies the running executable to dest through a temporary file
// in the same directory, so a reader never sees half a binary.
func installSelf(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("open %s: %w", self, err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".sandprobe-install-*")
	if err != nil {
		return fmt.Errorf("install to %s: %w", dest, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("copy to %s: %w", dest, err)
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return fmt.Errorf("chmod %s: %w", dest, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install to %s: %w", dest, err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return fmt.Errorf("install to %s: %w", dest, err)
	}
	return nil
}
