package main

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/runner/docker"
)

// dockerFlags are the Docker backend's flags, shared by verify-image and
// `run --backend docker`.
type dockerFlags struct {
	image, runtime, runtimeClass, host, binary string
	env                                        stringList
	entrypointTimeout                          time.Duration
	// join and controlNetwork are run's alone: verify-image checks an
	// image, never a live sandbox.
	join, controlNetwork string
}

func (d *dockerFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&d.image, "image", "", "docker: the image to verify (default: spec.image.ref); it must be on the engine, it is never pulled")
	fs.StringVar(&d.runtime, "runtime", "", "docker: the engine's runtime to run it under (runc, runsc, kata; default: the engine's default)")
	fs.StringVar(&d.runtimeClass, "runtime-class", "", "docker: the runtime class the policy knows this runtime as (default: the runtime's name); kube: which of spec.runtime.classNames the probe pod runs under (default: the first)")
	fs.StringVar(&d.host, "docker-host", "", "docker: the engine's address (default $DOCKER_HOST or the local socket)")
	fs.StringVar(&d.binary, "probe-binary", "", "docker: the static probe binary to mount into the container (default: sandprobe-probe beside this executable, else this executable)")
	fs.Var(&d.env, "env", "docker: KEY=VALUE added to the container's environment, as the pod sets it (repeatable)")
	fs.DurationVar(&d.entrypointTimeout, "entrypoint-timeout", probes.DefaultImageCommandTimeout, "docker: how long the image's own entrypoint runs under the constraints (check image.entrypoint); 0 leaves it out")
}

// registerJoin adds the flags that probe a live sandbox where it stands.
func (d *dockerFlags) registerJoin(fs *pflag.FlagSet) {
	fs.StringVar(&d.join, "join", "", "docker: probe a running sandbox container where it stands: in its network namespace (--network container:NAME), with its image, runtime, user, environment and mounts (the policy's emptyAtStart paths fresh); any box you can docker exec into")
	fs.StringVar(&d.controlNetwork, "control-network", "", "docker: the network the control container dials every deny from, one no sandbox rule governs (default: the proxy container's other network, its egress side)")
}

// backend builds the Docker backend; progress goes to stderr on a terminal.
func (d *dockerFlags) backend(a *app, p *policy.Policy, network string, logger *slog.Logger) (*docker.Backend, func(), error) {
	image := d.image
	if image == "" && d.join == "" {
		image = p.Spec.Image.Ref
	}
	if image == "" && d.join == "" {
		return nil, nil, fmt.Errorf("--image is required (or set spec.image.ref, or --join a running sandbox)")
	}
	for _, kv := range d.env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, nil, fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
	}
	cli, err := docker.NewClient(d.host)
	if err != nil {
		return nil, nil, err
	}
	pr := newProgress(a.stderr, isTerminal(a.stderr), logger)
	be := &docker.Backend{
		Client: cli, Image: image, Runtime: d.runtime, RuntimeClass: d.runtimeClass, Binary: d.binary,
		Env: d.env, Network: network, Join: d.join, ControlNetwork: d.controlNetwork, EntrypointTimeout: d.entrypointTimeout, Logger: logger, Progress: pr.show,
	}
	return be, func() { pr.done(); cli.Close() }, nil
}
