package kube

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// flakyAPI ends or breaks the backend's first watches the ways a real API
// server does: the watch request refused with 410 Gone (the version was
// compacted away), an ERROR event saying the version expired, and a watch
// the server simply closes (its timeout).
type flakyAPI struct {
	API
	mu             sync.Mutex
	watches, lists int
}

func (f *flakyAPI) WatchPods(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error) {
	f.mu.Lock()
	f.watches++
	n := f.watches
	f.mu.Unlock()
	if !strings.HasPrefix(opts.FieldSelector, "metadata.name=sandprobe-") || opts.TimeoutSeconds == nil {
		return f.API.WatchPods(ctx, ns, opts) // waitGone's watches stay healthy
	}
	switch n {
	case 1:
		return nil, apierrors.NewResourceExpired("too old resource version: 1 (42)")
	case 2:
		fw := watch.NewFakeWithChanSize(1, false)
		fw.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
		fw.Stop()
		return fw, nil
	case 3:
		return watch.NewEmptyWatch(), nil
	}
	return f.API.WatchPods(ctx, ns, opts)
}

func (f *flakyAPI) ListPods(ctx context.Context, ns string, opts metav1.ListOptions) (*corev1.PodList, error) {
	f.mu.Lock()
	f.lists++
	f.mu.Unlock()
	return f.API.ListPods(ctx, ns, opts)
}

// TestWatchResumes: expired and closed watches are resumed (from a fresh
// list after a 410) and the run still ends only at the pod's real end.
func TestWatchResumes(t *testing.T) {
	f := newFixture(t)
	f.node("node-a", "6.1.0-test", nil)
	f.kubelet(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
		// Slow enough that each broken watch happens while the pod is alive.
		step := func() { time.Sleep(700 * time.Millisecond) }
		step()
		k.bind(ctx, pod, "node-a")
		step()
		k.waiting(ctx, pod, "ContainerCreating", "")
		step()
		k.running(ctx, pod)
		step()
		k.exit(ctx, pod, 0, "Completed", message(t, probeResult(pod, "4.4.0")))
	})
	flaky := &flakyAPI{API: f.api}
	b := f.backend()
	b.API = flaky
	results, err := b.Run(context.Background(), specFor(t, gvisorPolicy))
	results = probeResults(results)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(results) != 1 || report.Count(results[0].Findings).Pass == 0 {
		t.Fatalf("results: %+v", results)
	}
	flaky.mu.Lock()
	defer flaky.mu.Unlock()
	if flaky.watches < 4 {
		t.Errorf("%d watches, want at least 4 (three broken, one that sees the end)", flaky.watches)
	}
	// The sweep lists once; each 410 makes the backend list the pod afresh.
	if flaky.lists < 3 {
		t.Errorf("%d lists, want a fresh list after each expired watch", flaky.lists)
	}
	if left := f.leftovers(); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestPerNode: one pod per node that can host sandboxes — labelled for
// the pool, not cordoned, every taint tolerated — each pinned to its node
// through the scheduler and reported as node/NAME with that node's kernel
// cross-check; a node whose pod fails is named in its own could-not-run
// while the others still report.
func TestPerNode(t *testing.T) {
	f := newFixture(t)
	pool := map[string]string{"pool": "sandbox"}
	f.node("pn-a", "6.1.0-a", pool)
	f.node("pn-b", "6.1.0-b", pool)
	f.node("pn-c", "6.1.0-c", map[string]string{"pool": "other"})
	f.node("pn-d", "6.1.0-d", pool, corev1.Taint{Key: "dedicated", Value: "sandbox", Effect: corev1.TaintEffectNoSchedule})
	f.node("pn-e", "6.1.0-e", pool, corev1.Taint{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule})
	f.node("pn-f", "6.1.0-f", pool, corev1.Taint{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule})
	// Pool nodes that cannot take a pod now: named, never skipped.
	f.node("pn-g", "6.1.0-g", pool, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	f.setNode("pn-g", func(n *corev1.Node) { n.Spec.Unschedulable = true }, nil)
	f.node("pn-h", "6.1.0-h", pool)
	f.setNode("pn-h", nil, func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."}}
	})
	var mu sync.Mutex
	pinned := map[string]string{}
	k := f.kubelet(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
		node := k.bind(ctx, pod, "nowhere")
		mu.Lock()
		pinned[node] = pod.Annotations[AnnotationTarget]
		mu.Unlock()
		k.waiting(ctx, pod, "ContainerCreating", "")
		if node == "pn-b" {
			k.waiting(ctx, pod, "ErrImageNeverPull", "not present")
			return
		}
		k.running(ctx, pod)
		kernel := "4.4.0"
		if node == "pn-d" {
			kernel = "6.1.0-d" // runc under a gVisor class: the node's own kernel
		}
		res := probeResult(pod, kernel)
		k.exit(ctx, pod, 0, "Completed", message(t, res))
	})
	_ = k
	b := f.backend()
	b.PerNode = true
	var lines []string
	var lmu sync.Mutex
	b.Progress = func(msg string) { lmu.Lock(); lines = append(lines, msg); lmu.Unlock() }
	results, err := b.Run(context.Background(), specFor(t, gvisorPolicy))
	results = probeResults(results)
	var targets []string
	for _, r := range results {
		targets = append(targets, r.Target)
	}
	if want := []string{Target(f.ns, "pn-a"), Target(f.ns, "pn-d"), Target(f.ns, "pn-f")}; !slices.Equal(targets, want) {
		t.Errorf("results for %v, want %v", targets, want)
	}
	var probs []string
	for _, p := range runner.Problems("kube", err) {
		probs = append(probs, p.Target+" "+p.Reason)
	}
	slices.Sort(probs)
	if want := []string{Target(f.ns, "pn-b") + " " + runner.ReasonImagePull, Target(f.ns, "pn-g") + " " + runner.ReasonNodeCordoned,
		Target(f.ns, "pn-h") + " " + runner.ReasonNodeNotReady}; !slices.Equal(probs, want) {
		t.Errorf("problems %q, want %q", probs, want)
	}
	mu.Lock()
	for node, target := range pinned {
		if target != Target(f.ns, node) {
			t.Errorf("pod for %s landed on %s", target, node)
		}
	}
	if len(pinned) != 4 {
		t.Errorf("pods on %v, want pn-a, pn-b, pn-d, pn-f", pinned)
	}
	mu.Unlock()
	checkOwnNodeKernel(t, f.ns, results)
	lmu.Lock()
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "4 probe pods:") }) {
		t.Errorf("no fan-out progress line in %q", lines)
	}
	lmu.Unlock()
	if left := f.leftovers(); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// checkOwnNodeKernel: each pod's host-kernel check compared the kernel it
// saw with its own node's; pn-d runs the node's own kernel and fails.
func checkOwnNodeKernel(t *testing.T, ns string, results []report.ProbeResult) {
	t.Helper()
	for _, r := range results {
		hk := r.Findings[slices.IndexFunc(r.Findings, func(f report.Finding) bool { return f.Subject == runner.HostKernelSubject })]
		want := report.Pass
		if r.Target == Target(ns, "pn-d") {
			want = report.Fail
		}
		if hk.Status != want || !strings.Contains(hk.Evidence, "6.1.0-"+strings.TrimPrefix(r.Target, Target(ns, "pn-"))) {
			t.Errorf("%s: host-kernel %s (%s), want %s against its own node's kernel", r.Target, hk.Status, hk.Evidence, want)
		}
	}
}

// TestSandboxNamespaces: without Namespace the probe stands in each of the
// policy's namespaces (with PerNode, once per namespace and node), each
// result named by its namespace and node; a policy without namespaces has
// nowhere to put the probe.
func TestSandboxNamespaces(t *testing.T) {
	a := newFixture(t)
	b := a.sibling("b")
	a.node("sn-1", "6.1.0-1", map[string]string{"pool": "sandbox"})
	a.node("sn-2", "6.1.0-2", map[string]string{"pool": "sandbox"})
	var mu sync.Mutex
	seen := map[string]string{} // pod namespace/name → its node
	script := func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
		node := k.bind(ctx, pod, "nowhere")
		mu.Lock()
		seen[pod.Namespace+"/"+node] = pod.Annotations[AnnotationTarget]
		mu.Unlock()
		k.running(ctx, pod)
		k.exit(ctx, pod, 0, "Completed", message(t, probeResult(pod, "4.4.0")))
	}
	a.kubelet(script)
	b.kubelet(script)
	be := a.backend()
	be.Namespace = ""
	be.PerNode = true
	spec := specFor(t, withNamespaces(gvisorPolicy, b.ns, a.ns))
	results, err := be.Run(context.Background(), spec)
	results = probeResults(results)
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, r := range results {
		targets = append(targets, r.Target)
		for _, f := range r.Findings {
			if !strings.HasPrefix(r.Target, "namespace/"+f.Namespace+"/") {
				t.Errorf("%s: finding %s in namespace %q", r.Target, f.Name(), f.Namespace)
			}
		}
	}
	want := []string{Target(a.ns, "sn-1"), Target(a.ns, "sn-2"), Target(b.ns, "sn-1"), Target(b.ns, "sn-2")}
	slices.Sort(want)
	if !slices.Equal(targets, want) {
		t.Errorf("results for %v, want %v", targets, want)
	}
	for where, target := range seen {
		ns, node, _ := strings.Cut(where, "/")
		if target != Target(ns, node) {
			t.Errorf("pod in %s on %s says it reports for %s", ns, node, target)
		}
	}
	for _, f := range []*fixture{a, b} {
		if left := f.leftovers(); len(left) > 0 {
			t.Errorf("left behind in %s: %v", f.ns, left)
		}
	}

	_, err = be.Run(context.Background(), specFor(t, gvisorPolicy))
	var cnr *runner.CouldNotRun
	if !errors.As(err, &cnr) || !strings.Contains(cnr.Detail, "spec.namespaces") {
		t.Errorf("a policy without namespaces: err = %v, want a could-not-run naming spec.namespaces", err)
	}
}

// TestPerNodeNoNode: a pool no node belongs to is a could-not-run that says
// why each candidate was refused.
func TestPerNodeNoNode(t *testing.T) {
	f := newFixture(t)
	b := f.backend()
	b.PerNode = true
	spec := specFor(t, strings.Replace(gvisorPolicy, "pool: sandbox", "pool: nobody-has-this", 1))
	_, err := b.Run(context.Background(), spec)
	var cnr *runner.CouldNotRun
	if !errors.As(err, &cnr) || cnr.Reason != runner.ReasonUnschedulable || !strings.Contains(cnr.Detail, "pool=nobody-has-this") {
		t.Fatalf("err = %v, want unschedulable naming the labels", err)
	}
	if left := f.leftovers(); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestSweep: probe pods of a killed runner are deleted once past their
// deadline plus SweepAfter, and not before (their runner may still be at
// work); pods another user's runner created, and other pods in the
// namespace, are never touched; and every Run sweeps first.
func TestSweep(t *testing.T) {
	f := newFixture(t)
	f.node("node-a", "6.1.0-test", nil)
	k := f.kubelet(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
		if pod.Labels[LabelRun] == "" {
			return // not a probe pod
		}
		if strings.Contains(pod.Name, "-killed") {
			k.bind(ctx, pod, "node-a")
			k.running(ctx, pod) // its runner is gone: it runs until swept
			return
		}
		runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
			k.exit(ctx, pod, 0, "Completed", message(t, probeResult(pod, "4.4.0")))
		})(ctx, k, pod)
	})
	_ = k
	ctx := context.Background()
	b := f.backend()
	spec := specFor(t, gvisorPolicy)
	me, err := f.api.WhoAmI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// What a killed runner leaves: running pods. And one that another
	// user's runner left, which is theirs to sweep.
	killed := &run{id: "killed0001", spec: spec, deadline: 20 * time.Second, createdBy: me}
	for _, node := range []string{"", "node-a"} {
		pod := b.probePod(killed, placement{ns: f.ns, node: node})
		pod.Name += "-killed"
		if _, err := f.cs.CoreV1().Pods(f.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	theirs := &run{id: "theirs0001", spec: spec, deadline: 20 * time.Second, createdBy: "someone-else"}
	pod := b.probePod(theirs, placement{ns: f.ns})
	pod.Name += "-theirs"
	if _, err := f.cs.CoreV1().Pods(f.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "not-a-probe", Labels: map[string]string{"sandbox": "true"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if _, err := f.cs.CoreV1().Pods(f.ns).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // let the kubelet start them

	// Young: their runner may be alive.
	if err := b.Sweep(ctx, f.ns, me); err != nil {
		t.Fatal(err)
	}
	if left := f.leftovers(); len(left) != 4 {
		t.Fatalf("a sweep within the deadline removed something: %v left", left)
	}
	// An hour later they are leftovers; a run sweeps them and then works.
	b.Now = func() time.Time { return time.Now().Add(time.Hour) }
	results, err := b.Run(ctx, spec)
	results = probeResults(results)
	if err != nil || len(results) != 1 {
		t.Fatalf("run after the sweep: %v %+v", err, results)
	}
	if left := f.leftovers(); !slices.Equal(left, []string{"pod/not-a-probe", "pod/" + pod.Name}) {
		t.Errorf("after the sweep: %v, want only pod/not-a-probe and %s", left, pod.Name)
	}
}

// TestCancelCleansUp: ctrl-C or SIGTERM while the probe runs ends the run
// at once with the interruption, and the pod and ConfigMap are still
// deleted (with a fresh context).
func TestCancelCleansUp(t *testing.T) {
	f := newFixture(t)
	f.node("node-a", "6.1.0-test", nil)
	running := make(chan struct{})
	f.kubelet(runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
		close(running)
	}))
	ctx, cancel := context.WithCancel(context.Background())
	b := f.backend()
	b.Progress = func(msg string) {
		if strings.Contains(msg, "running on") {
			cancel()
		}
	}
	start := time.Now()
	_, err := b.Run(ctx, specFor(t, gvisorPolicy))
	<-running
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the cancellation", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %s", took)
	}
	if left := f.leftovers(); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestUnreachable: a cluster that does not answer is one could-not-run
// naming the address, within seconds.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	api, err := NewAPI(&rest.Config{Host: "https://" + addr, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	b := &Backend{API: api, Namespace: RunnerNamespace}
	start := time.Now()
	_, err = b.Run(context.Background(), specFor(t, gvisorPolicy))
	var cnr *runner.CouldNotRun
	if !errors.As(err, &cnr) || cnr.Reason != runner.ReasonLaunch || !strings.Contains(cnr.Detail, addr) || strings.Contains(cnr.Detail, "\n") {
		t.Fatalf("err = %v, want one line of launch-failed naming %s", err, addr)
	}
	if cnr.Target != "namespace/sandprobe-system" {
		t.Errorf("target %s", cnr.Target)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %s", took)
	}
}

// TestPerNodeControl: with a probe pinned to each node, each node's denies
// are proven by a control on that node. The real-world break: one node of
// the pool has no egress of its own (a subnet without NAT, a node
// firewall); its probe's timeouts say nothing about the sandbox policy,
// and another node's control answering them must not make them proven
// denies. Healthy: both nodes' controls answer, both nodes' denies are
// proven.
func TestPerNodeControl(t *testing.T) {
	doc := strings.Replace(gvisorPolicy, "egress: {timeout: 1s}", "egress: {timeout: 1s, mustFail: {ips: [192.0.2.10]}}", 1)
	for _, c := range []struct {
		name    string
		cutNode string // the node whose own egress is cut ("" for none)
	}{{"healthy", ""}, {"one node without egress", "pc-b"}} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			pool := map[string]string{"pool": "sandbox"}
			f.node("pc-a", "6.1.0-a", pool)
			f.node("pc-b", "6.1.0-b", pool)
			spec := specFor(t, doc)
			plan, _ := probes.PlanEgress(spec.Policy.Spec.Egress)
			var mu sync.Mutex
			controls := map[string]int{}
			k := f.kubelet(runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				res := probeResult(pod, "4.4.0")
				for _, a := range plan {
					fd := report.Finding{Check: a.Check, Subject: a.Subject, Status: report.Pass, Class: "timeout", Evidence: "no answer in 1s"}
					if a.MustAnswer() {
						fd.Class = policy.VerdictAnswered
					}
					res.Findings = append(res.Findings, fd)
				}
				k.exit(ctx, pod, 0, "Completed", message(t, res))
			}))
			k.controlAt = func(node string, a probes.Attempt) string {
				mu.Lock()
				controls[node]++
				mu.Unlock()
				if node == c.cutNode {
					return "timeout"
				}
				return policy.VerdictAnswered
			}
			b := f.backend()
			b.PerNode = true
			results, err := b.Run(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			if controls["pc-a"] == 0 || controls["pc-b"] == 0 {
				t.Errorf("controls dialled from %v, want one on each of pc-a and pc-b", controls)
			}
			mu.Unlock()
			results = probeResults(results)
			if len(results) != 2 {
				t.Fatalf("%d probe results, want 2", len(results))
			}
			for _, r := range results {
				i := slices.IndexFunc(r.Findings, func(f report.Finding) bool { return f.Check == "egress.must-fail" && f.Subject == "192.0.2.10:443" })
				if i < 0 {
					t.Fatalf("%s: no must-fail verdict for 192.0.2.10:443", r.Target)
				}
				fd := r.Findings[i]
				cut := r.Target == Target(f.ns, c.cutNode)
				switch {
				case cut && (fd.Status != report.Inconclusive || fd.Deny == report.DenyProven):
					t.Errorf("%s, whose node has no egress: %s (deny %q, %s), want inconclusive: another node's control proves nothing here", r.Target, fd.Status, fd.Deny, fd.Actual)
				case !cut && (fd.Status != report.Pass || fd.Deny != report.DenyProven):
					t.Errorf("%s: %s (deny %q, %s), want a pass proven by its own node's control", r.Target, fd.Status, fd.Deny, fd.Actual)
				case !cut && !strings.Contains(fd.Evidence, "on node "+r.Where.Node):
					t.Errorf("%s: evidence %q does not name its own node's control", r.Target, fd.Evidence)
				}
			}
			if left := f.leftovers(); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}
