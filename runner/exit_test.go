package runner

import (
	"errors"
	"testing"

	"github.com/sandprobe/sandprobe/report"
)

// TestCheckExit: a probe whose exit code disagrees with its own findings is
// not trusted; the marker that ends a result cut to fit the termination
// message is the encoder's, not a verdict, and is not held against it.
func TestCheckExit(t *testing.T) {
	fail := report.Finding{Check: "egress.must-fail", Subject: "10.0.0.1:443", Status: report.Fail}
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
