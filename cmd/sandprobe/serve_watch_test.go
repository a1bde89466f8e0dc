package main

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/page"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
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

// driftingBackend answers each probe location of the spec's scope with
// egress open in namespace a and closed elsewhere, and has a drift phase
// that holds until released: what serve --watch shows while a targeted
// cycle's drift is still running.
type driftingBackend struct {
	open    atomic.Bool
	release chan struct{}
}

func (b *driftingBackend) Run(_ context.Context, spec runner.ProbeSpec) ([]report.ProbeResult, error) {
	var out []report.ProbeResult
	for _, ns := range []string{"a", "b"} {
		if spec.Scope != nil && !spec.Scope.Covers(ns, "n1") {
			continue
		}
		f := report.Finding{Check: "egress.must-fail", Role: report.RoleMustFail, Subject: "192.0.2.10:443", Namespace: ns, Status: report.Pass, Class: "timeout"}
		if ns == "a" && b.open.Load() {
			f.Status, f.Class = report.Fail, report.ClassAnswered
		}
		out = append(out, report.ProbeResult{Schema: report.ProbeResultSchema, Target: "namespace/" + ns + "/node/n1", Where: report.Location{Namespace: ns, Node: "n1"}, Nonce: spec.Nonce,
			Policy: spec.Policy.Metadata.Name, Findings: []report.Finding{f}})
	}
	return out, nil
}

func (b *driftingBackend) AfterProbe(_ context.Context, spec runner.ProbeSpec, run *report.Run) {
	if spec.SkipAfterProbe {
		return
	}
	<-b.release
	run.Findings = append(run.Findings, report.Finding{Check: "drift.netpol.egress-open", Target: "networkpolicy/a/x", Namespace: "a", Status: report.Fail})
	run.Scanned = 3
	if run.Phases == nil {
		run.Phases = map[string]float64{}
	}
	run.Phases["drift"] = 0.1
}

// TestServeWatchShowsVerdictBeforeDrift: a targeted cycle for a policy
// change re-runs drift (policies are what drift compares), which takes
// its time on a large cluster; the probe's verdict is on /metrics as soon
// as it is in, with the last drift kept until the new one ends the run.
func TestServeWatchShowsVerdictBeforeDrift(t *testing.T) {
	p, raw, err := policy.LoadFile(localPolicy)
	if err != nil {
		t.Fatal(err)
	}
	be := &driftingBackend{release: make(chan struct{}, 2)}
	cyc := &cycle{policy: p, raw: raw, backendName: "fake", backend: be, say: func(string) {}}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	srv, err := newServer(cyc.run, &outputs{policy: p, history: page.NewHistory(0)}, time.Second, logger)
	if err != nil {
		t.Fatal(err)
	}
	m, err := report.NewWatchMetrics(srv.registry)
	if err != nil {
		t.Fatal(err)
	}
	scrape := func() map[string]float64 {
		mfs, err := srv.registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			for _, s := range mf.GetMetric() {
				k := mf.GetName()
				for _, l := range s.GetLabel() {
					k += "," + l.GetName() + "=" + l.GetValue()
				}
				out[k] = s.GetGauge().GetValue() + s.GetCounter().GetValue()
			}
		}
		return out
	}
	ctx := context.Background()
	// The first full run: closed everywhere, one drift finding in b.
	be.release <- struct{}{}
	srv.publish(ctx, cyc.run(ctx), time.Now())
	runs := scrape()["sandprobe_runs_total,result=fail"]
	// A NetworkPolicy in a widened "for a minute": a cycle for a.
	be.open.Store(true)
	done := make(chan report.Run, 1)
	go func() { done <- srv.targeted(func() *cycle { return cyc }, m)(ctx, runner.NamespaceScope("a")) }()
	open := "sandprobe_egress_unexpected_open,namespace=a,node=n1"
	waitFor(t, 10*time.Second, "the probe's verdict on /metrics while drift runs", func() bool { return scrape()[open] == 1 })
	during := scrape()
	if during["sandprobe_egress_unexpected_open,namespace=b,node=n1"] != 0 || during["sandprobe_sandboxes_scanned"] != 3 {
		t.Errorf("while drift runs: %v; want b kept and the last drift's count", during)
	}
	if during["sandprobe_runs_total,result=fail"] != runs {
		t.Error("the early verdict counted a run")
	}
	select {
	case <-done:
		t.Fatal("the targeted cycle ended before its drift phase was released")
	default:
	}
	be.release <- struct{}{}
	final := <-done
	var drift []string
	for _, f := range final.Findings {
		if strings.HasPrefix(f.Check, "drift.") {
			drift = append(drift, f.Target)
		}
	}
	if strings.Join(drift, " ") != "networkpolicy/a/x" || final.Scanned != 3 {
		t.Errorf("the run the cycle ends: drift %v, scanned %d; want the new drift's", drift, final.Scanned)
	}
	srv.publish(ctx, final, time.Now())
	if after := scrape(); after["sandprobe_runs_total,result=fail"] != runs+1 || after[open] != 1 {
		t.Errorf("after the cycle: runs %v (want %v), open %v", after["sandprobe_runs_total,result=fail"], runs+1, after[open])
	}
	if got := scrape()["sandprobe_watch_cycles_total,scope=namespaces"]; got != 1 {
		t.Errorf("sandprobe_watch_cycles_total{scope=namespaces} = %v, want 1", got)
	}
}
