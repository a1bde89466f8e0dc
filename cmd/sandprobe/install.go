package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/report"
)

// cmdInstall copies this executable to a path: the probe pod's init
// container runs it from the sandprobe image to put the static binary into
// an emptyDir the probe container (in the real sandbox image, which may have
// no cp) mounts read-only.
func (a *app) cmdInstall(*pflag.FlagSet) runFunc {
	return func(_ context.Context, args []string) int {
		if err := installSelf(args[0]); err != nil {
			fmt.Fprintf(a.stderr, "sandprobe install: %v\n", err)
			return report.ExitCouldNotRun
		}
		return report.ExitOK
	}
}

// installSelf writes the running executable to dest atomically, mode 0555.
func installSelf(dest string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	src, err := os.Open(exe)
	if err != nil {
		return fmt.Errorf("open %s: %w", exe, err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".sandprobe-*")
	if err != nil {
		return fmt.Errorf("create %s: %w", dest, err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("copy %s to %s: %w", exe, dest, err)
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return fmt.Errorf("install %s: %w", dest, err)
	}
	return nil
}
