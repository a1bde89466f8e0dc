package runner

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/report"
)

// TestCheckExit: a probe whose exit code disagrees with its own findings is
// not trusted; the marker that ends a result cut to fit the termination
// message is the encoder's, not a verdict, and is not held against it.
func TestCheckExit(t *testing.T) {
	fail := report.Finding{Check: "egress.must-fail", Role: report.RoleMustFail, Subject: "10.0.0.1:443", Status: report.Fail}
	pass := report.Finding{Check: "identity.uid", Status: report.Pass}
	cut := report.Finding{Check: report.CheckTruncated, Status: report.Error}
	broken := report.Finding{Check: "fs.root-readonly", Status: report.Error}
	cases := []struct {
		name     string
		code     int
		findings []report.Finding
		ok       bool
	}{
		{"exit 0, all pass", 0, []report.Finding{pass}, true},
		{"exit 1, a failure", 1, []report.Finding{pass, fail}, true},
		{"exit 0 with a failure inside", 0, []report.Finding{pass, fail}, false},
		{"exit 1 with nothing wrong", 1, []report.Finding{pass}, false},
		{"exit 1 with a could-not-check inside", 1, []report.Finding{fail, broken}, false},
		{"exit 1, cut to fit after its failures", 1, []report.Finding{fail, cut}, true},
		{"exit 0, cut to fit", 0, []report.Finding{cut}, true},
		{"exit 3, a could-not-check and cut", 3, []report.Finding{broken, cut}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckExit("t", c.code, report.ProbeResult{Findings: c.findings})
			var cnr *CouldNotRun
			if c.ok != (err == nil) || (err != nil && (!errors.As(err, &cnr) || cnr.Reason != ReasonInconsistentExit)) {
				t.Errorf("CheckExit = %v, want ok %v", err, c.ok)
			}
		})
	}
}

// TestExitProblem: each exit code a probe container can end with is named;
// a 2 with nothing on stderr is not the probe refusing its input (every
// refusal prints why) but something else ending the container, and says so.
func TestExitProblem(t *testing.T) {
	cases := []struct {
		name, stderr string
		code         int
		reason       string // "" = no problem
		detail, fix  string
	}{
		{name: "conformant", code: 0},
		{name: "not conformant", code: 1},
		{name: "could not check", code: 3},
		{name: "policy rejected", code: 2, stderr: "sandprobe probe: spec.identity.uid: required\n", reason: ReasonBadPolicy, detail: "rejected its input; stderr: sandprobe probe: spec.identity.uid"},
		{name: "Go panic", code: 2, stderr: "panic: runtime error: index out of range\n\ngoroutine 1 [running]:", reason: ReasonCrashed, detail: "the probe panicked"},
		{name: "silent exit 2", code: 2, reason: ReasonCrashed, detail: "exited 2 with nothing on stderr", fix: "spec.resources.pids"},
		{name: "silent exit 2, blank stderr", code: 2, stderr: " \n", reason: ReasonCrashed, detail: "exited 2 with nothing on stderr"},
		{name: "not started", code: 127, reason: ReasonLaunch, detail: "could not be started (exit 127)"},
		{name: "signal", code: 139, reason: ReasonCrashed, detail: "died of signal 11"},
		{name: "odd code", code: 42, stderr: "boom", reason: ReasonCrashed, detail: "the probe exited 42; stderr: boom"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := ExitProblem("t", c.code, c.stderr)
			if c.reason == "" {
				if err != nil {
					t.Fatalf("exit %d: %v, want no problem", c.code, err)
				}
				return
			}
			var cnr *CouldNotRun
			if !errors.As(err, &cnr) || cnr.Reason != c.reason {
				t.Fatalf("exit %d: %v, want reason %s", c.code, err, c.reason)
			}
			f := cnr.Finding()
			if !strings.Contains(f.Actual, c.detail) || !strings.Contains(f.Fix, c.fix) || f.Fix == "" {
				t.Errorf("exit %d: actual %q (want %q), fix %q (want %q)", c.code, f.Actual, c.detail, f.Fix, c.fix)
			}
		})
	}
}
