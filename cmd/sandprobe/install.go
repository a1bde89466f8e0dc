package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/internal/probecmd"
	"github.com/sandprobe/sandprobe/report"
)

// cmdInstall copies this executable to DEST (probecmd.InstallSelf). The
// probe pod's init container runs `sandprobe-probe install` instead, which
// copies the small probe; this one stays for install commands that name it.
func (a *app) cmdInstall(*pflag.FlagSet) runFunc {
	return func(_ context.Context, args []string) int {
		if err := probecmd.InstallSelf(args[0]); err != nil {
			fmt.Fprintf(a.stderr, "sandprobe install: %v\n", err)
			return report.ExitCouldNotRun
		}
		return report.ExitOK
	}
}
