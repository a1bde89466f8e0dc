package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

func TestInstallCopiesItself(t *testing.T) {
	bin := testenv.Binary(t)
	dest := filepath.Join(t.TempDir(), "sandprobe")
	if code, _, stderr := testenv.Exec(t, bin, "install", dest); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	fi, err := os.Stat(dest)
	if err != nil || fi.Mode().Perm() != 0o555 {
		t.Fatalf("%v %v", fi, err)
	}
	if code, out, _ := testenv.Exec(t, dest, "version"); code != 0 || out == "" {
		t.Fatalf("the copy does not run: %d %q", code, out)
	}
	if code, _, _ := testenv.Exec(t, bin, "install", "/nonexistent-dir/sandprobe"); code != 3 {
		t.Errorf("unwritable destination: exit %d, want 3", code)
	}
	if code, _, _ := testenv.Exec(t, bin, "install"); code != 2 {
		t.Errorf("no destination: exit %d, want 2", code)
	}
}
