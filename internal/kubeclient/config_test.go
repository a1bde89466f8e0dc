package kubeclient

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: blue
  cluster: {server: "https://127.0.0.1:6443"}
- name: green
  cluster: {server: "https://127.0.0.1:7443"}
users:
- name: ci
  user: {token: not-a-secret}
contexts:
- name: green
  context: {cluster: green, user: ci, namespace: sandboxes}
- name: blue
  context: {cluster: blue, user: ci}
current-context: blue
`

// TestLoaders: the one loader picks the kubeconfig's cluster and namespace
// by context as kubectl does, lists its contexts for completion, and says
// which file it could not load.
func TestLoaders(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ context, host, namespace string }{
		{"", "https://127.0.0.1:6443", "default"},
		{"green", "https://127.0.0.1:7443", "sandboxes"},
	} {
		cfg, err := Config(path, c.context)
		if err != nil {
			t.Fatalf("context %q: %v", c.context, err)
		}
		if cfg.Host != c.host || cfg.BearerToken != "not-a-secret" {
			t.Errorf("context %q: host %s, want %s with the user's token", c.context, cfg.Host, c.host)
		}
		if ns := Namespace(path, c.context); ns != c.namespace {
			t.Errorf("context %q: namespace %q, want %q", c.context, ns, c.namespace)
		}
	}
	if names, err := Contexts(path); err != nil || !slices.Equal(names, []string{"blue", "green"}) {
		t.Errorf("contexts %v (%v), want [blue green]", names, err)
	}
	if _, err := Config(path, "red"); err == nil || !strings.Contains(err.Error(), `"red"`) {
		t.Errorf("an unknown context: %v, want an error naming it", err)
	}
	missing := filepath.Join(t.TempDir(), "nope")
	if _, err := Config(missing, ""); err == nil || !strings.Contains(err.Error(), "load kubeconfig") {
		t.Errorf("a missing file: %v, want a load kubeconfig error", err)
	}
}
