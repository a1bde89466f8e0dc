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
	"strings"
	"sync"
	"time"

	"github.com/sourcegraph/conc"
	"github.com/sourcegraph/conc/pool"
	corev1 "k8s.io/api/core/v1"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// RunnerNamespace is the runner's own namespace in manifests/: the
// ServiceAccount, the CronJob and (later) the control pods live there.
const RunnerNamespace = "sandprobe-system"

// Labels and annotations the backend puts on what it creates (besides
// render's), so a leftover can be found and judged without its runner.
const (
	// LabelRun is the run's id, on every probe pod.
	LabelRun = "sandprobe.dev/run"
	// LabelNonce (and AnnotationNonce) carry the nonce the probe must echo.
	LabelNonce      = "sandprobe.dev/nonce"
	AnnotationNonce = "sandprobe.dev/nonce"
	// AnnotationDeadline is the run's deadline ("2m0s"): past creation plus
	// this (plus SweepAfter) the object is a leftover.
	AnnotationDeadline = "sandprobe.dev/deadline"
	// AnnotationTarget is the target the pod reports for
	// ("namespace/sandboxes/node/worker-3").
	AnnotationTarget = "sandprobe.dev/target"
	// AnnotationCreatedBy is the user that created the pod, as the API
	// server authenticated it. The runner-scope admission policy lets the
	// runner delete only pods whose annotation names the runner, and
	// refuses this annotation to anyone it does not name: so the runner
	// deletes only pods it created.
	AnnotationCreatedBy = "sandprobe.dev/created-by"
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

// Backend runs the probe in pods where sandboxes run: in each namespace of
// spec.namespaces, so the NetworkPolicies and Cilium policies that select
// the sandboxes there select the probe too.
type Backend struct {
	API API
	// Host is the API server's address, for the errors that name the
	// cluster (Preflight, drift).
	Host string
	// Drift, when set, is the drift phase every cycle runs after the probe
	// (AfterProbe).
	Drift *DriftPhase
	// Namespace, when set, holds every probe pod instead of the policy's
	// namespaces (the old shape: a namespace of the runner's own, governed
	// by its own egress policies, not the sandboxes').
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
	// Policies reads the NetworkPolicies and Cilium policies that govern
	// the sandbox namespaces, for the parity check; nil leaves parity
	// unproven (an error finding, and every egress verdict inconclusive).
	Policies drift.KubeAPI
	// ControlNamespace holds the run's control pod, which dials every
	// must-fail destination where no sandbox policy applies ("" is
	// RunnerNamespace; the CronJob passes its own namespace).
	ControlNamespace string
	// MaxStrays bounds the probes for pods without the sandbox labels (0
	// is DefaultMaxStrays; negative: none).
	MaxStrays int
	// PerNode runs one pod on each node of the sandbox pool (it matches
	// spec.placement.nodeSelector and every taint is tolerated); a pool
	// node that is cordoned or not Ready is a could-not-run naming it.
	PerNode bool
	// Parallel caps the probe pods in flight (0: spec.probe.parallel,
	// then AutoParallel of their count).
	Parallel int
	// RunDeadline bounds the fan-out as a whole (0: spec.probe.runDeadline,
	// then AutoRunDeadline): a pod not started by then, or cut short by
	// it, is a could-not-run naming its node.
	RunDeadline time.Duration
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
	// noControl leaves the control pod out (BenchmarkKubeCycle measures
	// what it costs against a cycle without it).
	noControl bool
}

// podTimes is when one probe pod went through its stages, for benchmarks.
type podTimes struct {
	created, finished, collected, deleted time.Time
	// containerStarted is the kubelet's startedAt (second precision).
	containerStarted time.Time
	result           report.ProbeResult
}

// Namespaces are where the probe pods go: Namespace when set, else the
// policy's spec.namespaces.
func (b *Backend) Namespaces(spec runner.ProbeSpec) []string {
	if b.Namespace != "" {
		return []string{b.Namespace}
	}
	return spec.Policy.Spec.Namespaces
}

// Target names the run as a whole in findings: its one namespace, or the
// backend when the probes go to several.
func (b *Backend) Target(spec runner.ProbeSpec) string {
	if ns := b.Namespaces(spec); len(ns) == 1 {
		return "namespace/" + ns[0]
	}
	return "kube"
}

// Target names where one probe pod reports from: its namespace and, once
// known, its node. Pod names are new every run; these stay the same, so
// metric series do too.
func Target(ns, node string) string {
	if node == "" {
		return "namespace/" + ns
	}
	return "namespace/" + ns + "/node/" + node
}

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
	id       string
	spec     runner.ProbeSpec
	deadline time.Duration
	// createdBy is the runner's user name as the API server sees it, for
	// AnnotationCreatedBy; "" when it could not be learnt.
	createdBy string
	track     *tracker
	// logGates learn, per namespace, whether this runner may read pod
	// logs there (podLog).
	logGates sync.Map
	// survey is what governs the probe namespaces, for parity.
	survey *survey
	nodes  *nodeCache
	// controlPod is the control pod as admitted, once created.
	controlPod *corev1.Pod
}

// Run sweeps leftovers, creates one probe pod in each sandbox namespace
// (one per namespace and sandbox node with PerNode), waits for each to
// end, collects the results and deletes every pod it created.
func (b *Backend) Run(ctx context.Context, spec runner.ProbeSpec) ([]report.ProbeResult, error) {
	defer b.progress("")
	deadline := spec.Deadline
	if deadline <= 0 {
		deadline = spec.Policy.Spec.Probe.Deadline.Duration
	}
	if deadline <= 0 {
		deadline = 2 * time.Minute
	}
	namespaces := b.Namespaces(spec)
	if len(namespaces) == 0 {
		return nil, &runner.CouldNotRun{Target: b.Target(spec), Reason: runner.ReasonLaunch,
			Detail: "the policy declares no spec.namespaces: the probe runs in each sandbox namespace, so declare them (or name one with --namespace)"}
	}
	if err := b.checkRuntimeClass(spec); err != nil {
		return nil, err
	}
	if err := checkPolicySize(spec); err != nil {
		return nil, &runner.CouldNotRun{Target: b.Target(spec), Reason: runner.ReasonBadPolicy, Detail: err.Error()}
	}
	// Who the runner is, what is left of earlier runs, and what governs
	// the sandbox namespaces are independent: read them at once.
	me := b.whoAmI(ctx)
	b.progress("sweeping leftover probe pods, reading the sandbox namespaces' egress policies")
	var sv *survey
	prep := pool.New().WithErrors().WithMaxGoroutines(cmp.Or(b.Parallel, DefaultParallel))
	surveyed := namespaces
	if b.wantsControl(spec) && !slices.Contains(namespaces, b.controlNamespace()) {
		// Which egress policies govern the control pod, for its summary.
		surveyed = append(slices.Clone(namespaces), b.controlNamespace())
	}
	prep.Go(func() error { sv = b.survey(ctx, spec.Policy, surveyed); return nil })
	for _, ns := range namespaces {
		prep.Go(func() error { return b.Sweep(ctx, ns, me) })
	}
	if err := prep.Wait(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sweep: %w", ctx.Err())
		}
		return nil, &runner.CouldNotRun{Target: b.Target(spec), Reason: runner.ReasonLaunch, Detail: oneLine(err)}
	}
	nodes := []string{""}
	var down []downNode
	scope := spec.Scope
	narrow := scope != nil && !scope.Full
	var poolNodes []string
	var poolDown []downNode
	if b.PerNode || (narrow && len(scope.Nodes) > 0) {
		var err error
		if poolNodes, poolDown, err = b.sandboxNodes(ctx, spec); err != nil {
			return nil, err
		}
		if b.PerNode {
			nodes, down = poolNodes, poolDown
		}
	}
	// A cycle of a narrow scope (serve --watch): its namespaces on every
	// node as usual, every other namespace only on the scope's nodes.
	var scopeNodes []string
	var scopeDown []downNode
	if narrow {
		scopeNodes = slices.DeleteFunc(slices.Clone(poolNodes), func(n string) bool { return !scope.Nodes[n] })
		scopeDown = slices.DeleteFunc(slices.Clone(poolDown), func(d downNode) bool { return !scope.Nodes[d.name] })
		if missing := len(scope.Nodes) - len(scopeNodes) - len(scopeDown); missing > 0 {
			b.log().Info("watch: nodes of the cycle's scope outside the sandbox pool get no probe", "scope", scope.String(), "outside", missing)
		}
	}
	r := &run{id: runner.NewNonce()[:10], spec: spec, deadline: deadline, createdBy: me, survey: sv, nodes: newNodeCache(b.API)}
	r.track = newTracker(b.progress, b.now)

	var placements []placement
	unprobed := map[string]report.Finding{}
	var downErrs []error
	maxStrays := cmp.Or(b.MaxStrays, DefaultMaxStrays)
	for _, ns := range namespaces {
		nsNodes, nsDown := nodes, down
		switch {
		case narrow && !scope.Namespaces[ns]:
			nsNodes, nsDown = scopeNodes, scopeDown
		case narrow && !b.PerNode:
			// One pod where the scheduler puts it, and the scope's nodes.
			nsNodes, nsDown = append(slices.Clone(nodes), scopeNodes...), scopeDown
		}
		for _, d := range nsDown {
			downErrs = append(downErrs, &runner.CouldNotRun{Target: Target(ns, d.name), Reason: d.reason, Detail: d.detail})
		}
		class := b.runtimeClass(r, ns)
		for _, node := range nsNodes {
			placements = append(placements, placement{ns: ns, node: node, runtimeClass: class})
		}
		if sv.err != nil || maxStrays < 0 || spec.NoNetwork {
			continue
		}
		strays, over := sv.strays(ns, maxStrays)
		if narrow {
			strays = slices.DeleteFunc(strays, func(st *stray) bool { return !scope.Covers(ns, st.pod.node) })
		}
		maxStrays -= len(strays)
		for _, st := range strays {
			placements = append(placements, placement{ns: ns, node: st.pod.node, runtimeClass: st.pod.runtimeClass, stray: st})
		}
		if len(over) > 0 {
			unprobed[ns] = unprobedStrays(ns, over, cmp.Or(b.MaxStrays, DefaultMaxStrays))
		}
	}

	if narrow && len(placements) == 0 && len(downErrs) == 0 {
		// Nothing of the scope can host a sandbox (a CNI agent restarted on
		// a node outside the pool): no pod, and the merge keeps the rest.
		b.log().Info("watch: nothing to probe in the cycle's scope", "scope", scope.String())
		return nil, nil
	}
	type outcome struct {
		res report.ProbeResult
		err error
	}
	// The control dials while the probes run. When no probe reports, what
	// it saw speaks for nothing: it is cut short.
	var (
		ctl        outcome
		ctlRunning conc.WaitGroup
	)
	ctlCtx, ctlCancel := context.WithCancel(ctx)
	defer ctlCancel()
	ctlPlacement := placement{ns: b.controlNamespace(), control: true}
	if b.wantsControl(spec) {
		ctlRunning.Go(func() {
			res, err := b.probeOne(ctlCtx, r, ctlPlacement)
			ctl = outcome{res, err}
		})
	}
	// The fan-out as a whole has a deadline scaled with its size: a pod
	// whose turn comes after it, or that it cuts short, is a could-not-run
	// naming its node, never an omission.
	parallel := b.parallel(spec, len(placements))
	runDeadline := b.runDeadline(spec, len(placements), parallel, deadline)
	b.log().Info("probe fan-out", "pods", len(placements), "parallel", parallel, "runDeadline", runDeadline.String(), "nodesDown", len(down))
	fanCtx, fanCancel := context.WithTimeoutCause(ctx, runDeadline, errRunDeadline)
	defer fanCancel()
	p := pool.NewWithResults[outcome]().WithMaxGoroutines(parallel)
	for _, pl := range placements {
		p.Go(func() outcome {
			if fanCtx.Err() != nil && ctx.Err() == nil {
				return outcome{err: &runner.CouldNotRun{Target: pl.target(pl.node), Reason: runner.ReasonDeadline,
					Detail: fmt.Sprintf("not probed: the run's deadline of %s (%d probe pods, %d at a time) passed before its turn", runDeadline, len(placements), parallel)}}
			}
			res, err := b.probeOne(fanCtx, r, pl)
			if err != nil && ctx.Err() == nil && context.Cause(fanCtx) == errRunDeadline {
				err = cutShort(err, pl, runDeadline, len(placements), parallel)
			}
			return outcome{res, err}
		})
	}
	var (
		results []report.ProbeResult
		errs    = downErrs
	)
	for _, o := range p.Wait() {
		if o.err != nil {
			errs = append(errs, o.err)
			continue
		}
		results = append(results, o.res)
	}
	if len(results) == 0 {
		ctlCancel()
	}
	ctlRunning.Wait()
	var (
		control *runner.Control
		summary []report.ProbeResult
	)
	if b.wantsControl(spec) && len(results) > 0 {
		control = b.control(r, ctlPlacement, ctl.res, ctl.err, &summary)
		if ctl.err != nil {
			errs = append(errs, ctl.err)
		}
	}
	// Every deny verdict counts only where the control got an answer.
	for i := range results {
		if !spec.NoNetwork {
			runner.ApplyControl(&results[i], control)
		}
	}
	if len(results) > 0 {
		// What the control saw, as a result of its own (when there is
		// anything it speaks for).
		results = append(results, summary...)
	}
	slices.SortFunc(results, func(a, b report.ProbeResult) int { return cmp.Compare(a.Target, b.Target) })
	// Strays past the bound are named in their namespace's first result.
	for ns, f := range unprobed {
		if i := slices.IndexFunc(results, func(res report.ProbeResult) bool { return strings.HasPrefix(res.Target, "namespace/"+ns) }); i >= 0 {
			results[i].Findings = append(results[i].Findings, f)
		}
	}
	return results, errors.Join(errs...)
}

// errRunDeadline is the cause of the fan-out's context when its run
// deadline passed (rather than the caller cancelling).
var errRunDeadline = errors.New("the run's deadline passed")

// cutShort names a probe the run deadline ended: what the pod itself said
// stays when it already was a could-not-run of another kind (a pod that
// never scheduled is still unschedulable), else it becomes a deadline
// could-not-run naming the pod's node.
func cutShort(err error, pl placement, runDeadline time.Duration, pods, parallel int) error {
	var cnr *runner.CouldNotRun
	target := pl.target(pl.node)
	if errors.As(err, &cnr) {
		if cnr.Reason != runner.ReasonDeadline {
			return err
		}
		target = cnr.Target // it may know the node the scheduler picked
	}
	return &runner.CouldNotRun{Target: target, Reason: runner.ReasonDeadline,
		Detail: fmt.Sprintf("cut short by the run's deadline of %s (%d probe pods, %d at a time): %s", runDeadline, pods, parallel, oneLine(err))}
}

// checkRuntimeClass refuses a --runtime-class the policy does not declare:
// the probe would prove nothing about the sandboxes.
func (b *Backend) checkRuntimeClass(spec runner.ProbeSpec) error {
	classes := spec.Policy.Spec.Runtime.ClassNames
	if b.RuntimeClass == "" || slices.Contains(classes, b.RuntimeClass) {
		return nil
	}
	return &runner.CouldNotRun{Target: b.Target(spec), Reason: runner.ReasonLaunch,
		Detail: fmt.Sprintf("runtime class %q is not one of the policy's spec.runtime.classNames %v", b.RuntimeClass, classes)}
}

// checkPolicySize refuses a policy too large to travel in an annotation.
func checkPolicySize(spec runner.ProbeSpec) error {
	if n := len(spec.PolicyBytes); n > render.MaxInlinePolicy {
		return fmt.Errorf("the policy file is %d bytes; a probe pod carries it in an annotation, which holds at most %d", n, render.MaxInlinePolicy)
	}
	return nil
}

// whoAmI asks the API server who the runner is, for AnnotationCreatedBy.
// Without an answer the pods carry no such annotation: they still run,
// but the runner-scope admission policy will not let this identity delete
// them (the kubelet's activeDeadlineSeconds still ends them).
func (b *Backend) whoAmI(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	user, err := b.API.WhoAmI(ctx)
	if err != nil {
		b.log().Warn("cannot learn the runner's identity (SelfSubjectReview); probe pods go without "+AnnotationCreatedBy, "err", oneLine(err))
		return ""
	}
	return user
}

// control turns the control pod's outcome into what the probes' denies are
// judged against, and adds the control's summary as a result of its own.
func (b *Backend) control(r *run, pl placement, res report.ProbeResult, err error, results *[]report.ProbeResult) *runner.Control {
	vantage := "namespace/" + pl.ns
	if err != nil {
		return &runner.Control{Vantage: vantage, Err: errors.New(oneLine(err))}
	}
	c := runner.NewControl(vantage, res)
	summary := res
	summary.Findings = []report.Finding{b.controlSummary(r, res.Target, pl.ns, res, r.controlPod)}
	*results = append(*results, summary)
	return c
}

var _ runner.Backend = (*Backend)(nil)
