package probes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/result"
)

// fakeProc writes a /proc with the given "pid comm ppid flags" processes and
// a pid namespace link, for the cases this machine cannot be put in.
func fakeProc(t *testing.T, nsLink string, procs ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, p := range procs {
		f := strings.Fields(p)
		d := filepath.Join(dir, f[0])
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := f[0] + " (" + f[1] + ") S " + f[2] + " 1 1 0 -1 " + f[3] + " 0 0\n"
		if err := os.WriteFile(filepath.Join(d, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if nsLink != "" {
		os.MkdirAll(filepath.Join(dir, "self", "ns"), 0o755)
		if err := os.Symlink(nsLink, filepath.Join(dir, "self", "ns", "pid")); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestHostPID: kernel threads give the host's PID namespace away on any
// runtime; the initial namespace's inode does on Linux only (gVisor numbers
// its own namespaces); this test binary itself runs in the host's.
func TestHostPID(t *testing.T) {
	kthreadd := "2 kthreadd 0 2129984" // PF_KTHREAD set
	cases := []struct {
		name   string
		proc   string
		gvisor bool
		want   result.Status
		actual string
	}{
		{"own namespace", fakeProc(t, "pid:[4026532391]", "1 sandprobe 0 4194560", "7 sh 0 4194560"), false, result.Pass, "of its own"},
		{"kernel threads visible", fakeProc(t, "pid:[4026532391]", "1 systemd 0 4194560", kthreadd), false, result.Fail, "kernel thread"},
		{"hidepid hides the threads, the inode does not", fakeProc(t, "pid:[4026531836]", "1 systemd 0 4194560"), false, result.Fail, "initial PID namespace"},
		{"gVisor's first namespace is its own", fakeProc(t, "pid:[4026531836]", "1 sandprobe 0 0"), true, result.Pass, "gVisor"},
		{"this test, on the host", "/proc", false, result.Fail, "host's PID namespace"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := judgeHostPID(c.proc, c.gvisor)
			if f.Status != c.want || !strings.Contains(f.Actual, c.actual) {
				t.Errorf("%s %q, want %s %q (%s)", f.Status, f.Actual, c.want, c.actual, f.Evidence)
			}
		})
	}
}
