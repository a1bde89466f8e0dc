package probes

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sourcegraph/conc"
	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/result"
)

// TestHostNet: this test binary runs in the host's network namespace and
// must be told so by the kernel's own evidence; a thread moved into a fresh
// namespace of its own (nothing is sent from either) must not. The probe
// itself never runs in the host's namespace: only this observation does.
func TestHostNet(t *testing.T) {
	t.Run("the host's namespace", func(t *testing.T) {
		if f := judgeHostNet("/proc/sys/net/core", "/proc/thread-self", false); f.Status != result.Fail || !strings.Contains(f.Actual, "host's network namespace") {
			t.Errorf("%s %q (%s)", f.Status, f.Actual, f.Evidence)
		}
	})
	t.Run("a namespace of its own", func(t *testing.T) {
		testenv.RequireRoot(t)
		var f result.Finding
		var wg conc.WaitGroup
		wg.Go(func() {
			// The thread that unshares runs nothing else: it ends with this
			// goroutine (LockOSThread without Unlock).
			runtime.LockOSThread()
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				f = result.Finding{Status: result.Error, Actual: err.Error()}
				return
			}
			f = judgeHostNet("/proc/sys/net/core", "/proc/thread-self", false)
		})
		wg.Wait()
		if f.Status != result.Pass {
			t.Errorf("%s %q (%s)", f.Status, f.Actual, f.Evidence)
		}
	})
	t.Run("gVisor sees only its interfaces", func(t *testing.T) {
		for _, c := range []struct {
			dev  string
			want result.Status
		}{
			{"lo: 0 0\n  eth0: 0 0\n", result.Pass},
			{"lo: 0 0\n  eth0: 0 0\ndocker0: 0 0\nveth1a2b: 0 0\n", result.Fail},
		} {
			self := t.TempDir()
			os.MkdirAll(filepath.Join(self, "net"), 0o755)
			os.WriteFile(filepath.Join(self, "net", "dev"), []byte("Inter-|   Receive\n face |bytes\n"+c.dev), 0o644)
			if f := judgeHostNet(t.TempDir(), self, true); f.Status != c.want {
				t.Errorf("%q: %s %q, want %s", c.dev, f.Status, f.Actual, c.want)
			}
		}
	})
}
