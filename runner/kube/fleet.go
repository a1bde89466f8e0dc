package kube

import (
	"time"

	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/runner"
)

// How a per-node run scales with the fleet (docs/fleet.md, "Per node by
// default"): the cap on probe pods in flight grows with their count, so a
// thousand nodes take a bounded number of waves, and the run's deadline is
// those waves times what one pod needs, so a healthy run is never cut off
// and a stuck one ends with the nodes it could not reach named.
const (
	// MaxParallel is the most probe pods the automatic cap keeps in
	// flight: each is a create, a watch and a delete on the API server.
	MaxParallel = 128
	// maxRequestsPerPod is what one probe pod costs the API server: create,
	// watch, get its node, delete, a list to see it gone (TestKwok*).
	maxRequestsPerPod = 5
	// podsPerWorker is how many probe pods the automatic cap gives each
	// worker: ceil(pods/16) workers, so the run is about 16 waves long
	// between DefaultParallel and MaxParallel.
	podsPerWorker = 16
	// DefaultPodStart is what one wave allows a probe pod to be scheduled,
	// to pull (IfNotPresent: usually cached) and to start.
	DefaultPodStart = 20 * time.Second
	// probeOverhead is the probe's own checks besides egress (identity,
	// filesystem, runtime, metadata): well under a second each.
	probeOverhead = 5 * time.Second
	// DefaultRunMargin is what the run deadline adds for the sweep, the
	// node list, the control pod's start and the last deletions.
	DefaultRunMargin = time.Minute
)

// AutoParallel is the cap on probe pods in flight for a run of pods probe
// pods: ceil(pods/16), at least DefaultParallel and at most MaxParallel.
func AutoParallel(pods int) int {
	return min(MaxParallel, max(DefaultParallel, (pods+podsPerWorker-1)/podsPerWorker))
}

// WaveTime is what one probe pod is given in the run deadline's arithmetic:
// its start plus the probe's bound (the egress run's waves of timeouts plus
// the rest), never more than the pod's own deadline (the kubelet ends it
// there).
func WaveTime(spec runner.ProbeSpec, podDeadline time.Duration) time.Duration {
	bound := probeOverhead
	if !spec.NoNetwork {
		bound += probes.EgressBound(spec.Policy.Spec.Egress)
	}
	return min(podDeadline, DefaultPodStart+bound)
}

// AutoRunDeadline bounds a run of pods probe pods, parallel at a time:
// ceil(pods/parallel) waves of wave, plus DefaultRunMargin, and never less
// than one pod's deadline plus the margin (a single slow pod may use all of
// its own).
func AutoRunDeadline(pods, parallel int, wave, podDeadline time.Duration) time.Duration {
	waves := (max(pods, 1) + max(parallel, 1) - 1) / max(parallel, 1)
	return max(time.Duration(waves)*wave, podDeadline) + DefaultRunMargin
}

// parallel is the cap this run uses: Parallel when set, then the policy's
// spec.probe.parallel, then AutoParallel.
func (b *Backend) parallel(spec runner.ProbeSpec, pods int) int {
	switch {
	case b.Parallel > 0:
		return b.Parallel
	case spec.Policy.Spec.Probe.Parallel > 0:
		return spec.Policy.Spec.Probe.Parallel
	}
	return AutoParallel(pods)
}

// runDeadline is this run's deadline: RunDeadline when set, then the
// policy's spec.probe.runDeadline, then AutoRunDeadline.
func (b *Backend) runDeadline(spec runner.ProbeSpec, pods, parallel int, podDeadline time.Duration) time.Duration {
	switch {
	case b.RunDeadline > 0:
		return b.RunDeadline
	case spec.Policy.Spec.Probe.RunDeadline.Duration > 0:
		return spec.Policy.Spec.Probe.RunDeadline.Duration
	}
	return AutoRunDeadline(pods, parallel, WaveTime(spec, podDeadline), podDeadline)
}
