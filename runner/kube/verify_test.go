package kube

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
)

// TestImageOnlyPod: verify-image's pod (ImageOnly) is the sandbox's shape
// running the image under verification, with the probe copied in by the
// init container, the image's own command and the added environment handed
// to the probe, and nothing judged about the namespace it stands in: no
// parity finding even with no policy client, and no control pod.
func TestImageOnlyPod(t *testing.T) {
	f := newFixture(t)
	f.node("node-v", "6.1.0-test", map[string]string{"pool": "sandbox"})
	var seen []*corev1.Pod
	f.kubelet(runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
		seen = append(seen, pod)
		k.exit(ctx, pod, 0, "Completed", message(t, probeResult(pod, "4.4.0")))
	}))
	b := f.backend()
	b.Policies, b.ImageOnly = nil, true
	b.Env = []string{"HOME=/tmp"}
	b.ImageCommand, b.ImageCommandTimeout = []string{"/app/start", "--serve"}, 3*time.Second
	const image = "registry.example/agent@sha256:0123456789012345678901234567890123456789012345678901234567890123"
	spec := specFor(t, gvisorPolicy)
	p := *spec.Policy
	p.Spec.Image.Ref = image
	spec.Policy, spec.NoNetwork = &p, true
	results, err := b.Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(seen) != 1 || len(results) != 1 {
		t.Fatalf("%d pods, %d results: want one of each (no control pod)", len(seen), len(results))
	}
	pod := seen[0]
	c := pod.Spec.Containers[0]
	if c.Image != image || len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Image != b.ProbeImage {
		t.Errorf("image %s, init containers %v: want the image under verification and the probe copied in from %s", c.Image, pod.Spec.InitContainers, b.ProbeImage)
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{`--image-command ["/app/start","--serve"]`, "--image-command-timeout 3s", "--no-network", "--runtime-class gvisor"} {
		if !strings.Contains(args, want) {
			t.Errorf("probe args %q lack %q", args, want)
		}
	}
	if !slices.Contains(c.Env, corev1.EnvVar{Name: "HOME", Value: "/tmp"}) {
		t.Errorf("env %v lacks HOME=/tmp", c.Env)
	}
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("automountServiceAccountToken %v, want false", a)
	}
	if pod.Labels["sandbox"] != "true" || pod.Labels[render.LabelManagedBy] == "" {
		t.Errorf("labels %v: want the sandbox's and sandprobe's", pod.Labels)
	}
	for _, f := range results[0].Findings {
		if strings.HasPrefix(f.Check, "parity.") || f.Status == report.Error {
			t.Errorf("finding %s %s: verify-image judges the image, not the namespace", f.Name(), f.Status)
		}
	}
	if left := f.leftovers(); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
