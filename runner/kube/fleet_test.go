package kube

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/runner"
)

// TestFleetArithmetic holds the cap and the run deadline for the shipped
// policy to the table in docs/fleet.md ("Per node by default"), and the
// order in which a flag, the policy and the arithmetic decide them.
func TestFleetArithmetic(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "manifests", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(raw)
	if err != nil {
		t.Fatal(err)
	}
	spec := runner.ProbeSpec{Policy: p}
	pod := p.Spec.Probe.Deadline.Duration
	if w := WaveTime(spec, pod); w != 31*time.Second {
		t.Errorf("wave %s, want 31s (20s start + 6s egress bound + 5s)", w)
	}
	b := &Backend{}
	for _, tc := range []struct {
		pods, cap int
		deadline  time.Duration
	}{
		{1, 16, 3 * time.Minute},
		{16, 16, 3 * time.Minute},
		{100, 16, 4*time.Minute + 37*time.Second},
		{256, 16, 9*time.Minute + 16*time.Second},
		{1000, 63, 9*time.Minute + 16*time.Second},
		{2000, 125, 9*time.Minute + 16*time.Second},
		{5000, 128, 21*time.Minute + 40*time.Second},
	} {
		c := b.parallel(spec, tc.pods)
		d := b.runDeadline(spec, tc.pods, c, pod)
		if c != tc.cap || d != tc.deadline {
			t.Errorf("%d pods: cap %d, run deadline %s; want %d, %s (docs/fleet.md)", tc.pods, c, d, tc.cap, tc.deadline)
		}
	}
	// The CronJob's activeDeadlineSeconds (1200) holds the run deadline
	// plus drift up to 2,048 pool nodes.
	if d := b.runDeadline(spec, 2048, b.parallel(spec, 2048), pod) + DefaultDriftTimeout; d > 20*time.Minute {
		t.Errorf("2,048 nodes: run deadline + drift = %s, over the CronJob's 20 min", d)
	}
	// Without the egress checks the wave is shorter, never longer.
	if w := WaveTime(runner.ProbeSpec{Policy: p, NoNetwork: true}, pod); w != 25*time.Second {
		t.Errorf("no-network wave %s, want 25s", w)
	}
	// The policy overrides the arithmetic, the flag overrides both.
	q := *p
	q.Spec.Probe.Parallel, q.Spec.Probe.RunDeadline = 7, policy.Duration{Duration: 90 * time.Second}
	qs := runner.ProbeSpec{Policy: &q}
	if c, d := b.parallel(qs, 1000), b.runDeadline(qs, 1000, 7, pod); c != 7 || d != 90*time.Second {
		t.Errorf("policy: cap %d, deadline %s; want 7, 1m30s", c, d)
	}
	f := &Backend{Parallel: 3, RunDeadline: time.Second}
	if c, d := f.parallel(qs, 1000), f.runDeadline(qs, 1000, 3, pod); c != 3 || d != time.Second {
		t.Errorf("flags: cap %d, deadline %s; want 3, 1s", c, d)
	}
}
