package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// verifyFlags are verify-image's own: which backend runs the image.
type verifyFlags struct {
	policyPath, backend string
	deadline            time.Duration
	docker              dockerFlags
	kube                verifyKubeFlags
}

func (a *app) cmdVerifyImage(fs *pflag.FlagSet) runFunc {
	var (
		vf  verifyFlags
		out outputs
		lf  logFlags
	)
	fs.StringVar(&vf.policyPath, "policy", "", "the SandboxPolicy file")
	fs.StringVar(&vf.backend, "backend", "docker", "where to run the image: docker (an engine on this machine) or kube (a pod shaped like a sandbox of the policy, in --namespace)")
	fs.DurationVar(&vf.deadline, "deadline", 0, "bound on the whole container run (default: spec.probe.deadline, 2m)")
	group(fs, groupDocker, func() { vf.docker.register(fs) })
	group(fs, groupKube, func() { vf.kube.register(fs) })
	out.register(fs)
	lf.register(fs)
	return func(ctx context.Context, _ []string) int {
		if err := out.check(); err != nil {
			fmt.Fprintf(a.stderr, "sandprobe verify-image: %v\n", err)
			return report.ExitBadInput
		}
		logger, err := lf.logger(a.stderr)
		if err != nil {
			fmt.Fprintf(a.stderr, "sandprobe verify-image: %v\n", err)
			return report.ExitBadInput
		}
		p, raw, ok := a.loadPolicy(vf.policyPath)
		if !ok {
			return report.ExitBadInput
		}
		// verify-image sends no traffic: the sandbox gets no network (Docker)
		// or no network checks (kube), and the checks that need one are left out.
		spec := runner.ProbeSpec{Policy: p, PolicyBytes: raw, Nonce: runner.NewNonce(), Deadline: vf.deadline, NoNetwork: true}
		run, err := a.verifyImage(ctx, &vf, spec, logger)
		if err != nil {
			fmt.Fprintf(a.stderr, "sandprobe verify-image: %v\n", err)
			return report.ExitBadInput
		}
		if err := out.write(ctx, a, run, lf.verbose); err != nil {
			fmt.Fprintf(a.stderr, "sandprobe verify-image: %v\n", err)
			return report.ExitCouldNotRun
		}
		return run.ExitCode()
	}
}

// verifyImage runs the image on the chosen backend; an error is bad input.
func (a *app) verifyImage(ctx context.Context, vf *verifyFlags, spec runner.ProbeSpec, logger *slog.Logger) (report.Run, error) {
	switch vf.backend {
	case "docker":
		be, closeBackend, err := vf.docker.backend(a, spec.Policy, "none", logger)
		if err != nil {
			return report.Run{}, err
		}
		run, _ := probeCycle(be, "docker").Run(ctx, spec) // docker has no preflight
		closeBackend()
		run.Notes = append(run.Notes, fmt.Sprintf("image %s, runtime %s, no network", be.Image, orDefault(vf.docker.runtime, "(the engine's default)")))
		return run, nil
	case "kube":
		image := vf.docker.image
		if image == "" {
			image = spec.Policy.Spec.Image.Ref
		}
		if image == "" {
			return report.Run{}, fmt.Errorf("--image is required (or set spec.image.ref)")
		}
		spec.Policy = withImage(spec.Policy, image)
		be, done, err := vf.kube.backend(a, &vf.docker, spec.Policy, logger)
		if err != nil {
			return report.Run{}, err
		}
		note := withEntrypoint(ctx, be, image, vf.docker.entrypointTimeout)
		run, _ := probeCycle(be, "kube").Run(ctx, spec) // a cluster that does not answer is exit 3
		done()
		if note != "" {
			run.Notes = append(run.Notes, note)
		}
		run.Notes = append(run.Notes, fmt.Sprintf("image %s, namespace %s, runtime class %s, no network checks", image, vf.kube.namespace, orDefault(runtimeClassOf(be.RuntimeClass, spec.Policy), "(none)")))
		return run, nil
	}
	return report.Run{}, fmt.Errorf("--backend: want docker or kube, got %q", vf.backend)
}

// withImage is the policy with spec.image.ref set to image: the pod runs
// the image under verification, the probe copied in by an init container.
func withImage(p *policy.Policy, image string) *policy.Policy {
	cp := *p
	cp.Spec.Image.Ref = image
	return &cp
}

// runtimeClassOf is the class the pod runs under: the chosen one, else the
// policy's first.
func runtimeClassOf(chosen string, p *policy.Policy) string {
	if chosen != "" || len(p.Spec.Runtime.ClassNames) == 0 {
		return chosen
	}
	return p.Spec.Runtime.ClassNames[0]
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
