package trigger_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sourcegraph/conc"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/kube"
	"github.com/sandprobe/sandprobe/runner/kube/trigger"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopAPIServer()
	os.Exit(code)
}

// Short enough for a test, long enough that a burst of API calls is one
// cycle on a loaded machine.
const (
	testDebounce    = 300 * time.Millisecond
	testMinInterval = time.Second
)

// rig is a real Watcher on a real API server, feeding a real Scheduler's
// Watch whose cycles the test records.
type rig struct {
	t      *testing.T
	cs     kubernetes.Interface
	mu     sync.Mutex
	cycles []runner.Scope
	starts []time.Time
	events map[string]int
	logs   *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs a Watcher (through watchCfg, which may differ from the test's
// own cfg) and a Scheduler until the test ends.
func start(t *testing.T, cfg, watchCfg *rest.Config, namespaces []string, agents []trigger.Agent, grace time.Duration) *rig {
	t.Helper()
	return startWith(t, cfg, watchCfg, namespaces, agents, grace, testDebounce, testMinInterval)
}

func startWith(t *testing.T, cfg, watchCfg *rest.Config, namespaces []string, agents []trigger.Agent, grace, debounce, minInterval time.Duration) *rig {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, cs: cs, events: map[string]int{}, logs: &syncBuffer{}}
	w := &runner.Watch{Debounce: debounce, MinInterval: minInterval, Cycle: func(_ context.Context, s runner.Scope) report.Run {
		r.mu.Lock()
		r.cycles = append(r.cycles, s)
		r.starts = append(r.starts, time.Now())
		r.mu.Unlock()
		return report.Run{}
	}}
	logger := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sched := &runner.Scheduler{Watch: w, Grace: time.Second, Cycle: func(context.Context) report.Run { return report.Run{} }, Logger: logger}
	api, err := kube.NewAPI(watchCfg)
	if err != nil {
		t.Fatal(err)
	}
	dapi, err := drift.NewKubeAPI(watchCfg)
	if err != nil {
		t.Fatal(err)
	}
	md, err := metadata.NewForConfig(watchCfg)
	if err != nil {
		t.Fatal(err)
	}
	tw := &trigger.Watcher{Metadata: md, Pods: api, DaemonSets: dapi, Namespaces: namespaces, Agents: agents, AgentGrace: grace, Logger: logger,
		Request: func(s runner.Scope, why string) { w.Request(s, why, time.Now()) },
		Event: func(kind string) {
			r.mu.Lock()
			r.events[kind]++
			r.mu.Unlock()
		}}
	ctx, cancel := context.WithCancel(context.Background())
	running, err := tw.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	schedule, _ := runner.ParseSchedule("@every 1000h")
	var wg conc.WaitGroup
	wg.Go(func() { sched.Run(ctx, schedule, false) })
	t.Cleanup(func() {
		cancel()
		running.Stop()
		wg.Wait()
		if t.Failed() {
			t.Logf("watch log:\n%s", r.logs.String())
		}
	})
	return r
}

func (r *rig) seen() []runner.Scope {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runner.Scope(nil), r.cycles...)
}

// expect waits for exactly the cycles want (by String) to have started
// after the cycles already seen, and for no other within the rate cap.
func (r *rig) expect(what string, want ...string) {
	r.t.Helper()
	before := len(r.seen())
	// Long enough for a watch that lost its connection to come back: the
	// reflector retries with a backoff that doubles up to 30 s.
	deadline := time.Now().Add(60 * time.Second)
	for len(r.seen()) < before+len(want) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(testDebounce + testMinInterval + 200*time.Millisecond)
	got := r.seen()[before:]
	var s []string
	for _, g := range got {
		s = append(s, g.String())
	}
	if strings.Join(s, " | ") != strings.Join(want, " | ") {
		r.t.Errorf("%s: cycles %q, want %q", what, s, want)
	}
}

func namespace(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func netpol(ns, name string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}
}

// TestNetworkPolicyChanges: on a real API server, each create, spec patch
// and delete of a NetworkPolicy in a sandbox namespace is exactly one cycle
// for exactly that namespace; one that exists before the watch starts, a
// label-only patch and one in another namespace start none; a sandbox
// namespace relabelled is a cycle for it.
func TestNetworkPolicyChanges(t *testing.T) {
	cfg := testenv.APIServer(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []string{"np-a", "np-b", "np-other"} {
		namespace(t, cs, ns)
	}
	nps := cs.NetworkingV1().NetworkPolicies("np-a")
	if _, err := nps.Create(ctx, netpol("np-a", "before-the-watch"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := start(t, cfg, cfg, []string{"np-a", "np-b"}, []trigger.Agent{}, 0)
	r.expect("the initial list")

	created := time.Now()
	if _, err := nps.Create(ctx, netpol("np-a", "allow-all"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.expect("create in np-a", "namespaces=np-a")
	r.mu.Lock()
	t.Logf("create → targeted cycle started: %s (of which the debounce: %s)", r.starts[len(r.starts)-1].Sub(created), testDebounce)
	r.mu.Unlock()

	patch := func(name, body string) {
		t.Helper()
		if _, err := nps.Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patch("allow-all", `{"spec":{"egress":[{"to":[{"ipBlock":{"cidr":"0.0.0.0/0"}}]}]}}`)
	r.expect("a widened rule in np-a", "namespaces=np-a")
	patch("allow-all", `{"metadata":{"labels":{"team":"x"}}}`)
	r.expect("a label-only patch (the generation does not move)")

	if err := nps.Delete(ctx, "allow-all", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.expect("delete in np-a", "namespaces=np-a")

	if _, err := cs.NetworkingV1().NetworkPolicies("np-other").Create(ctx, netpol("np-other", "x"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.expect("a namespace without sandboxes")

	// A sandbox namespace relabelled (an admin policy selecting it by
	// label may no longer); another namespace relabelled: nothing.
	for _, ns := range []string{"np-b", "np-other"} {
		if _, err := cs.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"untrusted"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r.expect("namespaces relabelled", "namespaces=np-b")

	r.mu.Lock()
	defer r.mu.Unlock()
	// create, patch, delete, the other namespace's; not the initial list
	// nor the label-only patch.
	if n := r.events["networkpolicy"]; n != 4 {
		t.Errorf("sandprobe_watch_events_total{kind=networkpolicy} would be %d, want 4", n)
	}
}

// TestNetworkPolicyStorm: 50 NetworkPolicies created one after the other in
// two sandbox namespaces, under serve's default debounce (2 s) and rate
// cap (10 s), whatever the API server's pace: one cycle, and at most one
// follow-up, over the union.
func TestNetworkPolicyStorm(t *testing.T) {
	cfg := testenv.APIServer(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []string{"storm-a", "storm-b"} {
		namespace(t, cs, ns)
	}
	r := startWith(t, cfg, cfg, []string{"storm-a", "storm-b"}, []trigger.Agent{}, 0, runner.DefaultDebounce, runner.DefaultMinInterval)
	start := time.Now()
	for i := range 50 {
		ns := []string{"storm-a", "storm-b"}[i%2]
		if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, netpol(ns, fmt.Sprintf("storm-%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("50 creates took %s", time.Since(start))
	// The first cycle starts within max(debounce, min-interval) of the
	// first change; a follow-up, if any, a rate cap after it.
	time.Sleep(2*runner.DefaultMinInterval + runner.DefaultDebounce)
	storm := r.seen()
	union := runner.Scope{}
	for _, s := range storm {
		union.Add(s)
	}
	if len(storm) < 1 || len(storm) > 2 || union.String() != "namespaces=storm-a,storm-b" {
		t.Errorf("a storm of 50 changes: cycles %v, want one (and at most one follow-up) over storm-a and storm-b", storm)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.events["networkpolicy"]; n != 50 {
		t.Errorf("sandprobe_watch_events_total{kind=networkpolicy} would be %d, want 50", n)
	}
}
