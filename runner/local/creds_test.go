package local_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sourcegraph/conc"
	"golang.org/x/sys/unix"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/local"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopAPIServer()
	os.Exit(code)
}

// TestCredsScopeInSandbox runs creds.scope the whole way: a kubeconfig
// holding a token bound to the edit ClusterRole, declared view-only and
// mounted (read-only, from spec.credentials[].source) into the local
// sandbox, whose network namespace holds nothing but loopback and a port
// forwarded to the real API server on this machine's loopback. The probe
// fails naming secrets and creating pods, and the token is in no output:
// not the JSON, JUnit or text report, not the probe's stderr, not the
// runner's debug log.
func TestCredsScopeInSandbox(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := testenv.APIServer(t)
	api, err := url.Parse(cfg.Host)
	if err != nil || !strings.HasPrefix(api.Hostname(), "127.") {
		t.Fatalf("the API server must be on loopback, got %s", cfg.Host)
	}
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(cfg)
	const ns = "creds-sandbox"
	mustCreate := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	mustCreate(cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}))
	// A Role of edit's kind of rights (envtest runs no controller to fill the
	// aggregated edit ClusterRole; probes.TestCredsScopeOnAPIServer does that).
	mustCreate(cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "agent"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "secrets", "configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}},
	}}, metav1.CreateOptions{}))
	mustCreate(cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "agent"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "agent", Namespace: ns}}}, metav1.CreateOptions{}))
	exp := int64(600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "agent", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token

	netns := fmt.Sprintf("sandprobe-creds-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", netns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", netns).Run() })
	port := forwardIntoNetns(t, netns, api.Host)

	// The credential on the host (under /var, which the sandbox sees only
	// through the mount the policy declares: /var/tmp is not bound apart).
	src, err := os.MkdirTemp("/var/tmp", "sandprobe-creds-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(src) })
	os.Chmod(src, 0o755)
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: agent
clusters: [{name: test, cluster: {server: "https://127.0.0.1:%d", certificate-authority-data: %s}}]
contexts: [{name: agent, context: {cluster: test, user: agent, namespace: %s}}]
users: [{name: agent, user: {token: %s}}]
`, port, base64.StdEncoding.EncodeToString(cfg.CAData), ns, token)
	if err := os.WriteFile(filepath.Join(src, "config"), []byte(kubeconfig), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := []byte(fmt.Sprintf(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: creds-sandbox}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  identity: {uid: 65532, gid: 65532}
  filesystem: {readOnlyRoot: true, writable: [/tmp]}
  credentials:
    - name: cluster-view
      source: %s
      mountPath: /run/agent/kube
      reason: "read-only cluster access for the agent"
      kubernetes: {kubeconfig: config, scope: {preset: view-only}}
`, src))
	p, err := policy.Load(doc)
	if err != nil {
		t.Fatal(err)
	}
	// The runner's debug log carries the probe's stderr.
	var logs bytes.Buffer
	nonce := "nonce-creds-in-sandbox"
	be := &local.Backend{Sandbox: local.SandboxFor(p, netns), Binary: testenv.Binary(t),
		Logger:  slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Command: []string{local.ProbePath, "probe", "--policy", "-", "--nonce", nonce, "--only", "creds"}}
	results, err := be.Run(ctx, runner.ProbeSpec{Policy: p, PolicyBytes: doc, Nonce: nonce, Deadline: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	run := report.Run{Policy: p.Metadata.Name, Probes: results}
	for _, r := range results {
		run.Findings = append(run.Findings, runner.Findings(r.Target, r, probes.FixFor)...)
	}
	var scope *report.Finding
	for i, f := range run.Findings {
		if f.Check == "creds.scope" {
			scope = &run.Findings[i]
		}
	}
	if scope == nil || scope.Status != report.Fail || !strings.Contains(scope.Actual, "get secrets") || !strings.Contains(scope.Actual, "create pods") || scope.Fix == "" {
		t.Fatalf("creds.scope: %+v; findings %v", scope, names(run.Findings))
	}
	t.Logf("%s: %s", scope.Name(), report.ExpectedActual(*scope))
	outputs := map[string]string{"the runner's debug log": logs.String()}
	for name, w := range map[string]report.Writer{"json": report.JSON{}, "junit": report.JUnit{}, "text": report.Text{Verbose: true}} {
		var buf bytes.Buffer
		if err := w.Write(&buf, run); err != nil {
			t.Fatal(err)
		}
		outputs[name] = buf.String()
	}
	if !strings.Contains(logs.String(), "local sandbox finished") {
		t.Errorf("the debug log did not record the run: %s", logs.String())
	}
	for name, out := range outputs {
		if strings.Contains(out, token) {
			t.Errorf("%s holds the token", name)
		}
	}
}

// forwardIntoNetns listens on 127.0.0.1 inside the named network namespace
// and forwards each connection to target on this machine's loopback: the
// sandbox reaches the API server, and nothing else, through it.
func forwardIntoNetns(t *testing.T, netns, target string) int {
	t.Helper()
	var l net.Listener
	var lerr error
	var wg conc.WaitGroup
	wg.Go(func() {
		// This thread enters the namespace and is never used again: it
		// ends with the goroutine (LockOSThread without Unlock).
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			lerr = err
			return
		}
		defer unix.Close(fd)
		if lerr = unix.Setns(fd, unix.CLONE_NEWNET); lerr != nil {
			return
		}
		exec.Command("ip", "link", "set", "lo", "up").Run() // a child of this thread: in the namespace
		l, lerr = net.Listen("tcp", "127.0.0.1:0")
	})
	wg.Wait()
	if lerr != nil {
		t.Fatalf("listen in %s: %v", netns, lerr)
	}
	var conns conc.WaitGroup
	t.Cleanup(conns.Wait) // after the listener is closed (cleanups run last first)
	t.Cleanup(func() { l.Close() })
	conns.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer c.Close()
				up, err := net.DialTimeout("tcp", target, 5*time.Second) // from this machine's namespace
				if err != nil {
					return
				}
				defer up.Close()
				var pipe conc.WaitGroup
				pipe.Go(func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite() })
				io.Copy(c, up)
				pipe.Wait()
			})
		}
	})
	return l.Addr().(*net.TCPAddr).Port
}
