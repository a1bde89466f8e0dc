// Package probecmd is the in-sandbox command: `sandprobe probe` in the full
// binary and the whole of the small sandprobe-probe binary, which the
// backends copy into every sandbox. It links only the standard library,
// policy, probes and result (TestProbeBinaryDependencies): no Kubernetes,
// Docker or Prometheus client travels into the box.
package probecmd

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// Run runs the checks here under the policy and prints the result; it
// returns the process exit code (0 conformant, 1 not, 2 bad input, 3 could
// not check).
func Run(ctx context.Context, std IO, args []string, o Options) int {
	fs := flag.NewFlagSet(o.Name, flag.ContinueOnError)
	fs.SetOutput(std.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(std.Stderr, "Usage: %s --policy FILE [--nonce N]\n\nFlags:\n", o.Name)
		fs.PrintDefaults()
	}
	var (
		policyPath, nonce, only, termLog, out string
		runtimeClass, imageCommand, podInfo   string
		imageCommandTimeout                   time.Duration
		noNetwork                             bool
	)
	fs.StringVar(&policyPath, "policy", "", "the policy file (- for stdin)")
	fs.StringVar(&nonce, "nonce", "", "the run's nonce, echoed in the result")
	fs.StringVar(&only, "only", "", "comma-separated check IDs or areas to run (default: all that the policy asks for)")
	fs.BoolVar(&noNetwork, "no-network", false, "leave out the checks that send traffic")
	fs.StringVar(&termLog, "termination-log", "", "also write a compact result here (default "+DefaultTerminationLog+" when it exists)")
	outHelp := "output on stdout: json or text"
	if o.Text == nil {
		outHelp = "output on stdout: json (text: `sandprobe probe -o text`, the full binary)"
	}
	fs.StringVar(&out, "o", "json", outHelp)
	fs.StringVar(&podInfo, "pod-info", "", "the pod's downward-API directory holding its labels (Kubernetes: /etc/podinfo)")
	fs.StringVar(&runtimeClass, "runtime-class", os.Getenv(probes.RuntimeClassEnv), "the runtime class (Docker runtime) the runner launched the probe under (default $"+probes.RuntimeClassEnv+")")
	fs.StringVar(&imageCommand, "image-command", "", "the image's entrypoint and command as a JSON array: image.entrypoint starts it under the sandbox's constraints")
	fs.DurationVar(&imageCommandTimeout, "image-command-timeout", probes.DefaultImageCommandTimeout, "how long the image's command runs before it counts as started")
	// Accepted for the runners' and users' command lines; the probe logs nothing.
	fs.String("log-format", "text", "log format on stderr: text or json")
	fs.Bool("v", false, "verbose")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return result.ExitOK
		}
		return result.ExitBadInput
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(std.Stderr, "%s: unexpected argument %q\n", o.Name, fs.Arg(0))
		return result.ExitBadInput
	}
	switch {
	case out == "text" && o.Text == nil:
		fmt.Fprintf(std.Stderr, "%s: -o text: this binary prints JSON only; `sandprobe probe -o text` (the full binary, in the same image) prints text\n", o.Name)
		return result.ExitBadInput
	case out != "json" && out != "text":
		fmt.Fprintf(std.Stderr, "%s: -o: want json or text, got %q\n", o.Name, out)
		return result.ExitBadInput
	}
	if policyPath == "" {
		fmt.Fprintf(std.Stderr, "%s: --policy is required\n", o.Name)
		return result.ExitBadInput
	}
	p, _, err := policy.LoadPath(policyPath, std.Stdin)
	if err != nil {
		policy.WriteProblems(std.Stderr, policyPath, err)
		return result.ExitBadInput
	}
	env := &probes.Env{Policy: p, Nonce: nonce, Environ: os.Environ(), RuntimeClass: runtimeClass, PodInfoDir: podInfo, ImageCommandTimeout: imageCommandTimeout}
	if imageCommand != "" {
		if err := json.Unmarshal([]byte(imageCommand), &env.ImageCommand); err != nil || len(env.ImageCommand) == 0 {
			fmt.Fprintf(std.Stderr, "%s: --image-command: want a non-empty JSON array of strings, got %q\n", o.Name, imageCommand)
			return result.ExitBadInput
		}
	}
	res := probes.Run(ctx, env, probes.Selection{NoNetwork: noNetwork, Only: SplitList(only)})
	return emit(std, o, res, termLog, out)
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
