package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
)

// defaultTerminationLog is where Kubernetes reads a container's termination message.
const defaultTerminationLog = "/dev/termination-log"

func (a *app) cmdProbe(fs *pflag.FlagSet) runFunc {
	var (
		policyPath, nonce, only, termLog, out string
		runtimeClass, imageCommand, podInfo   string
		imageCommandTimeout                   time.Duration
		noNetwork                             bool
		lf                                    logFlags
	)
	fs.StringVar(&policyPath, "policy", "", "the policy file (- for stdin)")
	fs.StringVar(&nonce, "nonce", "", "the run's nonce, echoed in the result")
	fs.StringVar(&only, "only", "", "comma-separated check IDs or areas to run (default: all that the policy asks for)")
	fs.BoolVar(&noNetwork, "no-network", false, "leave out the checks that send traffic")
	fs.StringVar(&termLog, "termination-log", "", "also write a compact result here (default "+defaultTerminationLog+" when it exists)")
	fs.StringVarP(&out, "output", "o", "json", "output on stdout: json or text")
	fs.StringVar(&podInfo, "pod-info", "", "the pod's downward-API directory holding its labels (Kubernetes: /etc/podinfo)")
	fs.StringVar(&runtimeClass, "runtime-class", os.Getenv(probes.RuntimeClassEnv), "the runtime class (Docker runtime) the runner launched the probe under (default $"+probes.RuntimeClassEnv+")")
	fs.StringVar(&imageCommand, "image-command", "", "the image's entrypoint and command as a JSON array: image.entrypoint starts it under the sandbox's constraints")
	fs.DurationVar(&imageCommandTimeout, "image-command-timeout", probes.DefaultImageCommandTimeout, "how long the image's command runs before it counts as started")
	lf.register(fs)
	return func(ctx context.Context, _ []string) int {
		if out != "json" && out != "text" {
			fmt.Fprintf(a.stderr, "sandprobe probe: -o: want json or text, got %q\n", out)
			return report.ExitBadInput
		}
		p, _, ok := a.loadPolicy(policyPath)
		if !ok {
			return report.ExitBadInput
		}
		env := &probes.Env{Policy: p, Nonce: nonce, Environ: os.Environ(), RuntimeClass: runtimeClass, PodInfoDir: podInfo, ImageCommandTimeout: imageCommandTimeout}
		if imageCommand != "" {
			if err := json.Unmarshal([]byte(imageCommand), &env.ImageCommand); err != nil || len(env.ImageCommand) == 0 {
				fmt.Fprintf(a.stderr, "sandprobe probe: --image-command: want a non-empty JSON array of strings, got %q\n", imageCommand)
				return report.ExitBadInput
			}
		}
		res := probes.Run(ctx, env, probes.Selection{NoNetwork: noNetwork, Only: splitList(only)})
		return a.emitProbe(res, termLog, out)
	}
}

// emitProbe prints the result and writes the compact form for Kubernetes.
func (a *app) emitProbe(res report.ProbeResult, termLog, out string) int {
	run := report.Run{Policy: res.Policy, Version: res.Version, StartedAt: res.StartedAt, Seconds: res.Seconds, Findings: res.Findings}
	for i := range run.Findings {
		run.Findings[i].Target = "here"
	}
	code := run.ExitCode()
	if out == "text" {
		if err := (report.Text{Color: isTerminal(a.stdout), Verbose: true}).Write(a.stdout, run); err != nil {
			return report.ExitCouldNotRun
		}
	} else {
		enc := json.NewEncoder(a.stdout)
		if err := enc.Encode(res); err != nil {
			fmt.Fprintf(a.stderr, "sandprobe probe: write result: %v\n", err)
			return report.ExitCouldNotRun
		}
	}
	if termLog == "" {
		if _, err := os.Stat(defaultTerminationLog); err == nil {
			termLog = defaultTerminationLog
		}
	}
	if termLog != "" {
		msg, err := res.TerminationMessage(report.TerminationMsgSize)
		if err == nil {
			err = os.WriteFile(termLog, msg, 0o644)
		}
		if err != nil {
			fmt.Fprintf(a.stderr, "sandprobe probe: termination message %s: %v\n", termLog, err)
		}
	}
	return code
}
