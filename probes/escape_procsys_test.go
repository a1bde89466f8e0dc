package probes

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/result"
)

// TestProcSys: this test binary, root on the host, may write the host's
// /proc/sys and /sys (it writes nothing): both fail. A tree whose only
// writable tunable is one of the sandbox's own namespace (hostname) passes.
func TestProcSys(t *testing.T) {
	testenv.RequireRoot(t)
	status := func(fs []result.Finding) map[string]result.Status {
		out := map[string]result.Status{}
		for _, f := range fs {
			out[f.Subject] = f.Status
		}
		return out
	}
	host := status(judgeProcSys("/proc", "/sys"))
	if host["/proc/sys"] != result.Fail || host["/sys"] != result.Fail {
		t.Errorf("root on the host: %v", host)
	}
	proc := t.TempDir()
	os.MkdirAll(filepath.Join(proc, "sys", "kernel"), 0o755)
	os.WriteFile(filepath.Join(proc, "sys", "kernel", "hostname"), []byte("sandbox\n"), 0o644)
	own := status(judgeProcSys(proc, t.TempDir()))
	if own[filepath.Join(proc, "sys")] != result.Pass || own[filepath.Join(proc, "sysrq-trigger")] != result.Pass {
		t.Errorf("own namespace only: %v", own)
	}
}
