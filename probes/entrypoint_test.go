package probes

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

func testPolicy(t *testing.T, extra string) *policy.Policy {
	t.Helper()
	p, err := policy.Load([]byte(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: unit}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  identity: {uid: 65532, gid: 65532}
  filesystem: {readOnlyRoot: true, writable: [/workspace, /tmp]}
` + extra))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestImageEntrypoint runs real commands; the read-only-root case against a
// real image is in runner/docker's sabotage tests.
func TestImageEntrypoint(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	cases := []struct {
		name   string
		argv   []string
		want   result.Status
		actual string
		fix    string
	}{
		{"exits 0", []string{"sh", "-c", "exit 0"}, result.Pass, "exited 0", ""},
		{"keeps running", []string{"sh", "-c", "sleep 30 & echo $! >" + pidFile + "; wait"}, result.Pass, "still running after", ""},
		{"writes the read-only root", []string{"sh", "-c", "echo 'app-start: 5: cannot create /var/run/app/pid: Read-only file system' >&2; exit 2"},
			result.Fail, "exited 2 after", "make it write /var/run/app/pid under a declared writable path (/workspace, /tmp)"},
		{"python-style read-only error", []string{"sh", "-c", "echo \"OSError: [Errno 30] Read-only file system: '/srv/cache'\" >&2; exit 1"},
			result.Fail, "it writes /srv/cache on the read-only root", "/srv/cache under a declared writable path"},
		{"permission denied", []string{"sh", "-c", "echo 'mkdir: cannot create directory /data: Permission denied' >&2; exit 1"},
			result.Fail, "permission denied on /data", "uid 65532 cannot use"},
		{"missing helper", []string{"sh", "-c", "echo 'sh: 1: gosu: not found' >&2; exit 127"},
			result.Fail, "gosu not found", "install it"},
		{"unexplained failure", []string{"sh", "-c", "exit 9"}, result.Fail, "exited 9", "docker run --read-only --user 65532:65532"},
		{"entrypoint not in the image", []string{"/no/such/entrypoint", "serve"}, result.Fail, "cannot start", "ENTRYPOINT/CMD names /no/such/entrypoint"},
		{"command not on PATH", []string{"sandprobe-no-such-command"}, result.Fail, "not found in the image", "install it in the image"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := &Env{Policy: testPolicy(t, ""), Environ: os.Environ(), ImageCommand: c.argv, ImageCommandTimeout: 500 * time.Millisecond}
			start := time.Now()
			fs := checkImageEntrypoint(context.Background(), env)
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("took %s: the grace period does not bound the check", took)
			}
			f := fs[0]
			if f.Status != c.want || !strings.Contains(f.Actual, c.actual) {
				t.Fatalf("%s %q, want %s %q (evidence %s)", f.Status, f.Actual, c.want, c.actual, f.Evidence)
			}
			if c.want == result.Fail && !strings.Contains(f.Fix, c.fix) {
				t.Errorf("fix %q does not contain %q", f.Fix, c.fix)
			}
		})
	}
	// The grace period's end stops the whole process group, not only sh.
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(2 * time.Second)
	for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Errorf("the entrypoint's child %d outlived the check", pid)
	}
}
