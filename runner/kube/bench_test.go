package kube

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// BenchmarkKubeCycle measures what the runner adds to a probe on the real
// cluster, against the bare minimum measured in the same run.
//
//   - runner: Backend.Run of the lab policy under runc (who-am-I, sweep and
//     the parity survey, pod, watch, log, node, parity, delete and wait
//     until gone), with the control pod dialling every must-fail
//     destination beside it.
//     overhead = wall − pod start-up − T, where start-up runs from the
//     create call to the probe's own start (its StartedAt, same clock) and
//     T is the policy's egress timeout, which the probe waits out once.
//     Goal: ≤ 2 s.
//   - bare: client-go create → watch until terminal → delete → gone of the
//     same pod running `sandprobe probe --only identity` (no egress), with
//     the same start-up subtracted.
func BenchmarkKubeCycle(b *testing.B) {
	e := newClusterEnv(b)
	e.labCluster(b)
	// gVisor: under runc the probe dials before kube-router has programmed
	// its firewall (see TestClusterHealthy).
	//
	// Under runc, with the lab's own rules keeping the pods in (sandbox
	// mode), as the 1.66 s this goal was set against was measured: under
	// kube-router a runc probe dials inside kube-router's start-up window
	// (hack/cluster/README.md), and gVisor's slower exit would weigh on
	// both sides alike. The parity survey reads the policy API and the
	// control pod dials every must-fail destination from a namespace of its
	// own, as in every run; here the lab keeps the control in too, so its
	// denies come out unproven (inconclusive) — the timing is the same. make
	// e2e shows every deny proven, under kube-router.
	doc := labPolicy(b, "{classNames: [runc], isolation: {runc: none}}")
	controlNS := clusterNS + "-control"
	e.namespace(b, controlNS)
	p, raw := loadPolicy(b, doc)
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	api, err := NewAPI(cfg)
	if err != nil {
		b.Fatal(err)
	}
	policies, err := drift.NewKubeAPI(cfg)
	if err != nil {
		b.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	T := p.Spec.Egress.Timeout.Duration
	ctx := context.Background()

	var runWall, runStart, runProbe, bareWall, bareStart time.Duration
	// Where the runner's time goes besides start-up and the probe itself.
	var before, seen, collect, del, after time.Duration
	unproven := 0
	for i := 0; i < b.N; i++ {
		var times podTimes
		be := &Backend{API: api, Policies: policies, Namespace: clusterNS, ControlNamespace: controlNS, ProbeImage: labImageRef, PullPolicy: corev1.PullNever,
			observe: func(pt podTimes) {
				if pt.result.Vantage == "" {
					times = pt
				}
			}}
		spec := runner.ProbeSpec{Policy: p, PolicyBytes: raw, Nonce: runner.NewNonce()}
		start := time.Now()
		results, err := be.Run(ctx, spec)
		wall := time.Since(start)
		results = probeResults(results)
		for _, f := range results[0].Findings {
			if f.Deny == report.DenyUnproven {
				unproven++
			}
		}
		if err != nil || len(results) != 1 || report.Count(results[0].Findings).Fail > 0 || report.Count(results[0].Findings).Error > 0 {
			var bad []string
			for _, r := range results {
				for _, f := range r.Findings {
					if f.Status == report.Fail || f.Status == report.Inconclusive || f.Status == report.Error {
						bad = append(bad, fmt.Sprintf("%s %s: %s (%s)", f.Name(), f.Status, f.Actual, f.Evidence))
					}
				}
			}
			var counts []report.Counts
			for _, r := range results {
				counts = append(counts, report.Count(r.Findings))
			}
			b.Fatalf("run: %v, %d results %+v:\n%s", err, len(results), counts, strings.Join(bad, "\n"))
		}
		runWall += wall
		runStart += results[0].StartedAt.Sub(times.created)
		probe := time.Duration(results[0].Seconds * float64(time.Second))
		runProbe += probe
		before += times.created.Sub(start)
		seen += times.finished.Sub(results[0].StartedAt.Add(probe))
		collect += times.collected.Sub(times.finished)
		del += times.deleted.Sub(times.collected)
		after += start.Add(wall).Sub(times.deleted)

		w, s := bareCycle(b, ctx, cs, spec)
		bareWall += w
		bareStart += s
	}
	n := time.Duration(b.N)
	runWall, runStart, runProbe, bareWall, bareStart = runWall/n, runStart/n, runProbe/n, bareWall/n, bareStart/n
	overhead := runWall - runStart - T
	bareOverhead := bareWall - bareStart
	b.ReportMetric(runWall.Seconds(), "run-s")
	b.ReportMetric(runStart.Seconds(), "startup-s")
	b.ReportMetric(runProbe.Seconds(), "probe-s")
	b.ReportMetric(overhead.Seconds(), "overhead-s")
	b.ReportMetric(bareWall.Seconds(), "bare-s")
	b.ReportMetric(bareOverhead.Seconds(), "bare-overhead-s")
	fmt.Printf("kube cycle: %d runs with the parity survey and the control pod; %d denies unproven per run (the lab keeps the control in too, see above)\n", b.N, unproven/b.N)
	fmt.Printf("kube cycle: runner's own steps: who-am-I+sweep+parity survey+create %.2fs, probe exit→terminal seen %.2fs, collect (log, node) %.2fs, delete until gone %.2fs, after %.2fs\n",
		(before / n).Seconds(), (seen / n).Seconds(), (collect / n).Seconds(), (del / n).Seconds(), (after / n).Seconds())
	fmt.Printf("kube cycle: runner %.2fs = start-up %.2fs + probe %.2fs (T=%s) + rest; overhead beyond start-up+T %.2fs (goal ≤ 2s); bare client-go %.2fs, of which start-up %.2fs, rest %.2fs\n",
		runWall.Seconds(), runStart.Seconds(), runProbe.Seconds(), T, overhead.Seconds(), bareWall.Seconds(), bareStart.Seconds(), bareOverhead.Seconds())
}

// bareCycle is the least any runner must do: create the pod, watch it to
// its end, delete it and see it gone. It returns the wall time and the
// start-up (create to the probe's StartedAt, read from its termination
// message).
func bareCycle(b *testing.B, ctx context.Context, cs kubernetes.Interface, spec runner.ProbeSpec) (time.Duration, time.Duration) {
	b.Helper()
	pol := spec.Policy
	pod := render.ProbePod(pol, render.ProbePodOptions{Name: "sandprobe-bench-bare", Namespace: clusterNS, ProbeImage: labImageRef,
		PolicyInline: spec.PolicyBytes, Nonce: spec.Nonce, ProbeArgs: []string{"--only", "identity"}})
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].ImagePullPolicy = corev1.PullNever
	}
	sel := fields.OneTermEqualSelector("metadata.name", pod.Name).String()

	start := time.Now()
	created, err := cs.CoreV1().Pods(clusterNS).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	w, err := cs.CoreV1().Pods(clusterNS).Watch(wctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: created.ResourceVersion})
	if err != nil {
		b.Fatal(err)
	}
	var final *corev1.Pod
	for ev := range w.ResultChan() {
		if p, ok := ev.Object.(*corev1.Pod); ok && terminal(p) {
			final = p
			break
		}
	}
	w.Stop()
	if final == nil {
		b.Fatal("the bare pod's watch ended before the pod did")
	}
	grace := int64(1)
	if err := cs.CoreV1().Pods(clusterNS).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		b.Fatal(err)
	}
	for {
		list, err := cs.CoreV1().Pods(clusterNS).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			b.Fatal(err)
		}
		if len(list.Items) == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	wall := time.Since(start)
	st := containerStatus(final.Status.ContainerStatuses, render.ProbeContainer)
	if st == nil || st.State.Terminated == nil {
		b.Fatalf("bare pod ended without its container: %+v", final.Status)
	}
	doc, _, err := report.DecodeTerminationMessage(st.State.Terminated.Message)
	if err != nil {
		b.Fatalf("bare pod's result: %v", err)
	}
	res, err := runner.ParseResult("bare", doc, spec.Nonce)
	if err != nil {
		b.Fatalf("bare pod's result: %v", err)
	}
	return wall, res.StartedAt.Sub(start)
}
