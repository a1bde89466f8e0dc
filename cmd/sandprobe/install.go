package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/internal/probecmd"
	"github.com/sandprobe/sandprobe/report"
)

// cmdCopySelf copies this executable to DEST (probecmd.InstallSelf). The
// probe pod's init container runs `sandprobe-probe install` instead, which
// copies the small probe; this one stays for install commands that name it.
// Its old name, install, read as "install into the cluster": it is a hidden
// alias (commandAliases), so those commands keep working.
func (a *app) cmdCopySelf(*pflag.FlagSet) runFunc {
	return func(_ context.Context, args []string) int {
		if err := probecmd.InstallSelf(args[0]); err != nil {
			fmt.Fprintf(a.stderr, "sandprobe copy-self: %v\n", err)
			return report.ExitCouldNotRun
		}
		return report.ExitOK
	}
}

// commandAliases are old names a command still answers to, left out of
// the command list, the help and the completions.
var commandAliases = map[string][]string{"copy-self": {"install"}}
