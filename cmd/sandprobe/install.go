package main

import (
	"context"

	"github.com/sandprobe/sandprobe/internal/probecmd"
)

// cmdInstall copies this executable to DEST (probecmd.Install). The probe
// pod's init container runs `sandprobe-probe install` instead, which copies
// the small probe; this one stays for install commands that name it.
func (a *app) cmdInstall(_ context.Context, args []string) int {
	return probecmd.Install(probecmd.IO{Stdin: a.stdin, Stdout: a.stdout, Stderr: a.stderr}, "sandprobe install", args)
}
