package probes

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sandprobe/sandprobe/result"
)

// TestTokenAnywhere: a token is not only at the declared path. A projected
// token for another audience (Vault, a cloud's workload identity) sits
// under /var/run/secrets/tokens or a provider's own directory, linked from
// a timestamped ..DATE directory as the kubelet writes it; each is a
// failure, named once. Healthy: the same tree with no token passes.
func TestTokenAnywhere(t *testing.T) {
	write := func(p, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		t.Helper()
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	// A projected volume as the kubelet lays it out.
	projected := func(dir string, files ...string) {
		for _, f := range files {
			write(filepath.Join(dir, "..2026_12_02_10_00_00.1", f), "x")
			link(filepath.Join("..data", f), filepath.Join(dir, f))
		}
		link("..2026_12_02_10_00_00.1", filepath.Join(dir, "..data"))
	}
	cases := []struct {
		name   string
		tree   func(root string)
		status result.Status
		found  []string // relative to root
	}{
		{"healthy: a CA and a namespace, no token", func(root string) {
			projected(filepath.Join(root, "kubernetes.io", "serviceaccount"), "ca.crt", "namespace")
		}, result.Pass, nil},
		{"a Vault token projected beside the service account", func(root string) {
			projected(filepath.Join(root, "kubernetes.io", "serviceaccount"), "ca.crt", "namespace")
			projected(filepath.Join(root, "tokens"), "vault-token")
		}, result.Fail, []string{"tokens/vault-token"}},
		{"EKS pod identity and the declared token", func(root string) {
			projected(filepath.Join(root, "kubernetes.io", "serviceaccount"), "ca.crt", "token")
			projected(filepath.Join(root, "eks.amazonaws.com", "serviceaccount"), "token")
		}, result.Fail, []string{"kubernetes.io/serviceaccount/token", "eks.amazonaws.com/serviceaccount/token"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			root := filepath.Join(dir, "var-run-secrets")
			c.tree(root)
			// /run/secrets as /var/run/secrets under another name: searched once.
			link(root, filepath.Join(dir, "run-secrets"))
			p := mustPolicy(t, "  serviceAccountTokenPath: "+filepath.Join(root, "kubernetes.io/serviceaccount/token")+"\n")
			env := &Env{Policy: p, tokenRoots: []string{root, filepath.Join(dir, "run-secrets")}}
			fs := checkServiceAccountToken(context.Background(), env)
			var got []string
			for _, f := range fs {
				if f.Status != c.status {
					t.Errorf("%s: %s (%s), want %s", f.Subject, f.Status, f.Actual, c.status)
				}
				if f.Status == result.Fail {
					rel, _ := filepath.Rel(root, f.Subject)
					got = append(got, rel)
				}
			}
			slices.Sort(got)
			want := slices.Clone(c.found)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("tokens found %q, want %q", got, want)
			}
			if c.status == result.Pass && len(fs) != 1 {
				t.Errorf("%d findings, want one pass", len(fs))
			}
		})
	}
}
