package main

import (
	"context"
	"io"

	"github.com/sandprobe/sandprobe/internal/probecmd"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/result"
)

// cmdProbe is the in-sandbox half, the same command as the small
// sandprobe-probe binary (internal/probecmd), plus the text report.
func (a *app) cmdProbe(ctx context.Context, args []string) int {
	return probecmd.Run(ctx, probecmd.IO{Stdin: a.stdin, Stdout: a.stdout, Stderr: a.stderr}, args, probecmd.Options{
		Name: "sandprobe probe",
		Text: func(w io.Writer, res result.ProbeResult) error {
			run := report.Run{Policy: res.Policy, Version: res.Version, StartedAt: res.StartedAt, Seconds: res.Seconds, Findings: res.Findings}
			return report.Text{Color: isTerminal(w), Verbose: true}.Write(w, run)
		},
	})
}
