package drift

import (
	"bytes"
	"strings"
	"testing"
)

// TestClaimsJudgedOnlyWithTheirTemplate: a v1alpha1 claim naming a pool of
// another runtime fails; a v1beta1 claim (its pool only) is neither judged
// nor counted: no pass without the claim's own template to compare.
func TestClaimsJudgedOnlyWithTheirTemplate(t *testing.T) {
	tpl := func(name, runtime string) string {
		return "apiVersion: extensions.agents.x-k8s.io/v1alpha1\nkind: SandboxTemplate\nmetadata: {name: " + name + ", namespace: sandboxes}\n" +
			"spec:\n  networkPolicyManagement: Unmanaged\n  podTemplate:\n    metadata: {labels: {sandbox: \"true\"}}\n    spec: {runtimeClassName: " + runtime + ", containers: [{name: a, image: x}]}\n"
	}
	docs := []string{tpl("kata-t", "kata"), tpl("gvisor-t", "gvisor"),
		"apiVersion: extensions.agents.x-k8s.io/v1alpha1\nkind: SandboxWarmPool\nmetadata: {name: gvisor-pool, namespace: sandboxes}\nspec: {replicas: 1, sandboxTemplateRef: {name: gvisor-t}}\n"}
	for _, c := range []struct {
		name, claim string
		fails       bool
		counted     bool
	}{
		{"v1alpha1, pool of another runtime", "apiVersion: extensions.agents.x-k8s.io/v1alpha1\nkind: SandboxClaim\nmetadata: {name: c, namespace: sandboxes}\nspec: {sandboxTemplateRef: {name: kata-t}, warmpool: gvisor-pool}\n", true, true},
		{"v1alpha1, no pool named", "apiVersion: extensions.agents.x-k8s.io/v1alpha1\nkind: SandboxClaim\nmetadata: {name: c, namespace: sandboxes}\nspec: {sandboxTemplateRef: {name: kata-t}}\n", false, true},
		{"v1beta1", "apiVersion: extensions.agents.x-k8s.io/v1beta1\nkind: SandboxClaim\nmetadata: {name: c, namespace: sandboxes}\nspec: {warmPoolRef: {name: gvisor-pool}}\n", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &Manifests{}
			if err := m.DecodeManifests(bytes.NewReader([]byte(strings.Join(append(docs, c.claim), "---\n"))), "f"); err != nil {
				t.Fatal(err)
			}
			e, err := NewEngine(oraclePolicy())
			if err != nil {
				t.Fatal(err)
			}
			col := NewCollector()
			if err := CheckManifests(e, m, col); err != nil {
				t.Fatal(err)
			}
			fails, counted := false, col.Scanned == 3 // the two templates and the claim
			for _, f := range col.Findings {
				if f.Target == "sandboxclaim/sandboxes/c" && f.Check == ClaimWarmRuntime {
					fails = true
				}
			}
			if fails != c.fails || counted != c.counted {
				t.Errorf("fails %v (want %v), scanned %d (claim counted: want %v)", fails, c.fails, col.Scanned, c.counted)
			}
		})
	}
}
