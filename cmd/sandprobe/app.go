package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"

	"github.com/spf13/pflag"

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

// command is one subcommand: setup registers its flags and returns what
// runs once they are parsed (cli.go wraps it in a cobra command).
type command struct {
	name    string
	summary string
	usage   string // what follows `sandprobe NAME` in its usage line
	args    int    // positional arguments it takes: 0, or exactly that many
	setup   func(a *app, fs *pflag.FlagSet) runFunc
}

func commands() []command {
	return []command{
		{"run", "one cycle: launch the probe (local, docker or kube backend), write reports, exit 0/1/2/3", "--policy FILE [--backend local|docker|kube] [flags]", 0, (*app).cmdRun},
		{"verify-image", "run the probe inside an image under the policy's exact constraints on a Docker engine", "--image REF --policy FILE [--runtime NAME] [flags]", 0, (*app).cmdVerifyImage},
		{"serve", "the run cycle on a cron schedule, with /metrics, /healthz and /report.json", "--policy FILE [--backend local] [--schedule CRON] [--listen ADDR] [flags]", 0, (*app).cmdServe},
		{"probe", "the in-sandbox half: run the checks here and print the result as JSON", "--policy FILE [--nonce N] [flags]", 0, (*app).cmdProbe},
		{"validate", "check a policy file and print every problem with its YAML path", "-f POLICY [--effective]", 0, (*app).cmdValidate},
		{"checks", "list the check catalogue: id, what it proves, how to fix it", "[-o text|json|markdown]", 0, (*app).cmdChecks},
		{"install", "copy this static binary to DEST (the probe pod's init container, for a probe in the sandbox's own image)", "DEST", 1, (*app).cmdInstall},
		{"drift", "compare live pods, Sandboxes, egress policies and Docker containers with the policy; exit 0/1/2/3", "--policy FILE [--kubeconfig PATH [--context NAME] | --docker | -f FILE | --inspect FILE]... [flags]", 0, (*app).cmdDrift},
		{"render", "policy -> probe pod, NetworkPolicy, CiliumNetworkPolicy (YAML) or the docker run argv", "--policy FILE [--format yaml|admission|rbac|docker|docker-json|proxy-allowlist] [flags]", 0, (*app).cmdRender},
		{"version", "print the version", "", 0, (*app).cmdVersion},
	}
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *app {
	return &app{stdin: stdin, stdout: stdout, stderr: stderr}
}

func (a *app) cmdVersion(*pflag.FlagSet) runFunc {
	return func(context.Context, []string) int {
		fmt.Fprintf(a.stdout, "sandprobe %s\n", probes.Version())
		return report.ExitOK
	}
}

func (a *app) usage(w io.Writer) {
	fmt.Fprintf(w, "sandprobe proves that sandboxes are as tight as their policy declares.\n\nUsage: sandprobe COMMAND [flags]\n\nCommands:\n")
	cmds := append(commands(),
		command{name: "completion", summary: "print the shell completion script: sandprobe completion bash|zsh|fish|powershell"},
		command{name: "help", summary: "help about a command: sandprobe help COMMAND"})
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nExit codes: 0 conformant, 1 not conformant, 2 bad input or usage, 3 could not run.\nRun `sandprobe help COMMAND` (or `sandprobe COMMAND -h`) for a command's flags.\n")
}

// logFlags adds --log-format and -v and builds the logger after parsing.
type logFlags struct {
	format  string
	verbose bool
}

func (l *logFlags) register(fs *pflag.FlagSet) {
	group(fs, groupLogging, func() {
		fs.StringVar(&l.format, "log-format", "text", "log format on stderr: text or json")
		fs.BoolVarP(&l.verbose, "verbose", "v", false, "verbose: debug logs, and passing checks in the text report")
	})
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
		a.printPolicyProblems(path, err)
		return nil, nil, false
	}
	return p, raw, true
}

func (a *app) printPolicyProblems(path string, err error) { policy.WriteProblems(a.stderr, path, err) }

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
