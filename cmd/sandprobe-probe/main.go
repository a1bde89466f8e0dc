// Command sandprobe-probe is the in-sandbox half of sandprobe alone: the
// small static binary the backends copy into every sandbox (the Kubernetes
// init container, the Docker bind mount, the local sandbox's mount). It
// runs the checks under the policy and prints the result as JSON, exactly
// as `sandprobe probe` does, without the Kubernetes, Docker and Prometheus
// clients or the report writers: less to carry into a hostile box, and a
// third of the size (make bench). See docs/probe.md.
//
//	sandprobe-probe [probe] --policy FILE [flags]
//	sandprobe-probe install DEST
//	sandprobe-probe version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandprobe/sandprobe/internal/probecmd"
	"github.com/sandprobe/sandprobe/internal/version"
	"github.com/sandprobe/sandprobe/result"
)

const name = "sandprobe-probe"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, probecmd.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, std probecmd.IO, args []string) int {
	cmd := ""
	if len(args) > 0 {
		cmd = args[0]
	}
	switch cmd {
	case "help", "-h", "--help":
		fmt.Fprintf(std.Stdout, "%s runs sandprobe's checks inside this sandbox and prints the result as JSON.\n\n"+
			"Usage:\n  %s [probe] --policy FILE [flags]   the checks (flags: %s -h)\n  %s install DEST                    copy this binary to DEST\n  %s version\n\n"+
			"Exit codes: 0 conformant, 1 not conformant, 2 bad input or usage, 3 could not check.\n", name, name, name, name, name)
		return result.ExitOK
	case "version", "--version":
		fmt.Fprintf(std.Stdout, "%s %s\n", name, version.Get())
		return result.ExitOK
	case "install":
		return probecmd.Install(std, name+" install", args[1:])
	case "probe":
		// The runners' command line is `BINARY probe --policy …` with
		// either binary, so a backend can hand the sandbox either one.
		args = args[1:]
	}
	return probe(ctx, std, args)
}

// probe parses the command line `sandprobe probe` takes (the standard
// library's flag package reads --flag, -flag and --flag=value alike, and
// --output has its -o) and runs the checks.
func probe(ctx context.Context, std probecmd.IO, args []string) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(std.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(std.Stderr, "Usage: %s [probe] --policy FILE [--nonce N] [flags]\n\nFlags:\n", name)
		fs.PrintDefaults()
	}
	var f probecmd.Flags
	f.Register(fs)
	fs.StringVar(&f.Output, "output", "json", probecmd.OutputUsage+" (text: `sandprobe probe -o text`, the full binary)")
	fs.StringVar(&f.Output, "o", "json", "shorthand for --output")
	// Accepted for the command lines written for sandprobe probe; the probe logs nothing.
	fs.String("log-format", "text", "log format on stderr: text or json")
	fs.Bool("verbose", false, "verbose")
	fs.Bool("v", false, "shorthand for --verbose")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return result.ExitOK
		}
		return result.ExitBadInput
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(std.Stderr, "%s: unexpected argument %q\n", name, fs.Arg(0))
		return result.ExitBadInput
	}
	return probecmd.Run(ctx, std, f, probecmd.Options{Name: name})
}
