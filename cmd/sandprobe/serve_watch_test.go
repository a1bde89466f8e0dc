package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/report"
)

// TestServeWatchBadInput: --watch where it cannot work, a malformed
// --watch-cni and durations that are not positive are found before
// anything runs: one line naming the flag, exit 2.
func TestServeWatchBadInput(t *testing.T) {
	kube := []string{"serve", "--policy", "../../fixtures/policy.yaml", "--backend", "kube", "--kubeconfig", filepath.Join(t.TempDir(), "none"), "--watch"}
	cases := []struct {
		args   []string
		stderr string
	}{
		{[]string{"serve", "--policy", localPolicy, "--watch"}, `sandprobe serve: --watch: watches a cluster's policies and CNI agents, so it needs --backend kube, got "local"`},
		{[]string{"serve", "--policy", localPolicy, "--backend", "docker", "--watch"}, `sandprobe serve: --watch: watches a cluster's policies and CNI agents, so it needs --backend kube, got "docker"`},
		{append(kube, "--watch-cni", "cilium"), `sandprobe serve: --watch-cni: want NAMESPACE/DAEMONSET, got "cilium"`},
		{append(kube, "--watch-cni", "kube-system/cilium/x"), `sandprobe serve: --watch-cni: want NAMESPACE/DAEMONSET, got "kube-system/cilium/x"`},
		{append(kube, "--watch-cni", "Kube_System/cilium"), `sandprobe serve: --watch-cni: namespace "Kube_System" in "Kube_System/cilium":`},
		{append(kube, "--watch-cni", "kube-system/"), `sandprobe serve: --watch-cni: DaemonSet name "" in "kube-system/":`},
		{append(kube, "--watch-debounce", "0s"), "sandprobe serve: --watch-debounce: want a positive duration, got 0s"},
		{append(kube, "--watch-min-interval", "-1s"), "sandprobe serve: --watch-min-interval: want a positive duration, got -1s"},
		{append(kube, "--watch-cni-grace", "0s"), "sandprobe serve: --watch-cni-grace: want a positive duration, got 0s"},
		{[]string{"serve", "--policy", localPolicy, "--watch-debounce", "5s"}, "sandprobe serve: --watch-debounce: only means something with --watch"},
		{[]string{"serve", "--policy", localPolicy, "--watch-cni", "kube-system/cilium"}, "sandprobe serve: --watch-cni: only means something with --watch"},
	}
	for _, c := range cases {
		code, _, stderr := runApp(t, "", c.args...)
		if code != report.ExitBadInput || !strings.HasPrefix(stderr, c.stderr) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line %q", c.args[len(c.args)-2:], code, stderr, c.stderr)
		}
	}
}

// TestServeWatchKube: the real binary's serve --watch against a real API
// server (envtest: pods are stored, never run, so every probe is a
// could-not-run after --deadline — the trigger and the merge are what is
// tested here; issue-15-detect's bench runs the real engine). A
// NetworkPolicy created in one sandbox namespace starts exactly one cycle
// for that namespace, logged and counted, and the other namespace's series
// stay on /metrics and in /report.json.
func TestServeWatchKube(t *testing.T) {
	cfg := testenv.APIServer(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []string{"watch-a", "watch-b", "watch-control"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for name, handler := range map[string]string{"gvisor": "runsc", "kata": "kata"} {
		rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: handler}
		if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile("../../fixtures/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	policyPath := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyPath, []byte(strings.Replace(string(raw), "namespaces: [sandboxes]", "namespaces: [watch-a, watch-b]", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testenv.Binary(t), "serve", "--policy", policyPath, "--backend", "kube", "--kubeconfig", testenv.Kubeconfig(t, cfg),
		"--control-namespace", "watch-control", "--deadline", "2s", "--unschedulable-grace", "1s", "--drift=false",
		"--schedule", "@every 1000h", "--listen", "127.0.0.1:0", "--log-format", "json",
		"--watch", "--watch-debounce", "300ms", "--watch-min-interval", "1s", "--watch-cni", "kube-system/kube-router")
	base, logs := startServeBinary(t, cmd)
	waitFor(t, 60*time.Second, "the first full run", func() bool {
		return httpSamples(t, base+"/metrics")[`sandprobe_runs_total{result="error"}`] >= 1
	})
	before := httpSamples(t, base+"/metrics")
	bSeries := 0
	for k := range before {
		if strings.HasPrefix(k, "sandprobe_check_success{") && strings.Contains(k, "watch-b") {
			bSeries++
		}
	}
	if bSeries == 0 {
		t.Fatalf("no series for watch-b after the full run: %v", before)
	}

	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-all", Namespace: "watch-a"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{}}}}
	if _, err := cs.NetworkingV1().NetworkPolicies("watch-a").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the targeted run", func() bool {
		return httpSamples(t, base+"/metrics")[`sandprobe_runs_total{result="error"}`] >= 2
	})
	time.Sleep(2 * time.Second) // no second cycle
	after := httpSamples(t, base+"/metrics")
	for k, want := range map[string]float64{
		`sandprobe_watch_cycles_total{scope="namespaces"}`:   1,
		`sandprobe_watch_cycles_total{scope="nodes"}`:        0,
		`sandprobe_watch_cycles_total{scope="full"}`:         0,
		`sandprobe_watch_events_total{kind="networkpolicy"}`: 1,
		`sandprobe_runs_total{result="error"}`:               2,
	} {
		if after[k] != want {
			t.Errorf("%s = %v, want %v", k, after[k], want)
		}
	}
	for k, v := range before {
		if strings.HasPrefix(k, "sandprobe_check_success{") && strings.Contains(k, "watch-b") {
			if got, ok := after[k]; !ok || got != v {
				t.Errorf("%s: %v before the cycle for watch-a, %v (present %v) after: a narrow cycle must not drop what it did not probe", k, v, got, ok)
			}
		}
	}
	var started []string
	for _, line := range logs() {
		var l struct{ Msg, Scope string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "watch: cycle started" {
			started = append(started, l.Scope)
		}
	}
	if strings.Join(started, ",") != "namespaces=watch-a" {
		t.Errorf(`"watch: cycle started" logged with scopes %q, want one for namespaces=watch-a`, started)
	}
	if all := strings.Join(logs(), "\n"); !strings.Contains(all, `"kinds":["networkpolicy","namespace"]`) {
		t.Errorf("the log does not say which kinds are watched")
	}
}

// startServeBinary starts cmd (serve --log-format json --listen
// 127.0.0.1:0) and returns its base URL and a reader of its log lines.
func startServeBinary(t *testing.T, cmd *exec.Cmd) (string, func() []string) {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		lines []string
	)
	addr, exited := make(chan string, 1), make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			var l struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "listening" {
				addr <- l.Addr
			}
		}
		exited <- cmd.Wait()
	}()
	logs := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lines...)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("serve logs:\n%s", strings.Join(logs(), "\n"))
		}
	})
	select {
	case a := <-addr:
		return "http://" + a, logs
	case err := <-exited:
		t.Fatalf("serve exited before listening: %v\n%s", err, strings.Join(logs(), "\n"))
	case <-time.After(90 * time.Second):
		t.Fatal("serve did not start listening")
	}
	return "", nil
}
