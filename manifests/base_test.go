package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
)

// builtinGroups are the API groups every Kubernetes >= 1.30 serves: the
// base may use nothing else (no CRD, so `kubectl apply -k manifests/`
// works on a vanilla cluster).
var builtinGroups = map[string]bool{
	"": true, "apps": true, "batch": true, "rbac.authorization.k8s.io": true,
	"admissionregistration.k8s.io": true, "networking.k8s.io": true, "policy": true,
}

// TestBaseIsVanilla: the base builds to objects of built-in kinds only,
// in no namespace it does not create, so it applies on a cluster with no
// Prometheus Operator and no sandbox namespace; what needs those is a
// component, and every component builds over the base.
func TestBaseIsVanilla(t *testing.T) {
	objs, order := documents(t, kustomize(t, "."))
	for _, key := range order {
		o := objs[key]
		group, _, _ := strings.Cut(fmt.Sprint(o["apiVersion"]), "/")
		if !strings.Contains(fmt.Sprint(o["apiVersion"]), "/") {
			group = ""
		}
		if !builtinGroups[group] {
			t.Errorf("%s (%v): not a built-in kind; the base must apply without CRDs, make it a component", key, o["apiVersion"])
		}
		md, _ := o["metadata"].(map[string]any)
		if ns, ok := md["namespace"]; ok && ns != "sandprobe-system" {
			t.Errorf("%s: in namespace %v, which the base does not create; make it a component", key, ns)
		}
	}
	entries, err := os.ReadDir("components")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Run(e.Name(), func(t *testing.T) {
			dir, err := overlayDir(t.TempDir(), e.Name())
			if err != nil {
				t.Fatal(err)
			}
			with, _ := documents(t, kustomize(t, dir))
			if len(with) < len(objs) {
				t.Errorf("the base with component %s builds %d objects, the base %d", e.Name(), len(with), len(objs))
			}
		})
	}
}

// probeImages returns the images of the CronJob's (or the Deployment's)
// runner container and its SANDPROBE_PROBE_IMAGE.
func probeImages(t *testing.T, o map[string]any) (image, probe string) {
	t.Helper()
	spec, _ := o["spec"].(map[string]any)
	if jt, ok := spec["jobTemplate"].(map[string]any); ok {
		spec, _ = jt["spec"].(map[string]any)
	}
	tmpl, _ := spec["template"].(map[string]any)
	ps, _ := tmpl["spec"].(map[string]any)
	cs, _ := ps["containers"].([]any)
	for _, c := range cs {
		c := c.(map[string]any)
		if c["name"] != "sandprobe" {
			continue
		}
		image = fmt.Sprint(c["image"])
		env, _ := c["env"].([]any)
		for _, e := range env {
			e := e.(map[string]any)
			if e["name"] == "SANDPROBE_PROBE_IMAGE" {
				probe = fmt.Sprint(e["value"])
			}
		}
	}
	return image, probe
}

// baseProbeImage is the image the base's CronJob names for its probe pods.
func baseProbeImage(t *testing.T) string {
	t.Helper()
	objs, _ := documents(t, kustomize(t, "."))
	_, probe := probeImages(t, objs["CronJob sandprobe-system/sandprobe"])
	if probe == "" {
		t.Fatal("the base's CronJob sets no SANDPROBE_PROBE_IMAGE")
	}
	return probe
}

// TestImageSetOnce: the image is set in one place, the images: entry of a
// kustomization: the YAML names the repository without a tag, and the
// runner container and SANDPROBE_PROBE_IMAGE (the image probe pods run)
// agree in the base, in make e2e's overlay, with serve-watch, and in an
// overlay that sets only its own images: entry. Where the kustomization's
// policy requires digests (the base's does), the image is pinned by one, as
// the runner checks before it starts a probe pod (render.CheckPinned):
// the shipped policy and the shipped CronJob cannot disagree.
func TestImageSetOnce(t *testing.T) {
	for _, f := range []string{"cronjob.yaml", "components/serve-watch/deployment.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := regexp.MustCompile(`ghcr\.io/sandprobe/sandprobe[:@]\S*`).Find(b); m != nil {
			t.Errorf("%s names %s: the tag or digest belongs in kustomization.yaml's images: alone", f, m)
		}
	}
	tmp := t.TempDir()
	serve, err := overlayDir(tmp, "serve-watch")
	if err != nil {
		t.Fatal(err)
	}
	own, err := overlayDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	const ownImage = "registry.example/mirror/sandprobe:v9.9.9@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	kz, err := os.ReadFile(filepath.Join(own, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kz = append(kz, []byte("images:\n  - {name: ghcr.io/sandprobe/sandprobe, newName: registry.example/mirror/sandprobe, newTag: v9.9.9, digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef}\n")...)
	if err := os.WriteFile(filepath.Join(own, "kustomization.yaml"), kz, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, dir, policy, want string
		kinds                   []string
	}{
		{"base", ".", "policy.yaml", "", []string{"CronJob"}},
		{"e2e", "../hack/e2e/overlay", "../hack/e2e/overlay/policy.yaml", "sandprobe.local/sandprobe:e2e", []string{"CronJob"}},
		{"serve-watch", serve, "policy.yaml", "", []string{"CronJob", "Deployment"}},
		{"own image", own, "policy.yaml", ownImage, []string{"CronJob"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, _, err := policy.LoadFile(c.policy)
			if err != nil {
				t.Fatal(err)
			}
			objs, _ := documents(t, kustomize(t, c.dir))
			for _, kind := range c.kinds {
				o, ok := objs[kind+" sandprobe-system/sandprobe"]
				if !ok {
					t.Fatalf("no %s sandprobe-system/sandprobe", kind)
				}
				image, probe := probeImages(t, o)
				if image != probe {
					t.Errorf("%s: the runner runs %s, SANDPROBE_PROBE_IMAGE is %s; want one image", kind, image, probe)
				}
				if c.name == "base" && !regexp.MustCompile(`^ghcr\.io/sandprobe/sandprobe:v\d+\.\d+\.\d+@sha256:[0-9a-f]{64}$`).MatchString(image) {
					t.Errorf("%s: the base's image is %s, want a release's REPO:vX.Y.Z@sha256:<64 hex>", kind, image)
				}
				if c.want != "" && image != c.want {
					t.Errorf("%s: image %s, want %s", kind, image, c.want)
				}
				if err := render.CheckPinned(p, render.ProbePodOptions{ProbeImage: probe}); err != nil {
					t.Errorf("%s: the runner would refuse to start: %v", kind, err)
				}
			}
		})
	}
}
