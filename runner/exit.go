package runner

import (
	"fmt"
	"strings"

	"github.com/sandprobe/sandprobe/report"
)

// ExitProblem classifies a probe container's exit code: nil for the three
// codes a probe that reported exits with (0, 1, 3), otherwise the reason it
// did not report. stderr is the probe's standard error, for the detail.
// Container runtimes use 125–127 for "could not start" and 128+N for
// "killed by signal N"; a Go crash exits 2 like a rejected policy, so the
// stderr decides between the two.
func ExitProblem(target string, code int, stderr string) error {
	tail := StderrTail(stderr)
	switch {
	case code == report.ExitOK || code == report.ExitNonConformant || code == report.ExitCouldNotRun:
		return nil
	case code == 125 || code == 126 || code == 127:
		return &CouldNotRun{Target: target, Reason: ReasonLaunch, Detail: fmt.Sprintf("the probe could not be started (exit %d)%s", code, tail)}
	case code > 128:
		return &CouldNotRun{Target: target, Reason: ReasonCrashed, Detail: fmt.Sprintf("the probe died of signal %d%s", code-128, tail)}
	case GoCrash(stderr):
		return &CouldNotRun{Target: target, Reason: ReasonCrashed, Detail: "the probe panicked" + tail}
	case code == report.ExitBadInput && strings.TrimSpace(stderr) != "":
		return &CouldNotRun{Target: target, Reason: ReasonBadPolicy, Detail: "the probe rejected its input" + tail}
	case code == report.ExitBadInput:
		// Every refusal of the probe prints its reason first, so a silent 2
		// is someone else's exit code: gVisor's sentry exits 2 when it
		// panics, and writes the panic to its own log, not the container's.
		return &CouldNotRun{Target: target, Reason: ReasonCrashed, Detail: SilentExit2, Fix: SilentExit2Fix}
	}
	return &CouldNotRun{Target: target, Reason: ReasonCrashed, Detail: fmt.Sprintf("the probe exited %d%s", code, tail)}
}

// SilentExit2 is the detail of an exit 2 with nothing on stderr, and
// SilentExit2Fix its fix; a backend that knows the runtime says more.
const (
	SilentExit2    = "the probe's container exited 2 with nothing on stderr: the probe prints why whenever it refuses its input, so something else ended it (the container runtime, or a wrapper around the probe)"
	SilentExit2Fix = "read the container runtime's own log for why it ended the sandbox (gVisor: runsc --panic-log=FILE or --debug-log=DIR/ in the runtime's arguments); a gVisor sandbox dies this way when its own threads reach the container's pids limit: raise spec.resources.pids"
)

// GoCrash recognises a Go runtime crash in a probe's stderr.
func GoCrash(stderr string) bool {
	return strings.Contains(stderr, "panic: ") || strings.Contains(stderr, "fatal error: ") || strings.Contains(stderr, "goroutine 1 [")
}

// StderrTail is the end of a probe's stderr on one line, for error details.
func StderrTail(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if len(s) > 600 {
		s = "…" + s[len(s)-600:]
	}
	return "; stderr: " + strings.Join(strings.Fields(s), " ")
}
