package probes

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/result"
)

// TestMain stops the API server creds.scope's test starts.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopAPIServer()
	os.Exit(code)
}

// TestScopeCovers: what a declared scope allows, wildcards included: a
// granted "*" is covered only by a declared "*".
func TestScopeCovers(t *testing.T) {
	view := policy.CredentialScope{Preset: policy.ScopeViewOnly}
	logs := policy.CredentialScope{Preset: policy.ScopeNone, Allow: []policy.ScopeRule{{Resources: []string{"pods/*"}, Verbs: []string{"get"}}, {APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"*"}}}}
	cases := []struct {
		s    policy.CredentialScope
		g    grant
		want bool
	}{
		{view, grant{"", "pods", "list"}, true},
		{view, grant{"apps", "deployments", "watch"}, true},
		{view, grant{"", "pods/log", "get"}, true},
		{view, grant{"", "secrets", "get"}, false},
		{view, grant{"", "pods/exec", "get"}, false}, // exec over a websocket upgrades a GET
		{view, grant{"", "nodes/proxy", "get"}, false},
		{view, grant{"", "pods/*", "get"}, false},
		{view, grant{"", "*", "get"}, false}, // "*" includes secrets
		{view, grant{"*", "pods", "get"}, false},
		{view, grant{"", "pods", "create"}, false},
		{view, grant{"", "pods", "*"}, false},
		{view, grant{"authorization.k8s.io", "selfsubjectrulesreviews", "create"}, true}, // asking about itself
		{logs, grant{"", "pods/log", "get"}, true},
		{logs, grant{"", "pods", "get"}, false},
		{logs, grant{"apps", "deployments", "delete"}, true},
		{logs, grant{"", "deployments", "delete"}, false},
	}
	for _, c := range cases {
		if got := covers(c.s, c.g); got != c.want {
			t.Errorf("%s under %+v: %v, want %v", c.g, c.s, got, c.want)
		}
	}
}

// TestCredsScopeOnAPIServer asks a real kube-apiserver (on loopback) with
// real service-account tokens: bound to the built-in view ClusterRole the
// credential passes, bound to edit it fails naming secrets and creating
// pods, and a token the server no longer accepts (its ServiceAccount
// deleted, the Secret it was bound to deleted, or garbage) is an error. No
// token appears in any output.
func TestCredsScopeOnAPIServer(t *testing.T) {
	cfg := testenv.APIServer(t)
	if u, err := url.Parse(cfg.Host); err != nil || !strings.HasPrefix(u.Hostname(), "127.") {
		t.Fatalf("the API server must be on loopback, got %s", cfg.Host)
	}
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(cfg)
	const ns = "creds-scope"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tokens := scopeTokens(t, cfg, cs, ns)

	dir := t.TempDir()
	cases := []struct {
		name, token string
		form        string // kubeconfig or token
		scope       policy.CredentialScope
		want        result.Status
		actual      []string
	}{
		{"view, view-only", "viewer", "kubeconfig", policy.CredentialScope{Preset: policy.ScopeViewOnly}, result.Pass, []string{"no more than declared"}},
		{"view, as a mounted token", "viewer", "token", policy.CredentialScope{Preset: policy.ScopeViewOnly}, result.Pass, nil},
		{"edit, view-only", "editor", "kubeconfig", policy.CredentialScope{Preset: policy.ScopeViewOnly}, result.Fail, []string{"get secrets", "list secrets", "create pods", "create pods/exec"}},
		{"edit, as a mounted token", "editor", "token", policy.CredentialScope{Preset: policy.ScopeViewOnly}, result.Fail, []string{"secrets", "create pods"}},
		{"view, none declared", "viewer", "kubeconfig", policy.CredentialScope{Preset: policy.ScopeNone}, result.Fail, []string{"grants beyond the scope in its rules", "configmaps (get, list, watch)"}},
		{"ServiceAccount deleted", "gone", "kubeconfig", policy.CredentialScope{Preset: policy.ScopeViewOnly}, result.Error, []string{"401"}},
		{"bound Secret deleted", "bound", "token", policy.CredentialScope{Preset: policy.ScopeViewOnly}, result.Error, []string{"401"}},
		{"garbage", "garbage", "kubeconfig", policy.CredentialScope{Preset: policy.ScopeViewOnly}, result.Error, []string{"401"}},
		{"view, re-signed by the test (the control for expired)", "viewer-resigned", "token", policy.CredentialScope{Preset: policy.ScopeViewOnly}, result.Pass, nil},
		{"expired", "expired", "kubeconfig", policy.CredentialScope{Preset: policy.ScopeViewOnly}, result.Error, []string{"401"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mount := filepath.Join(dir, fmt.Sprint(i))
			kc := writeCredential(t, cfg, mount, c.form, tokens[c.token], ns)
			p := &policy.Policy{Metadata: policy.Metadata{Name: "creds"}, Spec: policy.Spec{Credentials: []policy.Credential{{
				Name: "cluster-" + c.token, Source: "secret/x", MountPath: mount, Reason: "test", Kubernetes: &policy.KubeCredential{Scope: c.scope},
			}}}}
			if c.form == "token" {
				p.Spec.Credentials[0].Kubernetes.Token, p.Spec.Credentials[0].Kubernetes.Server = "token", cfg.Host
			} else {
				p.Spec.Credentials[0].Kubernetes.Kubeconfig = kc
			}
			res := Run(ctx, &Env{Policy: p, Nonce: "n"}, Selection{Only: []string{"creds.scope"}})
			if len(res.Findings) != 1 {
				t.Fatalf("findings %+v", res.Findings)
			}
			f := res.Findings[0]
			if f.Status != c.want || f.Subject != "cluster-"+c.token+" namespace/"+ns {
				t.Fatalf("%s %s: %q (%s)", f.Subject, f.Status, f.Actual, f.Evidence)
			}
			for _, want := range c.actual {
				if !strings.Contains(f.Actual, want) {
					t.Errorf("actual %q does not name %q", f.Actual, want)
				}
			}
			if f.Status != result.Pass && (f.Expected == "" || f.Fix == "") {
				t.Errorf("a non-pass needs expected and fix: %+v", f)
			}
			if f.Status == result.Pass && !strings.Contains(f.Evidence, "system:serviceaccount:"+ns+":viewer") {
				t.Errorf("the evidence does not say who asked: %s", f.Evidence)
			}
			t.Logf("%s: %s | %s", f.Status, f.Actual, f.Evidence)
			assertNoSecret(t, res, tokens[c.token])
		})
	}
}

// scopeTokens gives ServiceAccounts in ns the built-in view and edit roles
// and returns their tokens by case: viewer, editor, two revoked (the
// ServiceAccount deleted, the Secret a token is bound to deleted),
// garbage, and the viewer's re-signed by the test, valid and expired.
func scopeTokens(t *testing.T, cfg *rest.Config, cs kubernetes.Interface, ns string) map[string]string {
	t.Helper()
	ctx := context.Background()
	bind := func(sa, role string) {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}
		if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	token := func(sa string, bound *corev1.Secret) string {
		req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(600))}}
		if bound != nil {
			req.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: bound.Name, UID: bound.UID}
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	aggregate(t, cs, "view", "edit")
	for sa, role := range map[string]string{"viewer": "view", "editor": "edit", "gone": "edit", "bound": "edit"} {
		bind(sa, role)
	}
	anchor, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "anchor"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{"viewer": token("viewer", nil), "editor": token("editor", nil), "gone": token("gone", nil), "bound": token("bound", anchor)}
	tokens["garbage"] = "eyJhbGciOiJSUzI1NiJ9.bm90LWEtdG9rZW4.c2lnbmF0dXJl"
	// An expired token: TokenRequest hands out none (ten minutes at least),
	// so the viewer's own token is re-signed with the API server's key and
	// an expiry in the past. The same re-signing with a future expiry must
	// be accepted, or the expired case would prove only a bad signature.
	key := testenv.APIServerTokenKey(t)
	now := time.Now()
	tokens["viewer-resigned"] = resign(t, key, tokens["viewer"], now.Add(-time.Minute), now.Add(10*time.Minute))
	tokens["expired"] = resign(t, key, tokens["viewer"], now.Add(-11*time.Minute), now.Add(-time.Minute))
	// The RBAC authorizer sees new bindings through an informer.
	waitAllowed(t, cfg, tokens["viewer"], ns, "list", "pods", true)
	waitAllowed(t, cfg, tokens["editor"], ns, "create", "pods", true)
	// Revoke two: delete the ServiceAccount, delete the Secret a token is bound to.
	if err := cs.CoreV1().ServiceAccounts(ns).Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Secrets(ns).Delete(ctx, "anchor", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRejected(t, cfg, tokens["gone"])
	waitRejected(t, cfg, tokens["bound"])
	return tokens
}

// aggregate fills the built-in aggregated ClusterRoles (view, edit) with
// the rules of the roles their aggregationRule selects, as the
// clusterrole-aggregation controller does; envtest runs no controller
// manager, so without this they are empty.
func aggregate(t *testing.T, cs kubernetes.Interface, roles ...string) {
	t.Helper()
	ctx := context.Background()
	for _, name := range roles {
		role, err := cs.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
		if err != nil || role.AggregationRule == nil {
			t.Fatalf("built-in ClusterRole %s: %v", name, err)
		}
		var rules []rbacv1.PolicyRule
		for _, sel := range role.AggregationRule.ClusterRoleSelectors {
			list, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(&sel)})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range list.Items {
				if r.Name != name {
					rules = append(rules, r.Rules...)
				}
			}
		}
		role.Rules = rules
		if _, err := cs.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// writeCredential mounts a credential the way a sandbox gets it: a
// kubeconfig with the token inline, or a service-account style directory.
func writeCredential(t *testing.T, cfg *rest.Config, dir, form, token, ns string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if form == "token" {
		write("token", token)
		write("ca.crt", string(cfg.CAData))
		write("namespace", ns)
		return ""
	}
	write("config", fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: sandbox
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority-data: %s
contexts:
- name: sandbox
  context: {cluster: test, user: agent, namespace: %s}
users:
- name: agent
  user:
    token: %s
`, cfg.Host, base64.StdEncoding.EncodeToString(cfg.CAData), ns, token))
	return "config"
}

// assertNoSecret writes the result every way sandprobe writes results and
// looks for the secret in each.
func assertNoSecret(t *testing.T, res result.ProbeResult, secret string) {
	t.Helper()
	run := report.Run{Policy: res.Policy, Findings: res.Findings, Probes: []result.ProbeResult{res}}
	outputs := map[string]report.Writer{"json": report.JSON{}, "junit": report.JUnit{}, "text": report.Text{Verbose: true}}
	for name, w := range outputs {
		var buf bytes.Buffer
		if err := w.Write(&buf, run); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(buf.String(), secret) {
			t.Errorf("the %s output holds the token", name)
		}
	}
	compact, err := res.CompactJSON(1 << 20) // what a termination message falls back to, uncompressed
	if err != nil || bytes.Contains(compact, []byte(secret)) {
		t.Errorf("the compact result holds the token (%v)", err)
	}
}

// waitAllowed polls a SelfSubjectAccessReview with the token until the
// answer is want (RBAC sees new bindings through an informer).
func waitAllowed(t *testing.T, cfg *rest.Config, token, ns, verb, resource string, want bool) {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(withToken(cfg, token))
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authzv1.SelfSubjectAccessReview{
			Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: resource}}}, metav1.CreateOptions{})
		if err == nil && r.Status.Allowed == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s in %s never became %v: %v", verb, resource, ns, want, err)
		}
	}
}

// waitRejected polls until the API server refuses the token (its lookup of
// the ServiceAccount or bound object may be cached a moment).
func waitRejected(t *testing.T, cfg *rest.Config, token string) {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(withToken(cfg, token))
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil && strings.Contains(err.Error(), "Unauthorized") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the revoked token is still accepted (%v)", err)
		}
	}
}

func withToken(cfg *rest.Config, token string) *rest.Config {
	c := rest.AnonymousClientConfig(cfg)
	c.BearerToken = token
	return c
}

func ptr[T any](v T) *T { return &v }

// resign rewrites a service-account token's validity (iat, nbf, exp) and
// signs it again, ES256, with the API server's own key: the claims are the
// server's, only the times are the test's.
func resign(t *testing.T, key crypto.Signer, token string, from, until time.Time) string {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %d parts", len(parts))
	}
	var header map[string]any
	if b, err := base64.RawURLEncoding.DecodeString(parts[0]); err != nil || json.Unmarshal(b, &header) != nil || header["alg"] != "ES256" {
		t.Fatalf("token header %v (%v): the test signs ES256 only", header, err)
	}
	var claims map[string]any
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(b, &claims) != nil {
		t.Fatalf("token claims: %v", err)
	}
	claims["iat"], claims["nbf"], claims["exp"] = from.Unix(), from.Unix(), until.Unix()
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	signed := parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload)
	digest := sha256.Sum256([]byte(signed))
	r, sv, err := ecdsa.Sign(rand.Reader, key.(*ecdsa.PrivateKey), digest[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	sv.FillBytes(sig[32:])
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}
