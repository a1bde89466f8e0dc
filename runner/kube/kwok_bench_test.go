package kube

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sourcegraph/conc/pool"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// TestBenchKwokFleetSimulated is the 1,000-node cycle of issue 15, on a
// SIMULATED fleet (kwok: real kube-apiserver, etcd and kube-scheduler,
// fake kubelets): one `sandprobe run --backend kube --per-node` over every
// node, as a child process. It prints, against a bare client-go fan-out of
// the same pods at the same cap measured in the same run:
//
//   - wall time, against the goal 2 × (pod start + one egress timeout + the
//     cap's queueing), where the queueing is (⌈nodes/cap⌉ − 1) waves of
//     (pod start + egress timeout): the least a runner that holds at most
//     cap pods at once can take;
//   - API requests per node, counted by the API server's audit log (the
//     runner authenticates as its own user): watch, not poll;
//   - the runner's peak RSS (rusage; goal ≤ 200 MB);
//   - pods left afterwards (must be 0).
//
// make bench runs it (SANDPROBE_BENCH=1); SANDPROBE_BENCH_NODES changes
// the fleet size.
func TestBenchKwokFleetSimulated(t *testing.T) {
	if os.Getenv("SANDPROBE_BENCH") != "1" {
		t.Skip("set SANDPROBE_BENCH=1 (make bench)")
	}
	nodes := 1000
	if v, err := strconv.Atoi(os.Getenv("SANDPROBE_BENCH_NODES")); err == nil && v > 0 {
		nodes = v
	}
	const start = time.Second // the simulated pod start-up
	f := newFleet(t, nodes, start, time.Second, "", nil)
	T := f.policy.Spec.Egress.Timeout.Duration // the simulated probe waits it out once
	capacity := AutoParallel(nodes)            // what the runner picks for this many pods (no --parallel)
	waves := (nodes + capacity - 1) / capacity
	ideal := time.Duration(waves) * (start + T)
	goal := 2 * ideal

	run := f.runMeasured(t)
	left := f.podsLeft(t)
	reqs := f.RunnerRequests(t)
	if run.code != report.ExitOK {
		t.Errorf("the simulated healthy fleet's run exited %d, want 0\n%s", run.code, tail(run.stderr, 2000))
	}
	// One probe result per node, each closed: one series per node, all 0.
	if open := gaugesByNode(run.metrics, report.MetricEgressUnexpectedOpen); len(open) != nodes || slices.ContainsFunc(slices.Collect(maps.Values(open)), func(v float64) bool { return v != 0 }) {
		t.Errorf("%s: %d node series (want %d, all 0): %v", report.MetricEgressUnexpectedOpen, len(open), nodes, open)
	}
	if len(left) > 0 {
		t.Errorf("%d pods left after the run, want 0: %v", len(left), left[:min(len(left), 5)])
	}

	bare := f.bareFanOut(t, nodes, capacity)

	perNode := float64(len(reqs)) / float64(nodes)
	fmt.Printf("kwok fleet (SIMULATED: %d fake nodes, real kube-apiserver + etcd + kube-scheduler; pod start %s, egress timeout %s, cap %d → %d waves)\n",
		nodes, start, T, capacity, waves)
	fmt.Printf("kwok fleet (simulated): sandprobe run --per-node: wall %.1fs (goal ≤ 2 × %.1fs = %.1fs: %s), bare client-go fan-out at the same cap %.1fs (×%.2f)\n",
		run.wall.Seconds(), ideal.Seconds(), goal.Seconds(), verdict(run.wall <= goal), bare.wall.Seconds(), run.wall.Seconds()/bare.wall.Seconds())
	fmt.Printf("kwok fleet (simulated): API requests %d = %.1f per node, two pods a node: the probe and its node's control (%s); bare %d = %.1f per node, one pod (create, watch, delete, list+watch until gone)\n",
		len(reqs), perNode, requestMix(reqs), bare.requests, float64(bare.requests)/float64(nodes))
	fmt.Printf("kwok fleet (simulated): runner peak RSS %.1f MB as the CronJob runs it (text report, metrics; goal ≤ 200 MB: %s); pods left %d (goal 0: %s)\n",
		float64(run.maxRSS)/1e6, verdict(run.maxRSS <= 200e6), len(left), verdict(len(left) == 0))
	if polls := pollsPerPod(reqs, 2*nodes); polls > 0 {
		fmt.Printf("kwok fleet (simulated): %.2f pod lists per pod beyond the sweep and the deletion check: the runner polls\n", polls)
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// runMeasured is run under drift's maxrss wrapper: Linux charges a
// vfork'ed child with its parent's RSS high-water mark, so measured from
// this (large) test process every child would look as big as the test.
func (f *fleet) runMeasured(t testing.TB) fleetRun {
	t.Helper()
	wrapper := filepath.Join(t.TempDir(), "maxrss")
	if out, err := exec.Command("go", "build", "-o", wrapper, "../../drift/testdata/maxrss").CombinedOutput(); err != nil {
		t.Fatalf("build maxrss: %v\n%s", err, out)
	}
	run := f.run(t, wrapper, false)
	m := regexp.MustCompile(`maxrss_kib=(\d+) seconds=([\d.]+)`).FindStringSubmatch(run.stderr)
	if m == nil {
		t.Fatalf("no measurement from maxrss in %q", tail(run.stderr, 500))
	}
	kib, _ := strconv.ParseInt(m[1], 10, 64)
	secs, _ := strconv.ParseFloat(m[2], 64)
	run.maxRSS, run.wall = kib*1024, time.Duration(secs*float64(time.Second))
	return run
}

// requestMix is the runner's requests by verb and resource, most first.
func requestMix(reqs []testenv.AuditEvent) string {
	counts := map[string]int{}
	for _, r := range reqs {
		res := cmp.Or(r.Resource, "(non-resource)")
		if r.Subresource != "" {
			res += "/" + r.Subresource
		}
		key := r.Verb + " " + res
		if r.Code == http.StatusForbidden {
			key += " (refused)"
		}
		counts[key]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(counts[b]-counts[a], strings.Compare(a, b)) })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}

// pollsPerPod is how many pod lists per pod the runner made beyond one
// per pod (the deletion check lists once before it watches) and the
// run's own handful: a runner that polls shows up here.
func pollsPerPod(reqs []testenv.AuditEvent, pods int) float64 {
	lists := 0
	for _, r := range reqs {
		if r.Verb == "list" && r.Resource == "pods" {
			lists++
		}
	}
	extra := lists - pods - 10
	if extra <= 0 {
		return 0
	}
	return float64(extra) / float64(pods)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// bareResult is the bare fan-out's figures.
type bareResult struct {
	wall     time.Duration
	requests int64
}

// bareFanOut is the least any per-node runner must do, at the same cap:
// for each node, create the probe pod pinned to it, watch it to its end,
// delete it and see it gone — no sweep, no node read, no result checks.
// Its requests are counted on its own transport.
func (f *fleet) bareFanOut(t testing.TB, nodes, capacity int) bareResult {
	t.Helper()
	var requests atomic.Int64
	cfg := rest.CopyConfig(f.Admin)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			requests.Add(1)
			return rt.RoundTrip(r)
		})
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	spec := runner.ProbeSpec{Policy: f.policy, Nonce: runner.NewNonce()}
	ns := f.policy.Spec.Namespaces[0]
	ctx := context.Background()
	begin := time.Now()
	p := pool.New().WithErrors().WithMaxGoroutines(capacity)
	for i := range nodes {
		node := testenv.KwokNodeName(i)
		p.Go(func() error { return bareOne(ctx, cs, spec, ns, node, i) })
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("bare fan-out: %v", err)
	}
	return bareResult{wall: time.Since(begin), requests: requests.Load()}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func bareOne(ctx context.Context, cs kubernetes.Interface, spec runner.ProbeSpec, ns, node string, i int) error {
	pod := render.ProbePod(spec.Policy, render.ProbePodOptions{Name: fmt.Sprintf("bare-%04d", i), Namespace: ns, Nonce: spec.Nonce,
		Labels: map[string]string{LabelRun: "bare", LabelNonce: spec.Nonce}})
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationNonce] = spec.Nonce
	pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}},
	}}
	sel := fields.OneTermEqualSelector("metadata.name", pod.Name).String()
	created, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	w, err := cs.CoreV1().Pods(ns).Watch(wctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: created.ResourceVersion})
	if err != nil {
		return err
	}
	ended := false
	for ev := range w.ResultChan() {
		if p, ok := ev.Object.(*corev1.Pod); ok && terminal(p) {
			ended = true
			break
		}
	}
	w.Stop()
	if !ended {
		return fmt.Errorf("the watch of %s ended before the pod did", pod.Name)
	}
	grace := int64(1)
	if err := cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		return err
	}
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return err
	}
	if len(list.Items) == 0 {
		return nil
	}
	w, err = cs.CoreV1().Pods(ns).Watch(wctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	gone, err := untilDeleted(wctx, w)
	if err == nil && !gone {
		err = fmt.Errorf("the watch of %s ended before it was gone", pod.Name)
	}
	return err
}
