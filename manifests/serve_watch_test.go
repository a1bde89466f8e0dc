package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// serveWatchOverlay is the base with the serve-watch component, as
// docs/kubernetes.md shows it, outside manifests/ (kustomize refuses an
// overlay inside its base).
func serveWatchOverlay(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	base, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [%[1]s]
components: [%[1]s/components/serve-watch]
images:
  - {name: ghcr.io/sandprobe/sandprobe, newName: registry.example/sandprobe, newTag: v1.2.3}
`, rel)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestServeWatchComponent: with components/serve-watch the base runs
// `sandprobe serve --watch` as one Deployment (replaced, never rolled: two
// runners would sweep each other's probe pods), with a Service for
// /metrics; the CronJob is suspended, not deleted (the runner-scope
// admission policy reads the runner's images from it), and kustomize's
// images: moves both to the same image, so the Deployment may start its
// probe pods.
func TestServeWatchComponent(t *testing.T) {
	objs, order := documents(t, kustomize(t, serveWatchOverlay(t)))
	dep, ok := objs["Deployment sandprobe-system/sandprobe"]
	if !ok {
		t.Fatalf("no Deployment sandprobe-system/sandprobe in %v", order)
	}
	if _, ok := objs["Service sandprobe-system/sandprobe"]; !ok {
		t.Errorf("no Service for /metrics in %v", order)
	}
	get := func(v any, path ...any) any {
		for _, p := range path {
			switch k := p.(type) {
			case string:
				m, _ := v.(map[string]any)
				v = m[k]
			case int:
				l, _ := v.([]any)
				if k >= len(l) {
					return nil
				}
				v = l[k]
			}
		}
		return v
	}
	if r := get(dep, "spec", "replicas"); fmt.Sprint(r) != "1" || get(dep, "spec", "strategy", "type") != "Recreate" {
		t.Errorf("Deployment: replicas %v, strategy %v; want one replica, Recreate", r, get(dep, "spec", "strategy", "type"))
	}
	c := get(dep, "spec", "template", "spec", "containers", 0)
	var args []string
	for _, a := range get(c, "args").([]any) {
		args = append(args, fmt.Sprint(a))
	}
	for _, want := range []string{"serve", "--backend=kube", "--watch", "--per-node", "--listen=:10191"} {
		if !slices.Contains(args, want) {
			t.Errorf("Deployment args %q lack %s", args, want)
		}
	}
	if get(dep, "spec", "template", "spec", "serviceAccountName") != "sandprobe" {
		t.Errorf("the Deployment does not run as the runner's ServiceAccount")
	}
	cj := objs["CronJob sandprobe-system/sandprobe"]
	if cj == nil || get(cj, "spec", "suspend") != true {
		t.Errorf("CronJob: %v, want it kept and suspended", get(cj, "spec", "suspend"))
	}
	// The Service (and a ServiceMonitor) must select the serve pod alone,
	// never a Job pod of the (suspended, but still startable) CronJob.
	sel, _ := get(objs["Service sandprobe-system/sandprobe"], "spec", "selector").(map[string]any)
	jobLabels, _ := get(cj, "spec", "jobTemplate", "spec", "template", "metadata", "labels").(map[string]any)
	shared := len(sel) > 0
	for k, v := range sel {
		shared = shared && jobLabels[k] == v
	}
	if shared {
		t.Errorf("the Service's selector %v selects the CronJob's Job pods too (labels %v)", sel, jobLabels)
	}
	image := get(c, "image")
	if image != "registry.example/sandprobe:v1.2.3" || get(cj, "spec", "jobTemplate", "spec", "template", "spec", "containers", 0, "image") != image {
		t.Errorf("images: Deployment %v, CronJob %v; want both moved by images:", image, get(cj, "spec", "jobTemplate", "spec", "template", "spec", "containers", 0, "image"))
	}
}
