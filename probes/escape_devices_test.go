package probes

import (
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/result"
)

// TestDevices: real device nodes (mknod in a temp /dev) are judged by their
// numbers, not their names: kvm renamed "null" is still kvm.
func TestDevices(t *testing.T) {
	testenv.RequireRoot(t)
	mk := func(dev, name string, mode uint32, major, minor uint32) {
		p := filepath.Join(dev, name)
		unix.Mkdir(filepath.Dir(p), 0o755)
		if err := unix.Mknod(p, mode|0o600, int(unix.Mkdev(major, minor))); err != nil {
			t.Fatal(err)
		}
	}
	defaults := func(dev string) {
		for name, mm := range map[string][2]uint32{"null": {1, 3}, "zero": {1, 5}, "full": {1, 7}, "random": {1, 8}, "urandom": {1, 9}, "tty": {5, 0}, "ptmx": {5, 2}, "pts/0": {136, 0}} {
			mk(dev, name, unix.S_IFCHR, mm[0], mm[1])
		}
	}
	cases := []struct {
		name     string
		extra    func(dev string)
		declared []string
		gvisor   bool
		want     result.Status
		actual   string
	}{
		{"the default set", func(string) {}, nil, false, result.Pass, "only default"},
		{"kvm", func(d string) { mk(d, "kvm", unix.S_IFCHR, 10, 232) }, nil, false, result.Fail, "kvm (char 10:232)"},
		{"kvm under a harmless name", func(d string) { mk(d, "nul", unix.S_IFCHR, 10, 232) }, nil, false, result.Fail, "nul (char 10:232)"},
		{"a disk", func(d string) { mk(d, "sda", unix.S_IFBLK, 8, 0) }, nil, false, result.Fail, "sda (block 8:0)"},
		{"fuse, declared", func(d string) { mk(d, "fuse", unix.S_IFCHR, 10, 229) }, []string{"/FUSE"}, false, result.Pass, ""},
		{"fuse under gVisor", func(d string) { mk(d, "fuse", unix.S_IFCHR, 10, 229); mk(d, "net/tun", unix.S_IFCHR, 10, 200) }, nil, true, result.Pass, ""},
		{"fuse under runc", func(d string) { mk(d, "fuse", unix.S_IFCHR, 10, 229) }, nil, false, result.Fail, "fuse"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := t.TempDir()
			defaults(dev)
			c.extra(dev)
			declared := make([]string, len(c.declared))
			for i, d := range c.declared {
				declared[i] = filepath.Join(dev, strings.ToLower(d))
			}
			f := judgeDevices(deviceNodes(dev, nil), declared, c.gvisor)
			if f.Status != c.want || !strings.Contains(f.Actual, c.actual) {
				t.Errorf("%s %q, want %s %q (%s)", f.Status, f.Actual, c.want, c.actual, f.Evidence)
			}
		})
	}
}
