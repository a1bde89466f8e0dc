package main

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/sandprobe/sandprobe/internal/kubeclient"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/runner/kube"
)

// verifyKubeFlags are verify-image's flags for --backend kube: the cluster,
// and the namespace the image's pod runs in.
type verifyKubeFlags struct {
	kubeconfig, context, namespace, probeImage, pullPolicy string
	unschedulableGrace                                     time.Duration
}

func (k *verifyKubeFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "kube: the cluster's kubeconfig (default $KUBECONFIG, ~/.kube/config, or the pod's service account inside a cluster)")
	fs.StringVar(&k.context, "context", "", "kube: the kubeconfig context to use")
	fs.StringVarP(&k.namespace, "namespace", "n", "", "kube: the namespace the image's pod runs in (required with --backend kube)")
	fs.StringVar(&k.probeImage, "probe-image", "", "kube: the sandprobe image whose /sandprobe-probe an init container copies into the pod (default: spec.probe.image)")
	fs.StringVar(&k.pullPolicy, "image-pull-policy", "", "kube: Always, IfNotPresent or Never for the pod's images (default IfNotPresent)")
	fs.DurationVar(&k.unschedulableGrace, "unschedulable-grace", kube.DefaultUnschedulableGrace, "kube: how long the pod may stay unschedulable (or unable to create its container) before the run fails closed")
}

// backend builds the kube backend in verify-image's shape: one pod in
// --namespace, like a sandbox of the policy, running the image. The
// runtime class and the environment come from the shared flags
// (--runtime-class, --env).
func (k *verifyKubeFlags) backend(a *app, d *dockerFlags, p *policy.Policy, logger *slog.Logger) (*kube.Backend, func(), error) {
	if k.namespace == "" {
		return nil, nil, fmt.Errorf("--namespace is required with --backend kube: the namespace the image's pod runs in")
	}
	switch corev1.PullPolicy(k.pullPolicy) {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return nil, nil, fmt.Errorf("--image-pull-policy: want Always, IfNotPresent or Never, got %q", k.pullPolicy)
	}
	if k.unschedulableGrace <= 0 {
		return nil, nil, fmt.Errorf("--unschedulable-grace: want a positive duration, got %s", k.unschedulableGrace)
	}
	for _, kv := range d.env {
		if key, _, ok := strings.Cut(kv, "="); !ok || key == "" {
			return nil, nil, fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
	}
	if d.runtime != "" || d.host != "" || d.binary != "" {
		return nil, nil, fmt.Errorf("--runtime, --docker-host and --probe-binary are Docker's: with --backend kube the runtime is --runtime-class and the probe comes from --probe-image")
	}
	cfg, err := kubeclient.Config(k.kubeconfig, k.context)
	if err != nil {
		return nil, nil, err
	}
	api, err := kube.NewAPI(cfg)
	if err != nil {
		return nil, nil, err
	}
	pr := newProgress(a.stderr, isTerminal(a.stderr), logger)
	be := &kube.Backend{
		API: api, Host: cfg.Host, Namespace: k.namespace, ProbeImage: k.probeImage, PullPolicy: corev1.PullPolicy(k.pullPolicy),
		RuntimeClass: d.runtimeClass, UnschedulableGrace: k.unschedulableGrace, ImageOnly: true, Env: d.env,
		Progress: pr.show, Logger: logger,
	}
	return be, pr.done, nil
}

// imageCommand reads the image's ENTRYPOINT and CMD from its registry, for
// image.entrypoint: the pod runs the image by reference, and nothing on
// this machine holds its configuration. Credentials are the Docker
// config's, as for a pull.
func imageCommand(ctx context.Context, image string) ([]string, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return nil, fmt.Errorf("--image %q: %w", image, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	img, err := remote.Image(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
	if err != nil {
		return nil, fmt.Errorf("read the configuration of %s from its registry: %w", image, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read the configuration of %s: %w", image, err)
	}
	return append(slices.Clone(cf.Config.Entrypoint), cf.Config.Cmd...), nil
}

// withEntrypoint hands the image's own command to the probe (check
// image.entrypoint), or says in a note why it is not tried.
func withEntrypoint(ctx context.Context, be *kube.Backend, image string, timeout time.Duration) string {
	if timeout <= 0 {
		return ""
	}
	argv, err := imageCommand(ctx, image)
	switch {
	case err != nil:
		return "image.entrypoint not tried: " + err.Error() + " (--entrypoint-timeout 0 leaves it out)"
	case len(argv) == 0:
		return "image.entrypoint not tried: the image has no ENTRYPOINT or CMD"
	}
	be.ImageCommand, be.ImageCommandTimeout = argv, timeout
	return ""
}
