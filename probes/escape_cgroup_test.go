package probes

import (
	"os"
	"testing"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/result"
)

// TestCgroup: this test binary, root on the host, sees the host's cgroup
// hierarchies read-write and their release_agent: both fail. With no cgroup
// mount there is nothing to write. (A read-only mount is the local sandbox's
// healthy case, tested in runner/local.)
func TestCgroup(t *testing.T) {
	testenv.RequireRoot(t)
	host := judgeCgroup(visibleMounts(readMounts(os.DirFS("/"))))
	byName := map[string]result.Finding{}
	for _, f := range host {
		byName[f.Subject] = f
	}
	if f := byName["cgroupfs"]; f.Status != result.Fail {
		t.Errorf("host cgroupfs as root: %s %q (%s)", f.Status, f.Actual, f.Evidence)
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpu/release_agent"); err == nil { // cgroup v1, as on this machine
		if f := byName["release_agent"]; f.Status != result.Fail {
			t.Errorf("host release_agent as root: %s %q", f.Status, f.Actual)
		}
	}
	for _, f := range judgeCgroup(nil) {
		if f.Status != result.Pass {
			t.Errorf("no cgroup mount: %s %s %q", f.Subject, f.Status, f.Actual)
		}
	}
}
