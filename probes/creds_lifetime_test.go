package probes

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/result"
)

// fakeJWT builds a compact JWS with the given claims and a junk signature:
// the probe reads the claims, it never verifies (the API server does).
func fakeJWT(claims map[string]any) string {
	enc := func(v any) string { b, _ := json.Marshal(v); return base64.RawURLEncoding.EncodeToString(b) }
	return enc(map[string]string{"alg": "RS256", "kid": "k"}) + "." + enc(claims) + "." + base64.RawURLEncoding.EncodeToString([]byte("sig-"+plantedSecret))
}

// TestTokenLifetime: exp − iat (or nbf) against maxLifetime; no exp fails,
// no iat nor nbf is judged by the time left, an opaque token is an error.
func TestTokenLifetime(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) int64 { return now.Add(d).Unix() }
	cases := []struct {
		name  string
		token string
		want  result.Status
		say   string
	}{
		{"48h token", fakeJWT(map[string]any{"iat": at(0), "exp": at(48 * time.Hour), "sub": "system:serviceaccount:a:b"}), result.Fail, "lives 48h0m0s (exp − iat)"},
		{"1h token", fakeJWT(map[string]any{"iat": at(-30 * time.Minute), "exp": at(30 * time.Minute)}), result.Pass, "lives 1h0m0s"},
		{"expired 1h token", fakeJWT(map[string]any{"iat": at(-2 * time.Hour), "exp": at(-time.Hour)}), result.Pass, "lives 1h0m0s"},
		{"nbf only", fakeJWT(map[string]any{"nbf": at(0), "exp": at(3 * time.Hour)}), result.Fail, "(exp − nbf)"},
		{"never expires", fakeJWT(map[string]any{"iat": at(0)}), result.Fail, "never expires"},
		{"no iat, expires soon", fakeJWT(map[string]any{"exp": at(20 * time.Minute)}), result.Inconclusive, "cannot be read"},
		{"no iat, expires late", fakeJWT(map[string]any{"exp": at(72 * time.Hour)}), result.Fail, "still has 72h0m0s to live"},
		{"opaque token", "ghp_" + plantedSecret, result.Error, "no JWT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "token"), []byte(c.token+"\n"), 0o600)
			p := mustPolicy(t, fmt.Sprintf("  credentials:\n    - {name: agent-token, source: secret/agent, mountPath: %q, reason: r, maxLifetime: 1h}\n", dir))
			fs := checkTokenLifetime(context.Background(), &Env{Policy: p, Now: func() time.Time { return now }})
			if len(fs) != 1 || fs[0].Status != c.want || !strings.Contains(fs[0].Actual, c.say) || fs[0].Subject != "agent-token" {
				t.Fatalf("want %s %q, got %+v", c.want, c.say, fs)
			}
			t.Logf("%s: %s (%s)", fs[0].Status, fs[0].Actual, fs[0].Evidence)
			assertNoPlanted(t, fs, plantedSecret)
			assertNoPlanted(t, fs, c.token)
		})
	}
}

// TestTokenLifetimeOnAPIServer: TokenRequest tokens from the tests' real
// kube-apiserver, mounted as a Secret volume would hold them (the key a
// link into ..data): 48 h fails against maxLifetime 1h, 1 h passes; the
// same read from a kubeconfig's user; no output holds a token.
func TestTokenLifetimeOnAPIServer(t *testing.T) {
	cfg := testenv.APIServer(t)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(cfg)
	const ns = "token-lifetime"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	request := func(d time.Duration) string {
		secs := int64(d.Seconds())
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "agent", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := time.Until(tr.Status.ExpirationTimestamp.Time).Round(time.Hour); got != d {
			t.Fatalf("the API server issued a token for %s, asked %s", got, d)
		}
		return tr.Status.Token
	}
	for _, c := range []struct {
		life time.Duration
		want result.Status
	}{{48 * time.Hour, result.Fail}, {time.Hour, result.Pass}} {
		t.Run(c.life.String(), func(t *testing.T) {
			token := request(c.life)
			// A Secret volume: token -> ..data/token, ..data -> ..2026_…
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, "..2026_12_02"), 0o755)
			os.WriteFile(filepath.Join(dir, "..2026_12_02", "token"), []byte(token), 0o600)
			os.Symlink("..2026_12_02", filepath.Join(dir, "..data"))
			os.Symlink("..data/token", filepath.Join(dir, "token"))
			kc := filepath.Join(t.TempDir(), "config")
			os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: agent
clusters: [{name: test, cluster: {server: %q, certificate-authority-data: %s}}]
contexts: [{name: agent, context: {cluster: test, user: agent, namespace: %s}}]
users: [{name: agent, user: {token: %s}}]
`, cfg.Host, base64.StdEncoding.EncodeToString(cfg.CAData), ns, token)), 0o600)
			p := mustPolicy(t, fmt.Sprintf(`  credentials:
    - {name: agent-token, source: secret/agent-token, mountPath: %s, reason: "the agent's token", maxLifetime: 1h}
    - name: agent-kubeconfig
      source: secret/agent-kubeconfig
      mountPath: %s
      reason: "the agent's kubeconfig"
      maxLifetime: 1h
      kubernetes: {scope: {preset: view-only}}
`, dir, kc))
			fs := checkTokenLifetime(ctx, &Env{Policy: p})
			if len(fs) != 2 {
				t.Fatalf("%+v", fs)
			}
			for _, f := range fs {
				if f.Status != c.want || !strings.Contains(f.Actual, "(exp − iat)") {
					t.Errorf("%s: want %s, got %s %s", f.Subject, c.want, f.Status, f.Actual)
				}
				if c.want == result.Fail && f.Fix == "" && f.Expected == "" {
					t.Errorf("no expected: %+v", f)
				}
				t.Logf("%s: %s %s (%s)", f.Subject, f.Status, f.Actual, f.Evidence)
			}
			res := result.ProbeResult{Policy: "t", Findings: fs}
			assertNoSecret(t, res, token)
			assertNoPlanted(t, fs, token)
		})
	}
}
