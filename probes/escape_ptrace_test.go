package probes

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/result"
)

// TestPtrace: nothing is attached to. This test binary, root on the host,
// passes the kernel's ptrace check for the host's processes (fail); its own
// children do not count; Yama and a filtered ptrace(2) turn an admitted
// process into one that cannot be attached to.
func TestPtrace(t *testing.T) {
	testenv.RequireRoot(t)
	if f := judgePtrace("/proc", os.Getpid(), true, nil); f.Status != result.Fail {
		t.Errorf("root on the host: %s %q", f.Status, f.Actual)
	}
	if f := judgePtrace("/proc", os.Getpid(), true, unix.EPERM); f.Status != result.Pass || !strings.Contains(f.Actual, "filtered") {
		t.Errorf("ptrace(2) filtered: %s %q", f.Status, f.Actual)
	}
	// Yama's scope, read from a /proc that says 1, and no CAP_SYS_PTRACE.
	proc := fakeProc(t, "", "1 init 0 0", "2 other 0 0", "3 own-child 1 0", "4 its-child 3 0")
	for _, pid := range []string{"2", "3", "4"} {
		os.WriteFile(proc+"/"+pid+"/maps", nil, 0o444)
	}
	if f := judgePtrace(proc, 1, false, nil); f.Status != result.Fail || !strings.Contains(f.Actual, "1 other process can") || !strings.Contains(f.Actual, "2 other") {
		t.Errorf("classic rules, a readable other process: %s %q", f.Status, f.Actual)
	}
	os.MkdirAll(proc+"/sys/kernel/yama", 0o755)
	os.WriteFile(proc+"/sys/kernel/yama/ptrace_scope", []byte("1\n"), 0o644)
	if f := judgePtrace(proc, 1, false, nil); f.Status != result.Pass || !strings.Contains(f.Actual, "descendants") {
		t.Errorf("Yama 1: %s %q", f.Status, f.Actual)
	}
	if f := judgePtrace(fakeProc(t, "", "1 probe 0 0"), 1, true, nil); f.Status != result.Pass || !strings.Contains(f.Actual, "no other process") {
		t.Errorf("alone: %s %q", f.Status, f.Actual)
	}
}
