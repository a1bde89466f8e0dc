package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

// TestCopySelf: copy-self copies the binary (an init container's job); its
// old name, install, still works but is listed nowhere.
func TestCopySelf(t *testing.T) {
	bin := testenv.Binary(t)
	dest := filepath.Join(t.TempDir(), "sandprobe")
	if code, _, stderr := testenv.Exec(t, bin, "copy-self", dest); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if code, _, stderr := testenv.Exec(t, bin, "install", filepath.Join(t.TempDir(), "old-name")); code != 0 {
		t.Fatalf("install (the old name): exit %d: %s", code, stderr)
	}
	if _, help, _ := testenv.Exec(t, bin, "help"); strings.Contains(help, "\n  install ") || !strings.Contains(help, "\n  copy-self ") {
		t.Errorf("the command list names install, or not copy-self:\n%s", help)
	}
	fi, err := os.Stat(dest)
	if err != nil || fi.Mode().Perm() != 0o555 {
		t.Fatalf("%v %v", fi, err)
	}
	if code, out, _ := testenv.Exec(t, dest, "version"); code != 0 || out == "" {
		t.Fatalf("the copy does not run: %d %q", code, out)
	}
	if code, _, _ := testenv.Exec(t, bin, "copy-self", "/nonexistent-dir/sandprobe"); code != 3 {
		t.Errorf("unwritable destination: exit %d, want 3", code)
	}
	if code, _, _ := testenv.Exec(t, bin, "copy-self"); code != 2 {
		t.Errorf("no destination: exit %d, want 2", code)
	}
}
