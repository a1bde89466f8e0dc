package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/policy"
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
	// setup is nil for a command that only groups subcommands.
	setup func(a *app, fs *pflag.FlagSet) runFunc
}

// subcommands are the commands under a command that only groups them.
func subcommands() map[string][]command {
	return map[string][]command{"cache": cacheCommands()}
}

func commands() []command {
	return []command{
		{"run", "one cycle: launch the probe (local, docker or kube backend), write reports, exit 0/1/2/3", "--policy FILE [--backend local|docker|kube] [flags]", 0, (*app).cmdRun},
		{"verify-image", "run the probe inside an image under the policy's exact constraints on a Docker engine", "--image REF --policy FILE [--runtime NAME] [flags]", 0, (*app).cmdVerifyImage},
		{"serve", "the run cycle on a cron schedule, with /metrics, /healthz and /report.json", "--policy FILE [--backend local] [--schedule CRON] [--listen ADDR] [flags]", 0, (*app).cmdServe},
		{"probe", "the in-sandbox half: run the checks here and print the result as JSON", "--policy FILE [--nonce N] [flags]", 0, (*app).cmdProbe},
		{"validate", "check a policy file and print every problem with its YAML path", "-f POLICY [--effective]", 0, (*app).cmdValidate},
		{"checks", "list the check catalogue: id, what it proves, how to fix it", "[-o text|json|markdown]", 0, (*app).cmdChecks},
		{"copy-self", "copy this static binary to DEST (an init container that puts sandprobe in a sandbox's own image; installs nothing in a cluster)", "DEST", 1, (*app).cmdCopySelf},
		{"drift", "compare live pods, Sandboxes, egress policies and Docker containers with the policy; exit 0/1/2/3", "--policy FILE [--kubeconfig PATH [--context NAME] | --docker | -f FILE | --inspect FILE]... [flags]", 0, (*app).cmdDrift},
		{"scan-workspace", "between two phases: name every file on the shared workspace that would run, or change how tools run, in the next phase, against the baseline the trusted step sealed", "DIR [--baseline FILE | --seal FILE] [flags]", 1, (*app).cmdScanWorkspace},
		{"egress-usage", "the proxy's record held against the policy: each allowance's use, unused ones, risky wildcards, denied attempts, what the policy would block", "--policy FILE --log FILE... [--unused-days N] [flags]", 0, (*app).cmdEgressUsage},
		{"cache", "seal a package cache at a trusted point; verify it against the seal and its content addresses", "seal|verify DIR [flags]", 0, nil},
		{"render", "policy -> probe pod, NetworkPolicy, CiliumNetworkPolicy (YAML) or the docker run argv", "--policy FILE [--format yaml|admission|rbac|docker|docker-json|proxy-allowlist] [flags]", 0, (*app).cmdRender},
		{"version", "print the version, the commit and the build date", "[-o text|json]", 0, (*app).cmdVersion},
	}
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *app {
	return &app{stdin: stdin, stdout: stdout, stderr: stderr}
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

// fileErr says a file that could not be read as "FLAG FILE: message" (the
// operating system's message, without the operation and the path again);
// any other error as oneLineErr does.
func fileErr(flag string, err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return flag + " " + pe.Path + ": " + pe.Err.Error()
	}
	return oneLineErr(err)
}

// oneLineErr flattens an error onto one line.
func oneLineErr(err error) string {
	var parts []string
	for _, line := range strings.Split(err.Error(), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			parts = append(parts, line)
		}
	}
	s := strings.Join(parts, "; ")
	if errors.Is(err, context.DeadlineExceeded) {
		s += " (raise --timeout)"
	}
	return s
}
