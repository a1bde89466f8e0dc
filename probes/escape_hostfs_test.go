package probes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/result"
)

// TestHostFS: a mounted filesystem root that holds a system's tree fails, a
// workspace with its own bin/ and lib/ does not; the host's /dev, as this
// test binary sees it, holds its disk.
func TestHostFS(t *testing.T) {
	tree := func(dirs ...string) string {
		d := t.TempDir()
		for _, x := range dirs {
			os.MkdirAll(filepath.Join(d, x), 0o755)
		}
		return d
	}
	hostRoot := tree("etc", "usr", "bin", "sbin", "lib", "var", "proc", "sys")
	workspace := tree("bin", "lib", "src", ".git")
	find := func(fs []result.Finding, subject string) result.Finding {
		for _, f := range fs {
			if f.Subject == subject {
				return f
			}
		}
		t.Fatalf("no %q finding", subject)
		return result.Finding{}
	}
	cases := []struct {
		name  string
		mount mountEntry
		want  result.Status
	}{
		{"the host's root", mountEntry{point: hostRoot, root: "/", fstype: "ext4", source: "/dev/vda", opts: "ro"}, result.Fail},
		{"a subdirectory of it (hostPath /etc)", mountEntry{point: hostRoot, root: "/etc", fstype: "ext4", source: "/dev/vda"}, result.Pass},
		{"a workspace volume", mountEntry{point: workspace, root: "/", fstype: "ext4", source: "/dev/sdb"}, result.Pass},
		{"the sandbox's own root", mountEntry{point: "/", root: "/", fstype: "overlay"}, result.Pass},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if f := find(judgeHostFS(nil, []mountEntry{c.mount}), "host root"); f.Status != c.want {
				t.Errorf("%s %q, want %s", f.Status, f.Actual, c.want)
			}
		})
	}
	t.Run("block devices", func(t *testing.T) {
		if f := find(judgeHostFS([]devNode{{path: "/dev/null", major: 1, minor: 3}}, nil), "block devices"); f.Status != result.Pass {
			t.Errorf("char only: %s", f.Status)
		}
		nodes := deviceNodes("/dev", nil)
		var disk bool
		for _, n := range nodes {
			disk = disk || n.block
		}
		f := find(judgeHostFS(nodes, nil), "block devices")
		if disk != (f.Status == result.Fail) || (disk && !strings.Contains(f.Actual, "block devices are visible")) {
			t.Errorf("the host's /dev (a block device there: %v): %s %q", disk, f.Status, f.Actual)
		}
	})
}
