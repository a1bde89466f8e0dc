// Package probecmd is the in-sandbox command: `sandprobe probe` in the full
// binary and the whole of the small sandprobe-probe binary, which the
// backends copy into every sandbox. It links only the standard library,
// policy, probes and result (TestProbeBinaryDependencies): no Kubernetes,
// Docker or Prometheus client travels into the box.
package probecmd

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/result"
)

// DefaultTerminationLog is where Kubernetes reads a container's termination message.
const DefaultTerminationLog = "/dev/termination-log"

// IO is a command's standard streams.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Options say how the command presents itself.
type Options struct {
	// Name prefixes usage and error lines: "sandprobe probe", "sandprobe-probe".
	Name string
	// Text writes the result for people (-o text); nil refuses -o text.
	// The full binary passes report's text writer; the small one has none,
	// so that no writer's library travels into the sandbox.
	Text func(w io.Writer, res result.ProbeResult) error
}

// FlagSet is what both flag packages offer: the standard library's (the
// small binary) and pflag's (sandprobe's CLI), so both register the same
// flags with the same help.
type FlagSet interface {
	StringVar(p *string, name, value, usage string)
	BoolVar(p *bool, name string, value bool, usage string)
	DurationVar(p *time.Duration, name string, value time.Duration, usage string)
}

// Flags are the probe's flags.
type Flags struct {
	Policy, Nonce, Only, TerminationLog string
	PodInfo, RuntimeClass, ImageCommand string
	ImageCommandTimeout                 time.Duration
	NoNetwork                           bool
	// Control makes the probe the control vantage (probes.RunControl).
	Control bool
	// Phase says the probe runs in a phase's own sandbox, with the
	// workspace and caches the phases share mounted: the phase.* checks run.
	Phase bool
	// Output is --output / -o: each binary registers it, spelling the
	// shorthand its flag package's way, with OutputUsage.
	Output string
}

// OutputUsage is the help of --output (-o).
const OutputUsage = "output on stdout: json or text"

// Register adds every flag but --output to fs.
func (f *Flags) Register(fs FlagSet) {
	fs.StringVar(&f.Policy, "policy", "", "the policy file (- for stdin)")
	fs.StringVar(&f.Nonce, "nonce", "", "the run's nonce, echoed in the result")
	fs.StringVar(&f.Only, "only", "", "comma-separated check IDs or areas to run (default: all that the policy asks for)")
	fs.BoolVar(&f.NoNetwork, "no-network", false, "leave out the checks that send traffic")
	fs.BoolVar(&f.Control, "control", false, "be the control vantage: dial every must-fail, metadata and proxy-bypass destination directly and report what each answered (run where no sandbox policy applies)")
	fs.StringVar(&f.TerminationLog, "termination-log", "", "also write a compact result here (default "+DefaultTerminationLog+" when it exists)")
	fs.BoolVar(&f.Phase, "phase", false, "run in a phase's own sandbox, with the shared workspace and package caches mounted (an init container of the phase's pod): the phase.* checks run (spec.phases)")
	fs.StringVar(&f.PodInfo, "pod-info", "", "the pod's downward-API directory holding its labels (Kubernetes: /etc/podinfo)")
	fs.StringVar(&f.RuntimeClass, "runtime-class", os.Getenv(probes.RuntimeClassEnv), "the runtime class (Docker runtime) the runner launched the probe under (default $"+probes.RuntimeClassEnv+")")
	fs.StringVar(&f.ImageCommand, "image-command", "", "the image's entrypoint and command as a JSON array: image.entrypoint starts it under the sandbox's constraints")
	fs.DurationVar(&f.ImageCommandTimeout, "image-command-timeout", probes.DefaultImageCommandTimeout, "how long the image's command runs before it counts as started")
}

// Run runs the checks here under the policy and prints the result; it
// returns the process exit code (0 conformant, 1 not, 2 bad input, 3 could
// not check).
func Run(ctx context.Context, std IO, f Flags, o Options) int {
	// The checks ask a Linux kernel; elsewhere (the CLI's macOS build for
	// the offline commands) every one would be an error, never a verdict.
	if runtime.GOOS != "linux" {
		fmt.Fprintf(std.Stderr, "%s: the probe runs inside a Linux sandbox, not on %s\n", o.Name, runtime.GOOS)
		return result.ExitCouldNotRun
	}
	switch {
	case f.Output == "text" && o.Text == nil:
		fmt.Fprintf(std.Stderr, "%s: -o text: this binary prints JSON only; `sandprobe probe -o text` (the full binary, in the same image) prints text\n", o.Name)
		return result.ExitBadInput
	case f.Output != "json" && f.Output != "text":
		fmt.Fprintf(std.Stderr, "%s: -o: want json or text, got %q\n", o.Name, f.Output)
		return result.ExitBadInput
	}
	if f.Policy == "" {
		fmt.Fprintf(std.Stderr, "%s: --policy is required\n", o.Name)
		return result.ExitBadInput
	}
	p, _, err := policy.LoadPath(f.Policy, std.Stdin)
	if err != nil {
		policy.WriteProblems(std.Stderr, f.Policy, err)
		return result.ExitBadInput
	}
	env := &probes.Env{Policy: p, Nonce: f.Nonce, Environ: os.Environ(), RuntimeClass: f.RuntimeClass, PodInfoDir: f.PodInfo, Phase: f.Phase, ImageCommandTimeout: f.ImageCommandTimeout}
	if f.PodInfo != "" {
		// --pod-info: a pod the runner just started, which its NetworkPolicy
		// engine may not have isolated yet (probes.Env.SettleDelay).
		env.SettleDelay = probes.DefaultSettleDelay
	}
	if f.ImageCommand != "" {
		if err := json.Unmarshal([]byte(f.ImageCommand), &env.ImageCommand); err != nil || len(env.ImageCommand) == 0 {
			fmt.Fprintf(std.Stderr, "%s: --image-command: want a non-empty JSON array of strings, got %q\n", o.Name, f.ImageCommand)
			return result.ExitBadInput
		}
	}
	if f.Control {
		return emit(std, o, probes.RunControl(ctx, env), f.TerminationLog, f.Output)
	}
	res := probes.Run(ctx, env, probes.Selection{NoNetwork: f.NoNetwork, Only: SplitList(f.Only)})
	return emit(std, o, res, f.TerminationLog, f.Output)
}

// emit prints the result and writes the compact form for Kubernetes.
func emit(std IO, o Options, res result.ProbeResult, termLog, out string) int {
	for i := range res.Findings {
		res.Findings[i].Target = "here"
	}
	code := result.Count(res.Findings).ExitCode()
	if out == "text" {
		if err := o.Text(std.Stdout, res); err != nil {
			return result.ExitCouldNotRun
		}
	} else if err := json.NewEncoder(std.Stdout).Encode(res); err != nil {
		fmt.Fprintf(std.Stderr, "%s: write result: %v\n", o.Name, err)
		return result.ExitCouldNotRun
	}
	if termLog == "" {
		if _, err := os.Stat(DefaultTerminationLog); err == nil {
			termLog = DefaultTerminationLog
		}
	}
	if termLog != "" {
		msg, err := res.TerminationMessage(result.TerminationMsgSize)
		if err == nil {
			err = os.WriteFile(termLog, msg, 0o644)
		}
		if err != nil {
			fmt.Fprintf(std.Stderr, "%s: termination message %s: %v\n", o.Name, termLog, err)
		}
	}
	return code
}

// SplitList splits a comma-separated flag value, dropping empty items.
func SplitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// Install copies the running executable to the one argument, DEST: the
// probe pod's init container runs it from the sandprobe image to put the
// static binary into an emptyDir that the probe container (in the real
// sandbox image, which may have no cp) mounts read-only.
func Install(std IO, name string, args []string) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(std.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(std.Stderr, "Usage: %s DEST\n", name)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		fs.Usage()
		return result.ExitBadInput
	}
	if err := InstallSelf(fs.Arg(0)); err != nil {
		fmt.Fprintf(std.Stderr, "%s: %v\n", name, err)
		return result.ExitCouldNotRun
	}
	return result.ExitOK
}

// InstallSelf writes the running executable to dest atomically, mode 0555.
func InstallSelf(dest string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	src, err := os.Open(exe)
	if err != nil {
		return fmt.Errorf("open %s: %w", exe, err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".sandprobe-*")
	if err != nil {
		return fmt.Errorf("create %s: %w", dest, err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("copy %s to %s: %w", exe, dest, err)
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return fmt.Errorf("install %s: %w", dest, err)
	}
	return nil
}
