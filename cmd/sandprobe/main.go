// Command sandprobe proves, continuously, that sandboxes are as tight as
// their policy declares. See `sandprobe help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandprobe/sandprobe/runner/local"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == local.InitCommand {
		os.Exit(local.Init()) // the local sandbox's first process; never returns on success
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := newApp(os.Stdin, os.Stdout, os.Stderr).Run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
