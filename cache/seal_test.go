package cache

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/result"
)

// TestPathLessMatchesWalk: the order a manifest is checked in is the order
// the walk visits paths, whatever bytes the names hold.
func TestPathLessMatchesWalk(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"a/b/c", "a.b/x", "a-b", "a b/y", "ab", "a/b.c", "B", "é/z", "a/b-c/d", "a0", "a/.hidden", "_", "~"} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte(p), 0o644)
	}
	var prev string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		if prev != "" && !pathLess(prev, rel) {
			t.Errorf("walk visits %q after %q, pathLess disagrees", rel, prev)
		}
		prev = rel
		return nil
	})
}

// TestSealedChanges: a mode change, a link re-pointed, a file turned into a
// directory are named; a damaged manifest is refused, never half-trusted.
func TestSealedChanges(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "pkgs/a"), 0o755)
	os.WriteFile(filepath.Join(root, "pkgs/a/index.js"), []byte("ok"), 0o644)
	os.WriteFile(filepath.Join(root, "pkgs/b"), []byte("ok"), 0o644)
	os.Symlink("a/index.js", filepath.Join(root, "pkgs/current"))
	manifest := seal(t, root)

	os.Chmod(filepath.Join(root, "pkgs/a/index.js"), 0o666)
	os.Remove(filepath.Join(root, "pkgs/current"))
	os.Symlink("/etc/passwd", filepath.Join(root, "pkgs/current"))
	os.Remove(filepath.Join(root, "pkgs/b"))
	os.Mkdir(filepath.Join(root, "pkgs/b"), 0o755)
	fs, _ := collect(t, root, manifest)
	want := map[string]string{"pkgs/a/index.js": "mode changed since the seal (0644 → 0666)", "pkgs/current": "link target changed", "pkgs/b": "was a file, now a directory"}
	got := map[string]string{}
	for _, f := range failing(fs) {
		rel, _ := filepath.Rel(root, f.Subject)
		got[rel] = f.Actual
	}
	for rel, w := range want {
		if !strings.Contains(got[rel], w) {
			t.Errorf("%s: %q, want %q", rel, got[rel], w)
		}
	}

	lines := strings.Split(strings.TrimSpace(string(manifest)), "\n")
	damaged := map[string]string{
		"cut short":    strings.Join(lines[:len(lines)-1], "\n") + "\n",
		"edited":       strings.Replace(string(manifest), `"pkgs/b"`, `"pkgs/c"`, 1),
		"out of order": strings.Join(append([]string{lines[0], lines[1], lines[3], lines[2]}, lines[4:]...), "\n") + "\n",
		"not one":      "hello\n",
	}
	wantErr := map[string]string{"cut short": "no end line", "edited": "the end line does not match", "out of order": "out of order", "not one": "not a manifest"}
	for name, m := range damaged {
		_, err := Verify(context.Background(), root, bytes.NewReader([]byte(m)), func(result.Finding) {}, Options{})
		if err == nil || !strings.Contains(err.Error(), wantErr[name]) {
			t.Errorf("%s manifest: %v", name, err)
		}
		if _, err := CheckManifest(strings.NewReader(m)); err == nil {
			t.Errorf("%s manifest: CheckManifest accepts it", name)
		}
	}
}
