package probes

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/result"
)

// TestRunToolNotExecutable: a tool the image installs for its owner only
// (an image built to run as root; here no execute bit, which stops root
// too) is named as there but not runnable by the sandbox's uid, with the
// build-time fix — not "not found", which would send the user to install
// what is there. A runnable tool passes and a missing one is not found.
func TestRunToolNotExecutable(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexit 0\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("git", 0o644)
	write("ok-tool", 0o755)
	t.Setenv("PATH", dir)
	cases := []struct {
		name   string
		status result.Status
		actual string
		fix    string
	}{
		{"git", result.Fail, "is in the image but uid", "chmod 0755 " + filepath.Join(dir, "git")},
		{"ok-tool", result.Pass, "exited 0", ""},
		{"absent", result.Fail, "not found on PATH", "install absent in the image"},
	}
	for _, c := range cases {
		f := runTool(context.Background(), c.name, nil, 5*time.Second)
		if f.Status != c.status || !strings.Contains(f.Actual, c.actual) || !strings.Contains(f.Fix, c.fix) {
			t.Errorf("%s: %s %q (fix %q), want %s %q (fix %q)", c.name, f.Status, f.Actual, f.Fix, c.status, c.actual, c.fix)
		}
	}
}
