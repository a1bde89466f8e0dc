package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

// writeKubeconfig writes a kubeconfig for a server address.
func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server, InsecureSkipTLSVerify: true}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRunKubeUnreachable: the CronJob's run against a cluster that does not
// answer exits 3 with one line on stderr naming the address, and still
// writes its reports: a JUnit error and sandprobe_up 0.
func TestRunKubeUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	dir := t.TempDir()
	junit, metrics := filepath.Join(dir, "junit.xml"), filepath.Join(dir, "metrics.prom")
	code, _, stderr := runApp(t, "", "run", "--backend", "kube", "--kubeconfig", writeKubeconfig(t, "https://"+addr),
		"--policy", "../../fixtures/policy.yaml", "--junit", junit, "--metrics-file", metrics)
	if code != 3 {
		t.Fatalf("exit %d, want 3; stderr %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "cannot reach the cluster at https://"+addr) {
		t.Errorf("stderr should be one line naming the cluster, got %q", stderr)
	}
	j, _ := os.ReadFile(junit)
	if !strings.Contains(string(j), "<error") || !strings.Contains(string(j), "launch-failed") {
		t.Errorf("junit has no launch-failed error:\n%s", j)
	}
	m, _ := os.ReadFile(metrics)
	if !strings.Contains(string(m), "sandprobe_up 0") {
		t.Errorf("metrics lack sandprobe_up 0:\n%s", m)
	}
}

// TestRunKubeBadInput: flags and kubeconfigs that cannot work are bad input
// (exit 2), said in one line, before anything talks to a cluster.
func TestRunKubeBadInput(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"pull policy", []string{"--image-pull-policy", "Sometimes"}, "--image-pull-policy"},
		{"missing kubeconfig", []string{"--kubeconfig", "/nonexistent/kubeconfig"}, "kubeconfig"},
		{"grace", []string{"--unschedulable-grace", "0s"}, "--unschedulable-grace"},
		{"parallel", []string{"--parallel", "-2"}, "--parallel"},
		{"run deadline", []string{"--run-deadline", "-1s"}, "--run-deadline"},
		{"sweep after", []string{"--sweep-after", "0s"}, "--sweep-after"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"run", "--backend", "kube", "--policy", "../../fixtures/policy.yaml"}, c.args...)
			code, _, stderr := runApp(t, "", args...)
			if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
				t.Errorf("exit %d, stderr %q; want 2 and one line naming %s", code, stderr, c.want)
			}
		})
	}
}

// TestContextSelectsKubeconfigContext: --context picks the cluster of that
// kubeconfig context for run and drift (kubectl's flag, kubectl's meaning),
// an unknown one is bad input naming it, and completion offers the
// kubeconfig's contexts.
func TestContextSelectsKubeconfigContext(t *testing.T) {
	closed := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close() // nothing listens there once the test runs
		return "https://" + ln.Addr().String()
	}
	current, other := closed(), closed()
	cfg := clientcmdapi.NewConfig()
	for name, server := range map[string]string{"current": current, "other": other} {
		cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, InsecureSkipTLSVerify: true}
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: "t"}
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	}
	cfg.CurrentContext = "current"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	const pol = "../../fixtures/policy.yaml"
	for _, c := range []struct {
		args    []string
		code    int
		want    string
		wantNot string
	}{
		{[]string{"run", "--backend", "kube", "--policy", pol, "--kubeconfig", kubeconfig}, 3, current, other},
		{[]string{"run", "--backend", "kube", "--policy", pol, "--kubeconfig", kubeconfig, "--context", "other"}, 3, other, current},
		{[]string{"run", "--backend", "kube", "--policy", pol, "--kubeconfig", kubeconfig, "--context=nope"}, 2, `"nope"`, ""},
		{[]string{"drift", "--policy", pol, "--kubeconfig", kubeconfig, "--context", "other"}, 3, other, current},
	} {
		code, _, stderr := runApp(t, "", c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) || (c.wantNot != "" && strings.Contains(stderr, c.wantNot)) {
			t.Errorf("%q: exit %d, stderr %q; want %d naming %s", c.args[len(c.args)-2:], code, stderr, c.code, c.want)
		}
	}
	code, out, _ := runApp(t, "", "__complete", "run", "--kubeconfig", kubeconfig, "--context", "")
	if code != 0 || !strings.HasPrefix(out, "current\nother\n") {
		t.Errorf("completion of --context: exit %d, %q", code, out)
	}
}

// TestCompletionNamespaces: --namespace completes as kubectl's does, from
// a real API server (envtest) named by --kubeconfig, after the namespaces
// the --policy file declares; with no cluster, the policy's alone.
func TestCompletionNamespaces(t *testing.T) {
	cfg := testenv.APIServer(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "completion-agents"}}
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	kubeconfig := testenv.Kubeconfig(t, cfg)
	complete := func(args ...string) []string {
		code, out, stderr := runApp(t, "", append([]string{"__complete"}, args...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) == 0 || lines[len(lines)-1] != ":4" {
			t.Fatalf("__complete %q: exit %d, %q %s", args, code, out, stderr)
		}
		return lines[:len(lines)-1]
	}
	got := complete("run", "--policy", "../../fixtures/policy.yaml", "--kubeconfig", kubeconfig, "-n", "")
	if len(got) == 0 || got[0] != "sandboxes" || !slices.Contains(got, "completion-agents") || !slices.Contains(got, "kube-system") {
		t.Errorf("run -n: %q, want sandboxes (the policy's) first, then the cluster's", got)
	}
	if got := complete("drift", "--kubeconfig", kubeconfig, "--namespace", ""); !slices.Contains(got, "completion-agents") {
		t.Errorf("drift --namespace: %q", got)
	}
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	if got := complete("render", "--policy", "../../fixtures/policy.yaml", "-n", ""); !slices.Equal(got, []string{"sandboxes"}) {
		t.Errorf("render -n without a cluster: %q, want the policy's namespaces", got)
	}
}

// TestVerifyImageKubeBadInput: verify-image --backend kube refuses, in one
// line and before any cluster is asked, what cannot work.
func TestVerifyImageKubeBadInput(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no namespace", []string{"--image", "x"}, "--namespace is required"},
		{"no image", []string{"-n", "ci"}, "--image is required"},
		{"docker's runtime", []string{"-n", "ci", "--image", "x", "--runtime", "runsc"}, "--runtime"},
		{"bad --env", []string{"-n", "ci", "--image", "x", "--env", "NOEQUALS"}, "--env"},
		{"pull policy", []string{"-n", "ci", "--image", "x", "--image-pull-policy", "Sometimes"}, "--image-pull-policy"},
		{"missing kubeconfig", []string{"-n", "ci", "--image", "x", "--kubeconfig", "/nonexistent/kubeconfig"}, "kubeconfig"},
		{"unknown backend", []string{"--backend", "podman"}, "--backend"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"verify-image", "--backend", "kube", "--policy", "../../fixtures/scratch-policy.yaml"}, c.args...)
			code, _, stderr := runApp(t, "", args...)
			if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
				t.Errorf("exit %d, stderr %q; want 2 and one line naming %s", code, stderr, c.want)
			}
		})
	}
}
