package probes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sandprobe/sandprobe/result"
)

func checkTools(ctx context.Context, env *Env) []result.Finding {
	var out []result.Finding
	for _, t := range env.Policy.Spec.Image.Tools {
		out = append(out, runTool(ctx, t.Name, t.Args, t.Timeout.Duration))
	}
	return out
}

func runTool(ctx context.Context, name string, args []string, timeout time.Duration) result.Finding {
	cmdline := strings.TrimSpace(name + " " + strings.Join(args, " "))
	exp := fmt.Sprintf("`%s` exits 0 within %s", cmdline, timeout)
	path, err := exec.LookPath(name)
	if err != nil {
		if f, ok := notExecutable(name, exp); ok {
			return f
		}
		f := fail(name, exp, "not found on PATH", "PATH="+getenv("PATH"))
		f.Fix = fmt.Sprintf("install %s in the image, on PATH (%s)", name, getenv("PATH"))
		return f
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	evidence := fmt.Sprintf("%s in %s", path, took.Round(time.Millisecond))
	if first := firstLine(stdout.String()); first != "" {
		evidence += ": " + first
	}
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return fail(name, exp, fmt.Sprintf("timed out after %s", timeout), evidence)
	case err != nil:
		var ee *exec.ExitError
		act := err.Error()
		if errors.As(err, &ee) {
			act = fmt.Sprintf("exited %d", ee.ExitCode())
		}
		if msg := firstLine(stderr.String()); msg != "" {
			act += ": " + msg
		}
		f := fail(name, exp, act, evidence)
		f.Fix = fmt.Sprintf("`%s` is installed but fails under the sandbox's constraints: run it as this uid under a read-only root to see why (often a path it must write or a missing library)", cmdline)
		return f
	}
	f := pass(name, exp, "exited 0", evidence)
	f.Seconds = took.Seconds()
	return f
}

// notExecutable names a tool that exec.LookPath did not take but that is
// in the image, on PATH: a file the sandbox's uid may not run (an image
// built for root, its tool installed mode 0700 or 0750 root:root). "Not
// found" would send the user to install what is there.
func notExecutable(name, exp string) (result.Finding, bool) {
	for _, dir := range filepath.SplitList(getenv("PATH")) {
		path := name
		if !strings.Contains(name, "/") {
			path = filepath.Join(dir, name)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.IsDir() {
			continue
		}
		owner := ""
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			owner = fmt.Sprintf(", owner %d:%d", st.Uid, st.Gid)
		}
		uid, gid := os.Getuid(), os.Getgid()
		f := fail(name, exp, fmt.Sprintf("%s is in the image but uid %d may not run it (mode %04o%s)", path, uid, fi.Mode().Perm(), owner), "PATH="+getenv("PATH"))
		f.Fix = fmt.Sprintf("the image installs %s for its owner only (built to run as root): make it executable for uid %d at build time (chmod 0755 %s, or give it group %d)", name, uid, path, gid)
		return f, true
	}
	return result.Finding{}, false
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
