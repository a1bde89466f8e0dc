package main

import (
	"context"
	"io"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/internal/probecmd"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/result"
)

// cmdProbe is the in-sandbox half: the same command, flags and result as
// the small sandprobe-probe binary (internal/probecmd), plus the text report.
func (a *app) cmdProbe(fs *pflag.FlagSet) runFunc {
	var (
		f  probecmd.Flags
		lf logFlags
	)
	f.Register(fs)
	fs.StringVarP(&f.Output, "output", "o", "json", probecmd.OutputUsage)
	lf.register(fs)
	return func(ctx context.Context, _ []string) int {
		return probecmd.Run(ctx, probecmd.IO{Stdin: a.stdin, Stdout: a.stdout, Stderr: a.stderr}, f, probecmd.Options{
			Name: "sandprobe probe",
			Text: func(w io.Writer, res result.ProbeResult) error {
				run := report.Run{Policy: res.Policy, Version: res.Version, StartedAt: res.StartedAt, Seconds: res.Seconds, Findings: res.Findings}
				return report.Text{Color: isTerminal(w), Verbose: true}.Write(w, run)
			},
		})
	}
}
