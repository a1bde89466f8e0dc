// Package charts holds sandprobe's Helm chart (charts/sandprobe); its test
// lints the chart and proves it renders the same objects as the kustomize
// base (manifests/) for the same inputs.
package charts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

const chart = "sandprobe"

// helmLabels are what the chart adds to every object's metadata beside
// sandprobe's own labels; the comparison leaves them out.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/instance"}

// objects splits a YAML stream into objects keyed "Kind namespace/name",
// without the chart's own labels.
func objects(t *testing.T, stream []byte) map[string]any {
	t.Helper()
	objs := map[string]any{}
	for _, doc := range strings.Split("\n"+string(stream), "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("parse YAML: %v\n%s", err, doc)
		}
		if m == nil {
			continue
		}
		md, _ := m["metadata"].(map[string]any)
		if l, ok := md["labels"].(map[string]any); ok {
			for _, k := range helmLabels {
				delete(l, k)
			}
		}
		normalizeCEL(m)
		key := fmt.Sprintf("%v %v/%v", m["kind"], md["namespace"], md["name"])
		if _, dup := objs[key]; dup {
			t.Errorf("%s: rendered twice", key)
		}
		objs[key] = m
	}
	return objs
}

// normalizeCEL collapses the whitespace of CEL expressions, which the
// API server ignores: kustomize re-emits folded YAML scalars with their
// more-indented lines' breaks doubled, Helm passes them through as written.
func normalizeCEL(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && (k == "expression" || k == "messageExpression") {
				x[k] = strings.Join(strings.Fields(s), " ")
				continue
			}
			normalizeCEL(e)
		}
	case []any:
		for _, e := range x {
			normalizeCEL(e)
		}
	}
}

func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// kubectl is the one whose built-in kustomize builds the base: the cached
// test binaries', else one on PATH.
func kubectl(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = "/var/cache/sandprobe/k8s/v1.37.2/bin"
	}
	if p := filepath.Join(dir, "kubectl"); fileExists(p) {
		return p
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	testenv.Missing(t, "no kubectl in "+dir+" or on PATH (hack/k8s/build.sh)")
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// overlay writes a kustomization over manifests/ (kustomize refuses
// absolute paths and overlays inside their base) and returns its dir.
func overlay(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	base, err := filepath.Abs("../manifests")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		t.Fatal(err)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" + rel + "]\n" + strings.ReplaceAll(body, "BASE", rel)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestChartMatchesKustomize: for the same inputs, `helm template` of the
// chart and `kubectl kustomize` of the base (with the matching
// components) give the same objects, field for field, apart from the
// chart's own labels: the defaults and the base; every option on and the
// base with every component; another policy and image and an overlay
// with that policy, its rendered admission policy and images: entry.
func TestChartMatchesKustomize(t *testing.T) {
	helm := testenv.HelmBinary(t)
	kc := kubectl(t)
	e2ePolicy, err := filepath.Abs("../hack/e2e/overlay/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		helmArgs  []string
		kustomize func(t *testing.T) string
	}{
		{"defaults", nil, func(t *testing.T) string { return "../manifests" }},
		{"everything on", []string{
			"--set", "sandboxNamespaces={sandboxes}", "--set", "prometheusRule.enabled=true", "--set", "pushgateway.enabled=true",
			"--set", "admission.stage=audit", "--set", "grafanaDashboard.enabled=true", "--set", "mode=serve", "--set", "serviceMonitor.enabled=true",
		}, func(t *testing.T) string {
			return overlay(t, "components:\n"+
				"  - BASE/components/sandbox-namespaces\n  - BASE/components/prometheus-rule\n  - BASE/components/pushgateway\n"+
				"  - BASE/components/admission-audit\n  - BASE/components/grafana-dashboard\n  - BASE/components/serve-watch\n"+
				"  - BASE/components/service-monitor\n")
		}},
		{"another policy and image", []string{
			"--set-file", "policy=" + e2ePolicy, "--set", "image.repository=registry.example/sandprobe", "--set", "image.tag=e2e", "--set", "image.digest=",
			"--set", "cluster=lab-1", "--set", "output=junit", "--set", "schedule=*/5 * * * *", "--set", "suspend=true",
			"--set", "extraEnv[0].name=KUBERNETES_SERVICE_HOST", "--set-string", "extraEnv[0].value=10.250.0.1",
		}, func(t *testing.T) string {
			dir := overlay(t, `configMapGenerator:
  - name: sandprobe-policy
    namespace: sandprobe-system
    behavior: replace
    files: [policy.yaml]
    options:
      disableNameSuffixHash: true
      labels: {app.kubernetes.io/managed-by: sandprobe, sandprobe.dev/policy: e2e-sandbox}
images:
  - {name: ghcr.io/sandprobe/sandprobe, newName: registry.example/sandprobe, newTag: e2e}
patches:
  - path: admission.yaml
  - target: {group: batch, kind: CronJob, name: sandprobe}
    patch: |-
      - {op: replace, path: /spec/schedule, value: "*/5 * * * *"}
      - {op: test, path: /spec/jobTemplate/spec/template/spec/containers/0/env/5/name, value: SANDPROBE_OUTPUT}
      - {op: replace, path: /spec/jobTemplate/spec/template/spec/containers/0/env/5/value, value: junit}
      - {op: test, path: /spec/jobTemplate/spec/template/spec/containers/0/env/7/name, value: SANDPROBE_CLUSTER}
      - {op: add, path: /spec/jobTemplate/spec/template/spec/containers/0/env/7/value, value: lab-1}
      - {op: add, path: /spec/suspend, value: true}
      - {op: add, path: /spec/jobTemplate/spec/template/spec/containers/0/env/-, value: {name: KUBERNETES_SERVICE_HOST, value: 10.250.0.1}}
`)
			copyFile(t, e2ePolicy, filepath.Join(dir, "policy.yaml"))
			copyFile(t, "../hack/e2e/overlay/admission.yaml", filepath.Join(dir, "admission.yaml"))
			return dir
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rendered := objects(t, run(t, helm, append([]string{"template", "sandprobe", chart, "--namespace", "sandprobe-system"}, c.helmArgs...)...))
			// Helm's own: the release namespace outlives uninstall (Helm
			// keeps its release record there; templates/namespace.yaml).
			ns, _ := rendered["Namespace <nil>/sandprobe-system"].(map[string]any)
			if md, _ := ns["metadata"].(map[string]any); md != nil {
				if a, _ := md["annotations"].(map[string]any); a["helm.sh/resource-policy"] == "keep" && len(a) == 1 {
					delete(md, "annotations")
				} else {
					t.Errorf("the release namespace's annotations are %v, want helm.sh/resource-policy: keep alone", md["annotations"])
				}
			}
			built := objects(t, run(t, kc, "kustomize", c.kustomize(t)))
			var keys []string
			for k := range rendered {
				keys = append(keys, k)
			}
			for k := range built {
				if _, ok := rendered[k]; !ok {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				r, inChart := rendered[k]
				b, inBase := built[k]
				switch {
				case !inChart:
					t.Errorf("%s: kustomize builds it, the chart does not render it", k)
				case !inBase:
					t.Errorf("%s: the chart renders it, kustomize does not build it", k)
				case !reflect.DeepEqual(r, b):
					rj, _ := json.MarshalIndent(r, "", "  ")
					bj, _ := json.MarshalIndent(b, "", "  ")
					t.Errorf("%s differs:\n%s", k, lineDiff(string(bj), string(rj)))
				}
			}
		})
	}
}

// lineDiff lists the lines only one side has ("-" kustomize, "+" chart).
func lineDiff(kustomize, chart string) string {
	k, c := strings.Split(kustomize, "\n"), strings.Split(chart, "\n")
	var b strings.Builder
	for _, l := range k {
		if !slices.Contains(c, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range c {
		if !slices.Contains(k, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

// TestChartOperatorAuto: prometheusRule and serviceMonitor "auto" render
// the Prometheus Operator's kinds exactly when the cluster serves
// monitoring.coreos.com/v1 (.Capabilities.APIVersions).
func TestChartOperatorAuto(t *testing.T) {
	helm := testenv.HelmBinary(t)
	for _, c := range []struct {
		apis []string
		want bool
	}{{nil, false}, {[]string{"--api-versions", "monitoring.coreos.com/v1"}, true}} {
		objs := objects(t, run(t, helm, append([]string{"template", "sandprobe", chart, "--set", "mode=serve"}, c.apis...)...))
		for _, k := range []string{"PrometheusRule sandprobe-system/sandprobe", "ServiceMonitor sandprobe-system/sandprobe"} {
			if _, got := objs[k]; got != c.want {
				t.Errorf("api versions %v: %s rendered %v, want %v", c.apis, k, got, c.want)
			}
		}
	}
}

// TestChartLint: `helm lint --strict` is clean for the defaults and with
// every option on, and bad values are refused naming the value.
func TestChartLint(t *testing.T) {
	helm := testenv.HelmBinary(t)
	run(t, helm, "lint", "--strict", chart)
	run(t, helm, "lint", "--strict", chart, "--set", "sandboxNamespaces={sandboxes}", "--set", "mode=serve",
		"--set", "prometheusRule.enabled=true", "--set", "serviceMonitor.enabled=true", "--set", "grafanaDashboard.enabled=true",
		"--set", "pushgateway.enabled=true", "--set", "admission.stage=warn")
	for _, c := range []struct{ set, want string }{
		{"admission.stage=block", "/admission/stage"},
		{"mode=daemon", "/mode"},
		{"image.digest=latest", "/image/digest"},
		{"policy=", "policy"},
		{"policy=kind: SandboxPolicy", "metadata.name"},
	} {
		var stderr bytes.Buffer
		cmd := exec.Command(helm, "template", "sandprobe", chart, "--set", c.set)
		cmd.Stderr = &stderr
		if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("--set %s: err %v, stderr %q; want a refusal naming %s", c.set, err, stderr.String(), c.want)
		}
	}
}

// TestChartFilesAreCopies: the chart's copies of the alert rules and the
// dashboard are the manifests' (helm cannot read outside the chart).
func TestChartFilesAreCopies(t *testing.T) {
	for src, dst := range map[string]string{
		"../manifests/alerts/sandprobe.rules.yml":                            "sandprobe/files/sandprobe.rules.yml",
		"../manifests/components/grafana-dashboard/sandprobe-dashboard.json": "sandprobe/files/sandprobe-dashboard.json",
	} {
		a, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: cp %s %s", dst, src, src, dst)
		}
	}
}
