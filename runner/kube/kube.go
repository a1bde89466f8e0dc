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
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandprobe/sandprobe/drift"
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
	// ImageOnly makes this verify-image's backend: the pod, shaped like a
	// sandbox of the policy and running spec.image.ref, verifies the image,
	// not where it stands, so nothing governing the sandbox namespaces is
	// surveyed (no parity, no strays; NoNetwork leaves out the control).
	ImageOnly bool
	// Env is added to the probe container's environment, as a sandbox's
	// pod would set it (KEY=VALUE).
	Env []string
	// ImageCommand, when set, is the image's own ENTRYPOINT and CMD: the
	// probe starts it under the pod's constraints (check image.entrypoint)
	// and watches it for ImageCommandTimeout.
	ImageCommand        []string
	ImageCommandTimeout time.Duration
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
	if w := b.where(spec); w.Namespace != "" {
		return w.String()
	}
	return "kube"
}

// where is the run's location as a whole: its one namespace, or none.
func (b *Backend) where(spec runner.ProbeSpec) report.Location {
	if ns := b.Namespaces(spec); len(ns) == 1 {
		return report.Location{Namespace: ns[0]}
	}
	return report.Location{}
}

// Target names where one probe pod reports from: its namespace and, once
// known, its node. Pod names are new every run; these stay the same, so
// metric series do too.
func Target(ns, node string) string {
	return report.Location{Namespace: ns, Node: node}.String()
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
	// controlPod is a control pod as admitted, once created (the run's
	// control pods differ only in their node).
	controlPod atomic.Pointer[corev1.Pod]
}

var _ runner.Backend = (*Backend)(nil)
