package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDriftNamespaceLabels: an AdminNetworkPolicy that opens the world to
// namespaces labelled team=agents, beside hardened pods whose namespace's
// Namespace object is not in the files. Without the labels the verdict is
// inconclusive (exit 1, said why); --namespace-labels settles it both ways;
// a malformed value is exit 2 with one line naming it.
func TestDriftNamespaceLabels(t *testing.T) {
	anp := filepath.Join(t.TempDir(), "anp.yaml")
	os.WriteFile(anp, []byte(`apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: team-open}
spec:
  priority: 20
  subject: {namespaces: {matchLabels: {team: agents}}}
  egress:
  - {name: all, action: Allow, to: [{networks: [0.0.0.0/0, "::/0"]}]}
`), 0o644)
	base := []string{"drift", "--policy", fx + "policy.yaml", "-f", fx + "drift/hardened.yaml", "-f", anp}
	for _, c := range []struct {
		name   string
		extra  []string
		code   int
		stdout string
		stderr string
	}{
		{"unknown labels", nil, 1, "if it selects namespace sandboxes", ""},
		{"selected", []string{"--namespace-labels", "sandboxes=team=agents,tier=prod"}, 1, "FAIL high     drift.anp.world", ""},
		{"not selected", []string{"--namespace-labels", "sandboxes=team=other"}, 0, "CONFORMANT", ""},
		{"no labels", []string{"--namespace-labels=sandboxes="}, 0, "CONFORMANT", ""},
		{"no value", []string{"--namespace-labels", "sandboxes"}, 2, "", "want NAMESPACE=KEY=VALUE"},
		{"bad key", []string{"--namespace-labels", "sandboxes=-x=y"}, 2, "", `label key "-x"`},
		{"twice", []string{"--namespace-labels", "sandboxes=a=b", "--namespace-labels", "sandboxes=c=d"}, 2, "", "given twice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runApp(t, "", append(append([]string(nil), base...), c.extra...)...)
			if code != c.code || !strings.Contains(stdout, c.stdout) || !strings.Contains(stderr, c.stderr) {
				t.Fatalf("exit %d, want %d; stdout %q in:\n%s\nstderr %q in:\n%s", code, c.code, c.stdout, stdout, c.stderr, stderr)
			}
			if c.code == 2 && strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
				t.Errorf("want one line on stderr:\n%s", stderr)
			}
		})
	}
	if code, _, stderr := runApp(t, "", "drift", "--policy", fx+"policy.yaml", "--namespace-labels", "a=b=c", "--kubeconfig", "/dev/null"); code != 2 || !strings.Contains(stderr, "give -f") {
		t.Errorf("--namespace-labels without -f: exit %d, %s", code, stderr)
	}
}
