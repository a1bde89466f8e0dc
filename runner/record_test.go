package runner

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// A file record reads what was written after the mark; moved aside for a
// new file, or truncated, it is rotated: what the run wrote may be lost.
func TestFileRecord(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "access.log")
	os.WriteFile(path, []byte("before the run\n"), 0o644)
	rec := FileRecord{Path: path}
	m, err := rec.Mark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("during the run\n")
	f.Close()
	rc, _, err := rec.Since(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "during the run\n" {
		t.Errorf("read %q, want only what the run wrote", b)
	}
	os.Rename(path, path+".1")
	os.WriteFile(path, []byte("after rotation\n"), 0o644)
	if _, _, err := rec.Since(ctx, m); !errors.Is(err, ErrRotated) {
		t.Errorf("rotated: %v, want ErrRotated", err)
	}
	m, _ = rec.Mark(ctx)
	os.Truncate(path, 0)
	if _, _, err := rec.Since(ctx, m); !errors.Is(err, ErrRotated) {
		t.Errorf("truncated: %v, want ErrRotated", err)
	}
	os.Remove(path)
	if _, _, err := rec.Since(ctx, m); err == nil {
		t.Errorf("a removed record read without an error")
	}
}
