// Package kube runs the probe as a pod exactly where sandboxes run: the pod
// comes from render.ProbePod (the sandbox's runtime class, labels, security
// context, limits, node pool), one per sandbox node when asked to, and the
// backend waits with a watch for a real end state, reads the verdict from the
// log or the termination message, cross-checks the node's kernel and deletes
// the pod, whatever happened. It fails closed: a pod that was refused, could
// not be scheduled, pulled or started, crashed, ran out of memory or time, or
// reported garbage or someone else's nonce is a could-not-run with a named
// reason, never a pass. Each run starts by sweeping probe pods that a killed
// runner left behind.
package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/sourcegraph/conc/pool"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// DefaultNamespace is where the runner creates probe pods.
const DefaultNamespace = "sandprobe-system"

// Labels and annotations the backend puts on what it creates (besides
// render's), so a leftover can be found and judged without its runner.
const (
	// LabelRun is the run's id, on every probe pod and policy ConfigMap.
	LabelRun = "sandprobe.dev/run"
	// LabelNonce (and AnnotationNonce) carry the nonce the probe must echo.
	LabelNonce      = "sandprobe.dev/nonce"
	AnnotationNonce = "sandprobe.dev/nonce"
	// AnnotationDeadline is the run's deadline ("2m0s"): past creation plus
	// this (plus SweepAfter) the object is a leftover.
	AnnotationDeadline = "sandprobe.dev/deadline"
	// AnnotationTarget is the target the pod reports for ("node/worker-3").
	AnnotationTarget = "sandprobe.dev/target"
)

// Defaults of the Backend's knobs.
const (
	DefaultUnschedulableGrace = 30 * time.Second
	DefaultSweepAfter         = time.Minute
	DefaultParallel           = 16
	// collectTimeout bounds reading the result once the pod has ended; it
	// runs on a fresh context, so a deadline that passed as the probe exited
	// still leaves time to read what it wrote.
	collectTimeout = 30 * time.Second
	// deleteTimeout bounds deleting one pod and waiting until it is gone.
	deleteTimeout = 60 * time.Second
	maxStdout     = 4 << 20
	maxLog        = maxStdout + 64<<10
)

// Backend runs the probe in pods of one namespace.
type Backend struct {
	API API
	// Namespace holds the probe pods and the per-run policy ConfigMap;
	// "" is DefaultNamespace.
	Namespace string
	// ProbeImage holds the static sandprobe at /sandprobe; "" is
	// spec.probe.image, then render's default.
	ProbeImage string
	// PullPolicy, when set, replaces the pull policy of every container
	// (Never for a cluster that must not reach a registry).
	PullPolicy corev1.PullPolicy
	// RuntimeClass picks which of spec.runtime.classNames the probe pod
	// runs under; "" is the first.
	RuntimeClass string
	// PerNode runs one pod on each node that can host sandboxes (it matches
	// spec.placement.nodeSelector and every taint is tolerated), in
	// parallel, at most Parallel at a time (0 is DefaultParallel).
	PerNode  bool
	Parallel int
	// UnschedulableGrace is how long a pod may stay unschedulable, or fail
	// to create its container, before the run fails closed (0 is the default).
	UnschedulableGrace time.Duration
	// SweepAfter is how long past its deadline a probe pod or ConfigMap
	// must be before the sweep deletes it: its runner may still be
	// collecting and cleaning up until then (0 is the default).
	SweepAfter time.Duration
	// Command replaces the probe container's command and arguments (tests
	// use it for probes that crash, hang or lie).
	Command []string
	// Progress, when set, hears what the backend is waiting for; "" means
	// it is done waiting.
	Progress func(msg string)
	Logger   *slog.Logger
	// Now is the clock the sweep judges ages by; nil is time.Now.
	Now func() time.Time

	// observe, when set (benchmarks), hears the timings of each pod.
	observe func(podTimes)
}

// podTimes is when one probe pod went through its stages, for benchmarks.
type podTimes struct {
	created, finished, collected, deleted time.Time
	// containerStarted is the kubelet's startedAt (second precision).
	containerStarted time.Time
	result           report.ProbeResult
}

// Target names the namespace in findings about the run as a whole.
func (b *Backend) Target() string { return "namespace/" + b.namespace() }

func (b *Backend) namespace() string { return cmp.Or(b.Namespace, DefaultNamespace) }

func (b *Backend) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

func (b *Backend) log() *slog.Logger {
	if b.Logger != nil {
		return b.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (b *Backend) progress(msg string) {
	if b.Progress != nil {
		b.Progress(msg)
	}
}

// run is what all pods of one Run share.
type run struct {
	id        string
	spec      runner.ProbeSpec
	deadline  time.Duration
	configMap string
	track     *tracker
}

// Run sweeps leftovers, creates the policy ConfigMap and one probe pod (or
// one per sandbox node), waits for each to end, collects the results and
// deletes everything it created.
func (b *Backend) Run(ctx context.Context, spec runner.ProbeSpec) ([]report.ProbeResult, error) {
	defer b.progress("")
	deadline := spec.Deadline
	if deadline <= 0 {
		deadline = spec.Policy.Spec.Probe.Deadline.Duration
	}
	if deadline <= 0 {
		deadline = 2 * time.Minute
	}
	if err := b.checkRuntimeClass(spec); err != nil {
		return nil, err
	}
	b.progress("sweeping leftover probe pods")
	if err := b.Sweep(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sweep: %w", ctx.Err())
		}
		return nil, &runner.CouldNotRun{Target: b.Target(), Reason: runner.ReasonLaunch, Detail: oneLine(err)}
	}
	nodes := []string{""}
	if b.PerNode {
		var err error
		if nodes, err = b.sandboxNodes(ctx, spec); err != nil {
			return nil, err
		}
	}
	r := &run{id: runner.NewNonce()[:10], spec: spec, deadline: deadline}
	r.track = newTracker(b.progress, b.now)
	cm, err := b.createConfigMap(ctx, r)
	if err != nil {
		return nil, err
	}
	r.configMap = cm
	// The ConfigMap goes even when ctx is cancelled (ctrl-C, SIGTERM).
	defer b.deleteConfigMap(context.WithoutCancel(ctx), cm)

	type outcome struct {
		res report.ProbeResult
		err error
	}
	p := pool.NewWithResults[outcome]().WithMaxGoroutines(cmp.Or(b.Parallel, DefaultParallel))
	for _, node := range nodes {
		p.Go(func() outcome {
			res, err := b.probeOne(ctx, r, node)
			return outcome{res, err}
		})
	}
	var (
		results []report.ProbeResult
		errs    []error
	)
	for _, o := range p.Wait() {
		if o.err != nil {
			errs = append(errs, o.err)
			continue
		}
		results = append(results, o.res)
	}
	slices.SortFunc(results, func(a, b report.ProbeResult) int { return cmp.Compare(a.Target, b.Target) })
	return results, errors.Join(errs...)
}

// checkRuntimeClass refuses a --runtime-class the policy does not declare:
// the probe would prove nothing about the sandboxes.
func (b *Backend) checkRuntimeClass(spec runner.ProbeSpec) error {
	classes := spec.Policy.Spec.Runtime.ClassNames
	if b.RuntimeClass == "" || slices.Contains(classes, b.RuntimeClass) {
		return nil
	}
	return &runner.CouldNotRun{Target: b.Target(), Reason: runner.ReasonLaunch,
		Detail: fmt.Sprintf("runtime class %q is not one of the policy's spec.runtime.classNames %v", b.RuntimeClass, classes)}
}

// createConfigMap stores the policy, as written, for this run's pods. One
// per run, so concurrent runners (a CronJob and an operator at a terminal)
// never change each other's policy under a running probe.
func (b *Backend) createConfigMap(ctx context.Context, r *run) (string, error) {
	opts := render.ProbePodOptions{Namespace: b.namespace(), PolicyConfigMap: "sandprobe-run-" + r.id}
	cm := render.PolicyConfigMap(r.spec.Policy, r.spec.PolicyBytes, opts)
	cm.Labels[LabelRun] = r.id
	cm.Annotations = map[string]string{AnnotationDeadline: r.deadline.String()}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := b.API.CreateConfigMap(cctx, cm); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("create configmap %s/%s: %w", cm.Namespace, cm.Name, ctx.Err())
		}
		detail := fmt.Sprintf("create configmap %s/%s: %v", cm.Namespace, cm.Name, err)
		if apierrors.IsNotFound(err) {
			detail += fmt.Sprintf(" (does namespace %s exist? kubectl apply -k manifests/ creates it)", cm.Namespace)
		}
		return "", &runner.CouldNotRun{Target: b.Target(), Reason: runner.ReasonLaunch, Detail: detail}
	}
	return cm.Name, nil
}

func (b *Backend) deleteConfigMap(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := b.API.DeleteConfigMap(ctx, b.namespace(), name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		b.log().Warn("could not delete the policy configmap; the next run's sweep will", "configmap", b.namespace()+"/"+name, "err", err)
	}
}

var _ runner.Backend = (*Backend)(nil)
