package probes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
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
