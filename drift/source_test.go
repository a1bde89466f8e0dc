package drift_test

import (
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/drift"
)

// TestLocate: findings on objects read from files get the line of the
// field to fix, across the shapes files come in — leading separators and
// comments, CRLF line endings, JSON documents, items of Lists — and a
// field that is not written lands on the nearest one that is.
func TestLocate(t *testing.T) {
	const privileged = "privileged: true"
	cases := []struct {
		name, file string
		rule       string
		want       string // the text of the line the finding must point at
	}{
		{"leading separators and comments", "---\n---\n# a comment\n\napiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  namespace: sandboxes\n  labels: {sandbox: \"true\"}\nspec:\n  containers:\n    - name: agent\n      image: x\n      securityContext:\n        privileged: true\n",
			drift.PodPrivileged, privileged},
		{"CRLF", strings.ReplaceAll("apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: sandboxes, labels: {sandbox: \"true\"}}\nspec:\n  containers:\n    - name: agent\n      image: x\n      securityContext:\n        privileged: true\n", "\n", "\r\n"),
			drift.PodPrivileged, privileged},
		{"second document", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: sandboxes, labels: {sandbox: \"true\"}}\nspec:\n  hostNetwork: true\n  containers: [{name: agent, image: x}]\n",
			drift.PodHostNetwork, "hostNetwork: true"},
		{"JSON", "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"Pod\",\n  \"metadata\": {\"name\": \"a\", \"namespace\": \"sandboxes\", \"labels\": {\"sandbox\": \"true\"}},\n  \"spec\": {\n    \"hostPID\": true,\n    \"containers\": [{\"name\": \"agent\", \"image\": \"x\"}]\n  }\n}\n",
			drift.PodHostPID, "\"hostPID\": true,"},
		{"item of a List", "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: Pod\n    metadata: {name: other, namespace: sandboxes, labels: {sandbox: \"true\"}}\n    spec:\n      containers: [{name: agent, image: x}]\n  - apiVersion: v1\n    kind: Pod\n    metadata: {name: a, namespace: sandboxes, labels: {sandbox: \"true\"}}\n    spec:\n      hostIPC: true\n      containers: [{name: agent, image: x}]\n",
			drift.PodHostIPC, "hostIPC: true"},
		{"a field not written lands on its container", "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: sandboxes, labels: {sandbox: \"true\"}}\nspec:\n  containers:\n    - name: sidecar\n      image: x\n      securityContext: {capabilities: {drop: [ALL]}}\n    - name: agent\n      image: z\n",
			drift.PodCapDrop, "- name: agent"},
		{"the policy, not the pod", "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: sandboxes, labels: {sandbox: \"true\"}}\nspec:\n  containers: [{name: agent, image: x}]\n---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: wide, namespace: sandboxes}\nspec:\n  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n    - to:\n        - ipBlock: {cidr: 0.0.0.0/0}\n",
			drift.NetpolWorld, "- ipBlock: {cidr: 0.0.0.0/0}"},
	}
	p := loadPolicy(t, "policy.yaml")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := &drift.Manifests{}
			if err := m.DecodeManifests(strings.NewReader(c.file), "x.yaml"); err != nil {
				t.Fatal(err)
			}
			e, err := drift.NewEngine(p)
			if err != nil {
				t.Fatal(err)
			}
			col := drift.NewCollector()
			if err := drift.CheckManifests(e, m, col); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.ReplaceAll(c.file, "\r\n", "\n"), "\n")
			var got []string
			for _, f := range col.Findings {
				if f.Check != c.rule {
					continue
				}
				if f.File != "x.yaml" || f.Line < 1 || f.Line > len(lines) {
					t.Fatalf("%s at %q line %d", f.Check, f.File, f.Line)
				}
				got = append(got, strings.TrimSpace(lines[f.Line-1]))
			}
			if len(got) == 0 || got[0] != c.want {
				t.Fatalf("%s at %q, want the line %q", c.rule, got, c.want)
			}
		})
	}
}
