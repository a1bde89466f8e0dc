package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/internal/version"
	"github.com/sandprobe/sandprobe/report"
)

// cmdVersion prints the build: one line, or JSON with -o json.
func (a *app) cmdVersion(fs *pflag.FlagSet) runFunc {
	var format string
	fs.StringVarP(&format, "output", "o", "text", "text or json")
	return func(context.Context, []string) int {
		b := version.Get()
		switch format {
		case "text":
			fmt.Fprintf(a.stdout, "sandprobe %s\n", b)
		case "json":
			enc := json.NewEncoder(a.stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(b); err != nil {
				return report.ExitCouldNotRun
			}
		default:
			fmt.Fprintf(a.stderr, "sandprobe version: -o: want text or json, got %q\n", format)
			return report.ExitBadInput
		}
		return report.ExitOK
	}
}

// stampRun puts this build (version, commit, date) on a run the command
// makes itself; the cycle's runs get it through runner.Cycle.
func stampRun(run *report.Run) {
	b := version.Get()
	run.Version, run.Commit, run.BuildDate = b.Version, b.Commit, b.Date
}
