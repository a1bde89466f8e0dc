package probes

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandprobe/sandprobe/result"
)

// DefaultImageCommandTimeout is how long the image's own command runs before
// it counts as started.
const DefaultImageCommandTimeout = 5 * time.Second

// checkImageEntrypoint starts the image's own entrypoint and command the way
// the container would — same uid, mounts, capabilities, environment and
// working directory, since it runs inside the probe's container — and watches
// it for a short grace period. Still running at the end means it started;
// exiting 0 means it did its job; exiting non-zero means it breaks under these
// constraints, and its output usually says where.
func checkImageEntrypoint(ctx context.Context, env *Env) []result.Finding {
	argv := env.ImageCommand
	timeout := env.ImageCommandTimeout
	if timeout <= 0 {
		timeout = DefaultImageCommandTimeout
	}
	cmdline := strings.Join(argv, " ")
	exp := fmt.Sprintf("`%s` starts and does not fail within %s", cmdline, timeout)
	path, err := exec.LookPath(argv[0])
	if err != nil {
		f := fail(argv[0], exp, "cannot start: "+errnoName(errors.Unwrap(err)), "PATH="+getenv("PATH"))
		if errors.Is(err, exec.ErrNotFound) {
			f.Actual = "not found in the image (PATH=" + getenv("PATH") + ")"
		}
		f.Fix = fmt.Sprintf("the image's ENTRYPOINT/CMD names %s: install it in the image, executable by the sandbox uid", argv[0])
		return []result.Finding{f}
	}
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := &tailBuffer{max: 8 << 10}
	cmd := exec.CommandContext(runCtx, path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = env.Environ
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so that the grace period's end stops everything
	// it started, not only the first process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start).Round(time.Millisecond)
	evidence := fmt.Sprintf("%s ran %s", path, took)
	if o := out.String(); o != "" {
		evidence += "; output: " + clipText(strings.Join(strings.Fields(o), " "), 400)
	}
	switch {
	case runCtx.Err() == context.DeadlineExceeded && ctx.Err() == nil:
		return []result.Finding{pass(argv[0], exp, fmt.Sprintf("still running after %s (stopped by the probe)", timeout), evidence)}
	case ctx.Err() != nil:
		return []result.Finding{errorf(argv[0], "interrupted: %v", ctx.Err())}
	case err == nil:
		return []result.Finding{pass(argv[0], exp, fmt.Sprintf("exited 0 after %s", took), evidence)}
	}
	var ee *exec.ExitError
	act := err.Error()
	if errors.As(err, &ee) {
		act = fmt.Sprintf("exited %d after %s", ee.ExitCode(), took)
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			act = fmt.Sprintf("killed by %s after %s", ws.Signal(), took)
		}
	}
	cause, fix := diagnoseEntrypoint(out.String(), env)
	if cause != "" {
		act += ": " + cause
	}
	f := fail(argv[0], exp, act, evidence)
	f.Fix = fix
	return []result.Finding{f}
}

var (
	// "cannot create /var/run/app/pid: Read-only file system", "touch: cannot touch '/x': Read-only file system"
	erofsBefore = regexp.MustCompile(`(/[^\s:'"]*)['"]?: Read-only file system`)
	// "OSError: [Errno 30] Read-only file system: '/var/run/x'"
	erofsAfter  = regexp.MustCompile(`Read-only file system: ['"]?(/[^\s'"]+)`)
	deniedPath  = regexp.MustCompile(`(/[^\s:'"]*)['"]?: Permission denied`)
	notFoundCmd = regexp.MustCompile(`([^\s:]+): (?:command )?not found`)
)

// diagnoseEntrypoint names the cause in the program's output and a fix for it.
func diagnoseEntrypoint(output string, env *Env) (cause, fix string) {
	writable := joinOr(env.Policy.Spec.Filesystem.Writable, "none declared")
	if m := firstMatch(output, erofsBefore, erofsAfter); m != "" || strings.Contains(output, "Read-only file system") {
		where := "the root filesystem"
		if m != "" {
			where = m
		}
		return fmt.Sprintf("it writes %s on the read-only root", where),
			fmt.Sprintf("the entrypoint needs a writable root: make it write %s under a declared writable path (%s) — its pid, state or cache file usually has a flag or environment variable — or mount an emptyDir at that directory and declare it in spec.filesystem.writable", where, writable)
	}
	if m := firstMatch(output, deniedPath); m != "" {
		return fmt.Sprintf("permission denied on %s", m),
			fmt.Sprintf("the entrypoint touches %s, which uid %d cannot use: change its owner or mode in the image, or move it under a declared writable path (%s)", m, env.Policy.Spec.Identity.UID, writable)
	}
	if m := firstMatch(output, notFoundCmd); m != "" {
		return fmt.Sprintf("%s not found", m), fmt.Sprintf("the entrypoint calls %s, which the image does not have: install it", m)
	}
	if strings.Contains(output, "Operation not permitted") {
		return "an operation was not permitted", "the entrypoint needs a capability or privilege the sandbox drops: remove that step (chown, setcap, mount, su) from the entrypoint or do it at build time"
	}
	return "", fmt.Sprintf("run the image's entrypoint as uid %d with a read-only root and no capabilities to see why it fails (docker run --read-only --user %d:%d --cap-drop ALL IMAGE); its output is in the evidence",
		env.Policy.Spec.Identity.UID, env.Policy.Spec.Identity.UID, env.Policy.Spec.Identity.GID)
}

func firstMatch(s string, res ...*regexp.Regexp) string {
	for _, re := range res {
		if m := re.FindStringSubmatch(s); m != nil {
			return m[1]
		}
	}
	return ""
}

func clipText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// tailBuffer keeps the last max bytes written to it; it is safe for the two
// copying goroutines os/exec runs for stdout and stderr.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
