package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sourcegraph/conc"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// The fast layer: a real kube-apiserver with etcd (envtest) and no kubelet,
// scheduler or controllers. The tests play the scheduler and the kubelet by
// binding pods and writing their status, step by step, so every way a pod
// can end is reproduced exactly as the API server stores it.

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopAPIServer()
	os.Exit(code)
}

// fixture is one test's namespace on the shared API server.
type fixture struct {
	t        *testing.T
	cfg      *rest.Config
	cs       kubernetes.Interface
	api      API
	policies drift.KubeAPI
	ns       string
}

var runtimeClassesOnce sync.Once

func newFixture(t *testing.T) *fixture {
	t.Helper()
	cfg := testenv.APIServer(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	api, err := NewAPI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := "t-" + nonLabel(strings.ToLower(t.Name()))
	for strings.Contains(ns, "--") {
		ns = strings.ReplaceAll(ns, "--", "-")
	}
	if len(ns) > 60 {
		ns = ns[:60]
	}
	ns = strings.TrimRight(ns, "-")
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"sandprobe-test": "true"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller-manager: the ServiceAccount admission plugin wants the
	// default ServiceAccount to exist.
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// RuntimeClass admission refuses a pod whose class does not exist.
	runtimeClassesOnce.Do(func() {
		for name, handler := range map[string]string{"gvisor": "runsc", "runc": "runc", "kata": "kata"} {
			rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: handler}
			if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
	})
	pol, err := drift.NewKubeAPI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, cfg: cfg, cs: cs, api: api, policies: pol, ns: ns}
}

// probeResults leaves out the control vantage's summary.
func probeResults(rs []report.ProbeResult) []report.ProbeResult {
	var out []report.ProbeResult
	for _, r := range rs {
		if r.Vantage == "" {
			out = append(out, r)
		}
	}
	return out
}

// sibling is another namespace of the same test on the same API server.
func (f *fixture) sibling(suffix string) *fixture {
	f.t.Helper()
	ns := strings.TrimRight(f.ns[:min(len(f.ns), 50)], "-") + "-" + suffix
	ctx := context.Background()
	if _, err := f.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"sandprobe-test": "true"}}}, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		f.t.Fatal(err)
	}
	return &fixture{t: f.t, cfg: f.cfg, cs: f.cs, api: f.api, policies: f.policies, ns: ns}
}

// withNamespaces is a policy document declaring its sandbox namespaces.
func withNamespaces(doc string, namespaces ...string) string {
	return strings.Replace(doc, "  runtime:", "  namespaces: ["+strings.Join(namespaces, ", ")+"]\n  runtime:", 1)
}

// backend is a Backend on the fixture's namespace with short graces.
func (f *fixture) backend() *Backend {
	return &Backend{API: f.api, Policies: f.policies, Namespace: f.ns, ControlNamespace: f.ns, ProbeImage: "sandprobe.local/sandprobe:test", PullPolicy: corev1.PullNever,
		UnschedulableGrace: time.Second, Logger: testLogger(f.t)}
}

// node creates a node with labels, taints and a kernel release.
func (f *fixture) node(name, kernel string, labels map[string]string, taints ...corev1.Taint) {
	f.t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
	created, err := f.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { f.cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	// The API server taints a new node not-ready; the node lifecycle
	// controller (absent here) lifts it once the kubelet reports Ready.
	created.Spec.Taints = slices.DeleteFunc(created.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
	if created, err = f.cs.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	created.Status.NodeInfo.KernelVersion = kernel
	created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := f.cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// setNode changes a node's spec (spec) and then its status (status).
func (f *fixture) setNode(name string, spec, status func(*corev1.Node)) {
	f.t.Helper()
	ctx := context.Background()
	n, err := f.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	if spec != nil {
		spec(n)
		if n, err = f.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			f.t.Fatal(err)
		}
	}
	if status != nil {
		status(n)
		if _, err = f.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			f.t.Fatal(err)
		}
	}
}

// leftovers lists what the runner left in the namespace.
func (f *fixture) leftovers() []string {
	f.t.Helper()
	var out []string
	pods, err := f.cs.CoreV1().Pods(f.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, p := range pods.Items {
		out = append(out, "pod/"+p.Name)
	}
	cms, err := f.cs.CoreV1().ConfigMaps(f.ns).List(context.Background(), metav1.ListOptions{LabelSelector: render.LabelManagedBy + "=sandprobe"})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, c := range cms.Items {
		out = append(out, "configmap/"+c.Name)
	}
	return out
}

// script is what the pretend kubelet does with one new pod.
type script func(ctx context.Context, k *kubelet, pod *corev1.Pod)

// kubelet plays the scheduler and the kubelet for one namespace: every new
// pod runs the script, and a pod being deleted is confirmed gone, as a
// kubelet does once its containers are stopped.
type kubelet struct {
	t      *testing.T
	cs     kubernetes.Interface
	ns     string
	script script
	wg     conc.WaitGroup
	mu     sync.Mutex
	seen   map[string]bool
	bound  map[string]string // pod → node
	// control answers the run's control pod: what each destination of its
	// plan did; nil answers every one (a live listener behind each deny).
	control func(probes.Attempt) string
	// controlAt, when set, answers for a control pod by the node it was
	// bound to (a node whose own egress is cut answers nothing).
	controlAt func(node string, a probes.Attempt) string
	// crashControl makes the control pod exit 42 instead.
	crashControl bool
	controlPod   *corev1.Pod // the last control pod seen
}

func (f *fixture) kubelet(s script) *kubelet {
	k := &kubelet{t: f.t, cs: f.cs, ns: f.ns, script: s, seen: map[string]bool{}, bound: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := f.cs.CoreV1().Pods(f.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	k.wg.Go(func() { k.loop(ctx, w) })
	f.t.Cleanup(func() {
		cancel()
		w.Stop()
		k.wg.Wait()
	})
	return k
}

func (k *kubelet) loop(ctx context.Context, w watch.Interface) {
	for ev := range w.ResultChan() {
		pod, ok := ev.Object.(*corev1.Pod)
		if !ok {
			continue
		}
		if pod.DeletionTimestamp != nil && ev.Type != watch.Deleted {
			// The containers are stopped: let the pod go.
			zero := int64(0)
			k.cs.CoreV1().Pods(k.ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			continue
		}
		k.mu.Lock()
		isNew := ev.Type == watch.Added && !k.seen[pod.Name]
		k.seen[pod.Name] = true
		k.mu.Unlock()
		if isNew && pod.Labels[render.LabelName] == "sandprobe-control" {
			k.wg.Go(func() { k.answerControl(ctx, pod) })
			continue
		}
		if isNew && k.script != nil {
			k.wg.Go(func() { k.script(ctx, k, pod) })
		}
	}
}

// answerControl runs the control pod to its end with what a control would
// see: the plan of the policy it carries, each destination answering (or
// whatever k.control says).
func (k *kubelet) answerControl(ctx context.Context, pod *corev1.Pod) {
	k.mu.Lock()
	k.controlPod = pod
	k.mu.Unlock()
	if k.crashControl {
		k.bind(ctx, pod, "node-a")
		k.exit(ctx, pod, 42, "Error", "")
		return
	}
	p, err := policy.Load([]byte(pod.Annotations[render.AnnotationPolicy]))
	if err != nil {
		k.t.Errorf("control pod %s: its policy annotation: %v", pod.Name, err)
		return
	}
	res := report.ProbeResult{Schema: report.ProbeResultSchema, Nonce: pod.Labels[LabelNonce], Policy: p.Metadata.Name,
		StartedAt: time.Now().UTC(), Vantage: probes.VantageControl}
	node := k.bind(ctx, pod, "node-a")
	for _, a := range probes.ControlPlan(p.Spec.Egress) {
		class := policy.VerdictAnswered
		switch {
		case k.controlAt != nil:
			class = k.controlAt(node, a)
		case k.control != nil:
			class = k.control(a)
		}
		res.Findings = append(res.Findings, report.Finding{Check: a.Check, Subject: a.Subject, Status: report.Pass, Class: class, Evidence: "the test's control: " + class})
	}
	k.running(ctx, pod)
	declareRoles(&res)
	msg, err := res.TerminationMessage(report.TerminationMsgSize)
	if err != nil {
		k.t.Error(err)
	}
	k.exit(ctx, pod, 0, "Completed", string(msg))
}

// bind schedules the pod: to the node its affinity names, else to node.
func (k *kubelet) bind(ctx context.Context, pod *corev1.Pod, node string) string {
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		node = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0]
	}
	err := k.cs.CoreV1().Pods(k.ns).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}, metav1.CreateOptions{})
	// A pod deleted before it is bound (a run cut short) is not bound, as
	// with a real scheduler.
	if err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) && !strings.Contains(err.Error(), "is being deleted") {
		k.t.Errorf("bind %s to %s: %v", pod.Name, node, err)
	}
	k.mu.Lock()
	k.bound[pod.Name] = node
	k.mu.Unlock()
	k.status(ctx, pod, func(s *corev1.PodStatus) {
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	})
	return node
}

// status rewrites the pod's status; a pod already gone is no error.
func (k *kubelet) status(ctx context.Context, pod *corev1.Pod, mutate func(*corev1.PodStatus)) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := k.cs.CoreV1().Pods(k.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(&cur.Status)
		_, err = k.cs.CoreV1().Pods(k.ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		k.t.Errorf("update status of %s: %v", pod.Name, err)
	}
}

// waiting shows the probe container waiting for a reason (ContainerCreating,
// ErrImageNeverPull …).
func (k *kubelet) waiting(ctx context.Context, pod *corev1.Pod, reason, msg string) {
	k.status(ctx, pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: render.ProbeContainer, Image: pod.Spec.Containers[0].Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}
	})
}

func (k *kubelet) running(ctx context.Context, pod *corev1.Pod) {
	k.status(ctx, pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		now := metav1.Now()
		s.StartTime = &now
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: render.ProbeContainer, Image: pod.Spec.Containers[0].Image, Started: ptr(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	})
}

// exit ends the probe container with a code, a reason and a termination
// message; the phase follows the code as the kubelet sets it.
func (k *kubelet) exit(ctx context.Context, pod *corev1.Pod, code int32, reason, message string) {
	k.status(ctx, pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodSucceeded
		if code != 0 {
			s.Phase = corev1.PodFailed
		}
		now := metav1.Now()
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: render.ProbeContainer, Image: pod.Spec.Containers[0].Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: message, StartedAt: now, FinishedAt: now}}}}
	})
}

// runThen is the ordinary life of a probe pod up to its exit.
func runThen(end func(ctx context.Context, k *kubelet, pod *corev1.Pod)) script {
	return func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
		k.bind(ctx, pod, "node-a")
		k.waiting(ctx, pod, "ContainerCreating", "")
		k.running(ctx, pod)
		end(ctx, k, pod)
	}
}

// probeResult is what a probe with the pod's nonce reports: passes only,
// from a kernel of its own.
func probeResult(pod *corev1.Pod, kernel string, statuses ...report.Status) report.ProbeResult {
	res := report.ProbeResult{
		Schema: report.ProbeResultSchema, Nonce: pod.Labels[LabelNonce], Policy: pod.Labels[render.LabelPolicy],
		StartedAt: time.Now().UTC(), Seconds: 0.2,
		Runtime: &report.RuntimeEvidence{Kernel: kernel, Kind: "gvisor"},
	}
	if len(statuses) == 0 {
		statuses = []report.Status{report.Pass, report.Pass}
	}
	for i, s := range statuses {
		res.Findings = append(res.Findings, report.Finding{Check: fmt.Sprintf("identity.uid-%d", i), Status: s, Expected: "65532", Actual: "65532"})
	}
	return res
}

// message is the termination message the probe writes: the compact form.
func message(t *testing.T, res report.ProbeResult) string {
	declareRoles(&res)
	b, err := res.CompactJSON(report.TerminationMsgSize)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func loadPolicy(t testing.TB, doc string) (*policy.Policy, []byte) {
	t.Helper()
	p, err := policy.Load([]byte(doc))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	return p, []byte(doc)
}

// gvisorPolicy declares gVisor sandboxes on the pool=sandbox nodes.
const gvisorPolicy = `apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: envtest}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  runtime: {classNames: [gvisor]}
  identity: {uid: 65532, gid: 65532}
  filesystem: {readOnlyRoot: true, writable: [/tmp]}
  capabilities: []
  serviceAccountToken: absent
  resources: {limits: {memory: 256Mi}}
  placement:
    nodeSelector: {pool: sandbox}
    tolerations: [{key: dedicated, operator: Equal, value: sandbox, effect: NoSchedule}]
  egress: {timeout: 1s}
  probe: {deadline: 20s}
`

func specFor(t *testing.T, doc string) runner.ProbeSpec {
	p, raw := loadPolicy(t, doc)
	return runner.ProbeSpec{Policy: p, PolicyBytes: raw, Nonce: runner.NewNonce()}
}

func ptr[T any](v T) *T { return &v }

// jsonOf is the full (log) form of a result.
func jsonOf(t *testing.T, res report.ProbeResult) string {
	declareRoles(&res)
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// declareRoles does what the probe does before it prints its result: each
// finding carries its check's role (the catalogue row's), and the result
// declares them.
func declareRoles(res *report.ProbeResult) {
	for i := range res.Findings {
		if res.Findings[i].Role == "" {
			res.Findings[i].Role = probes.RoleOf(res.Findings[i].Check)
		}
	}
	res.DeclareRoles()
}
