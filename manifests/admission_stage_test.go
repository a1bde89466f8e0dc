package manifests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

// TestAuditStageComponent: the base with components/admission-audit holds
// exactly what `render --format admission --mode warn,audit` makes of the
// base's policy, and differs from the base in the bindings'
// validationActions alone.
func TestAuditStageComponent(t *testing.T) {
	var stderr bytes.Buffer
	cmd := exec.Command(testenv.Binary(t), "render", "--format", "admission", "--policy", "policy.yaml", "--mode", "warn,audit")
	cmd.Stderr = &stderr
	rendered, err := cmd.Output()
	if err != nil {
		t.Fatalf("render --mode warn,audit: %v\n%s", err, stderr.String())
	}
	// An overlay as a user writes it: the base plus the component. Outside
	// manifests/, which kustomize would otherwise see as a cycle.
	base, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, base) // kustomize takes no absolute roots
	if err != nil {
		t.Fatal(err)
	}
	kz := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" + rel + "]\ncomponents: [" + filepath.Join(rel, "components", "admission-audit") + "]\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kz), 0o600); err != nil {
		t.Fatal(err)
	}
	want, order := documents(t, rendered)
	staged, stagedOrder := documents(t, kustomize(t, overlay))
	holds(t, overlay, staged, want, order)
	built, baseOrder := documents(t, kustomize(t, "."))
	if !reflect.DeepEqual(stagedOrder, baseOrder) {
		t.Fatalf("the audit stage builds %v, the base %v", stagedOrder, baseOrder)
	}
	bindings := []string{"ValidatingAdmissionPolicyBinding <nil>/sandprobe-sandbox-runtime", "ValidatingAdmissionPolicyBinding <nil>/sandprobe-sandbox-templates"}
	for _, key := range baseOrder {
		if slices.Contains(bindings, key) {
			continue
		}
		if !reflect.DeepEqual(staged[key], built[key]) {
			t.Errorf("%s: the audit stage changes it; it may change the bindings only", key)
		}
	}
	for _, binding := range bindings {
		actions := func(m map[string]map[string]any) any { return m[binding]["spec"].(map[string]any)["validationActions"] }
		if got := actions(staged); !reflect.DeepEqual(got, []any{"Warn", "Audit"}) {
			t.Errorf("audit stage: %s: validationActions %v, want [Warn Audit]", binding, got)
		}
		if got := actions(built); !reflect.DeepEqual(got, []any{"Deny"}) {
			t.Errorf("base: %s: validationActions %v, want [Deny]", binding, got)
		}
	}
}
