package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"

	"github.com/sandprobe/sandprobe/internal/probecmd"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
)

// app holds what every subcommand shares: the standard streams and the
// global flags. Each subcommand lives in its own file.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	logger         *slog.Logger
}

type command struct {
	name    string
	summary string
	run     func(a *app, ctx context.Context, args []string) int
}

func commands() []command {
	return []command{
		{"run", "one cycle: launch the probe (local, docker or kube backend), write reports, exit 0/1/2/3", (*app).cmdRun},
		{"verify-image", "run the probe inside an image under the policy's exact constraints on a Docker engine", (*app).cmdVerifyImage},
		{"serve", "the run cycle on a cron schedule, with /metrics, /healthz and /report.json", (*app).cmdServe},
		{"probe", "the in-sandbox half: run the checks here and print the result as JSON", (*app).cmdProbe},
		{"validate", "check a policy file and print every problem with its YAML path", (*app).cmdValidate},
		{"checks", "list the check catalogue: id, what it proves, how to fix it", (*app).cmdChecks},
		{"install", "copy this static binary to DEST (the probe pod's init container, for a probe in the sandbox's own image)", (*app).cmdInstall},
		{"drift", "compare live pods, Sandboxes, egress policies and Docker containers with the policy; exit 0/1/2/3", (*app).cmdDrift},
		{"render", "policy -> probe pod, NetworkPolicy, CiliumNetworkPolicy (YAML) or the docker run argv", (*app).cmdRender},
	}
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *app {
	return &app{stdin: stdin, stdout: stdout, stderr: stderr}
}

// Run dispatches to a subcommand and returns the process exit code.
func (a *app) Run(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		a.usage(a.stdout)
		if len(args) == 0 {
			return report.ExitBadInput
		}
		return report.ExitOK
	}
	if args[0] == "version" || args[0] == "--version" {
		fmt.Fprintf(a.stdout, "sandprobe %s\n", probes.Version())
		return report.ExitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(a, ctx, args[1:])
		}
	}
	fmt.Fprintf(a.stderr, "sandprobe: unknown command %q (see sandprobe help)\n", args[0])
	return report.ExitBadInput
}

func (a *app) usage(w io.Writer) {
	fmt.Fprintf(w, "sandprobe proves that sandboxes are as tight as their policy declares.\n\nUsage: sandprobe COMMAND [flags]\n\nCommands:\n")
	cmds := commands()
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nExit codes: 0 conformant, 1 not conformant, 2 bad input or usage, 3 could not run.\nRun `sandprobe COMMAND -h` for a command's flags.\n")
}

// flagSet makes a FlagSet that reports usage errors on stderr.
func (a *app) flagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() {
		fmt.Fprintf(a.stderr, "Usage: sandprobe %s %s\n\nFlags:\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags; it returns false with the exit code when the command should stop.
func parse(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return report.ExitOK, false
		}
		return report.ExitBadInput, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "sandprobe %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return report.ExitBadInput, false
	}
	return 0, true
}

// logFlags adds --log-format and -v and builds the logger after parsing.
type logFlags struct {
	format  string
	verbose bool
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "text", "log format on stderr: text or json")
	fs.BoolVar(&l.verbose, "v", false, "verbose: debug logs, and passing checks in the text report")
}

func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: slog.LevelWarn}
	if l.verbose {
		opts.Level = slog.LevelDebug
	}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: want text or json, got %q", l.format)
}

// loadPolicy loads a policy and prints every problem as FILE:LINE: path: message.
func (a *app) loadPolicy(path string) (*policy.Policy, []byte, bool) {
	if path == "" {
		fmt.Fprintln(a.stderr, "sandprobe: --policy is required")
		return nil, nil, false
	}
	p, raw, err := policy.LoadPath(path, a.stdin)
	if err != nil {
		policy.WriteProblems(a.stderr, path, err)
		return nil, nil, false
	}
	return p, raw, true
}

// isTerminal reports whether w is a character device (and colour is welcome).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func splitList(s string) []string { return probecmd.SplitList(s) }

// flagGiven says whether the flag was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			given = true
		}
	})
	return given
}
