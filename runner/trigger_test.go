package runner_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sourcegraph/conc"

	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// watchRig is a Scheduler with a Watch whose cycles the test sees: their
// scope, start time and overlap.
type watchRig struct {
	s         *runner.Scheduler
	w         *runner.Watch
	mu        sync.Mutex
	cycles    []runner.Scope
	starts    []time.Time
	full      atomic.Int32
	running   atomic.Int32
	overlap   atomic.Bool
	hold      chan struct{} // a cycle waits for it when not nil
	coalesced atomic.Int32
}

func newWatchRig(t *testing.T, debounce, minInterval time.Duration, hold bool) *watchRig {
	r := &watchRig{}
	if hold {
		r.hold = make(chan struct{})
	}
	enter := func() {
		if r.running.Add(1) > 1 {
			r.overlap.Store(true)
		}
	}
	r.w = &runner.Watch{Debounce: debounce, MinInterval: minInterval, Coalesced: func() { r.coalesced.Add(1) },
		Cycle: func(ctx context.Context, scope runner.Scope) report.Run {
			enter()
			defer r.running.Add(-1)
			r.mu.Lock()
			r.cycles = append(r.cycles, scope)
			r.starts = append(r.starts, time.Now())
			r.mu.Unlock()
			if r.hold != nil {
				<-r.hold
			}
			return report.Run{}
		}}
	r.s = &runner.Scheduler{Watch: r.w, Grace: time.Second, Cycle: func(ctx context.Context) report.Run {
		enter()
		defer r.running.Add(-1)
		r.full.Add(1)
		if r.hold != nil {
			<-r.hold
		}
		return report.Run{}
	}}
	sched, err := runner.ParseSchedule("@every 1000h")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg conc.WaitGroup
	wg.Go(func() { r.s.Run(ctx, sched, false) })
	t.Cleanup(func() {
		if r.hold != nil {
			close(r.hold)
		}
		cancel()
		wg.Wait()
	})
	return r
}

func (r *watchRig) seen() ([]runner.Scope, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runner.Scope(nil), r.cycles...), append([]time.Time(nil), r.starts...)
}

// waitCycles waits until n cycles have started, then fails on more within
// quiet.
func (r *watchRig) waitCycles(t *testing.T, n int, within, quiet time.Duration) []runner.Scope {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, _ := r.seen()
		if len(got) >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d cycles within %s, want %d: %v", len(got), within, n, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(quiet)
	got, _ := r.seen()
	if len(got) != n {
		t.Fatalf("%d cycles, want exactly %d: %v", len(got), n, got)
	}
	return got
}

func TestWatchStormIsOneCycle(t *testing.T) {
	r := newWatchRig(t, 100*time.Millisecond, 300*time.Millisecond, false)
	start := time.Now()
	for i := range 50 {
		r.w.Request(runner.NamespaceScope(fmt.Sprintf("ns-%d", i%5)), "np changed", time.Now())
	}
	r.w.Request(runner.NodeScope("worker-3"), "agent ready", time.Now())
	got := r.waitCycles(t, 1, 3*time.Second, 500*time.Millisecond)
	if s := got[0].String(); s != "namespaces=ns-0,ns-1,ns-2,ns-3,ns-4 nodes=worker-3" {
		t.Errorf("scope %q, want the union of the storm", s)
	}
	_, starts := r.seen()
	if d := starts[0].Sub(start); d < 100*time.Millisecond {
		t.Errorf("the cycle started %s after the storm began, before the debounce", d)
	}
	if n := r.coalesced.Load(); n != 50 {
		t.Errorf("coalesced %d, want 50 (every change after the first)", n)
	}
}

func TestWatchNeverStarvesAndCapsTheRate(t *testing.T) {
	// A change every 20 ms for 1.2 s, debounce 100 ms: the quiet time never
	// comes, yet cycles start, at most one per 400 ms.
	r := newWatchRig(t, 100*time.Millisecond, 400*time.Millisecond, false)
	for end := time.Now().Add(1200 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		r.w.Request(runner.NamespaceScope("sandboxes"), "np changed", time.Now())
	}
	time.Sleep(900 * time.Millisecond)
	_, starts := r.seen()
	if len(starts) < 2 || len(starts) > 4 {
		t.Fatalf("%d cycles for a 1.2 s storm, want 2 to 4 (one per 400 ms)", len(starts))
	}
	for i := 1; i < len(starts); i++ {
		if d := starts[i].Sub(starts[i-1]); d < 390*time.Millisecond {
			t.Errorf("cycles %d and %d started %s apart, under the 400 ms cap", i-1, i, d)
		}
	}
}

func TestWatchChangeDuringCycleIsOneFollowUp(t *testing.T) {
	r := newWatchRig(t, 50*time.Millisecond, 100*time.Millisecond, true)
	r.w.Request(runner.NamespaceScope("a"), "first", time.Now())
	r.waitCycles(t, 1, 2*time.Second, 0)
	for i := range 20 {
		r.w.Request(runner.NamespaceScope(fmt.Sprintf("b%d", i%2)), "during", time.Now())
	}
	time.Sleep(300 * time.Millisecond)
	if got, _ := r.seen(); len(got) != 1 {
		t.Fatalf("%d cycles while the first was running, want 1", len(got))
	}
	r.hold <- struct{}{} // the first ends
	r.waitCycles(t, 2, 2*time.Second, 0)
	r.hold <- struct{}{}
	time.Sleep(400 * time.Millisecond)
	got, _ := r.seen()
	if len(got) != 2 {
		t.Fatalf("%d cycles, want the first and one follow-up: %v", len(got), got)
	}
	if s := got[1].String(); s != "namespaces=b0,b1" {
		t.Errorf("follow-up scope %q, want every change made during the first", s)
	}
	if r.overlap.Load() {
		t.Error("two cycles ran at once")
	}
}

func TestWatchScheduledTickWaitsForTargetedCycle(t *testing.T) {
	r := newWatchRig(t, 20*time.Millisecond, 50*time.Millisecond, true)
	skipped := atomic.Int32{}
	r.s.Skipped = func() { skipped.Add(1) }
	r.w.Request(runner.NodeScope("n1"), "agent", time.Now())
	r.waitCycles(t, 1, 2*time.Second, 0)
	if r.s.Tick(context.Background()) {
		t.Fatal("a scheduled tick ran beside a targeted cycle")
	}
	r.w.Request(runner.NodeScope("n2"), "agent", time.Now()) // absorbed by the full run
	r.hold <- struct{}{}
	deadline := time.Now().Add(2 * time.Second)
	for r.full.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if r.full.Load() != 1 {
		t.Fatal("the scheduled run held up by a targeted cycle never ran")
	}
	r.hold <- struct{}{}
	time.Sleep(300 * time.Millisecond)
	if got, _ := r.seen(); len(got) != 1 {
		t.Errorf("%d targeted cycles, want 1: the change pending when the full run started is its own", len(got))
	}
	if skipped.Load() != 0 {
		t.Errorf("%d skipped ticks: one held up by a targeted cycle waits, it is not skipped", skipped.Load())
	}
	if r.overlap.Load() {
		t.Error("two cycles ran at once")
	}
}

// TestWatchShutdownLetsTargetedCycleFinish: SIGTERM during a targeted
// cycle starts nothing new and gives the cycle the grace, like a
// scheduled run; a change pending then is dropped with the process (the
// next process's full cycle at start covers it).
func TestWatchShutdownLetsTargetedCycleFinish(t *testing.T) {
	var published atomic.Int32
	hold := make(chan struct{})
	w := &runner.Watch{Debounce: 10 * time.Millisecond, MinInterval: 20 * time.Millisecond,
		Cycle: func(ctx context.Context, scope runner.Scope) report.Run {
			select {
			case <-hold:
			case <-ctx.Done():
			}
			return report.Run{}
		}}
	s := &runner.Scheduler{Watch: w, Grace: 2 * time.Second, Cycle: func(context.Context) report.Run { return report.Run{} },
		Publish: func(context.Context, report.Run, time.Time) { published.Add(1) }}
	sched, _ := runner.ParseSchedule("@every 1000h")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	var wg conc.WaitGroup
	wg.Go(func() { errc <- s.Run(ctx, sched, false) })
	w.Request(runner.NamespaceScope("a"), "np", time.Now())
	deadline := time.Now().Add(2 * time.Second)
	for !s.Running() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !s.Running() {
		t.Fatal("the targeted cycle never started")
	}
	w.Request(runner.NamespaceScope("b"), "np", time.Now())
	cancel()
	time.Sleep(200 * time.Millisecond)
	close(hold) // the cycle ends within the grace
	wg.Wait()
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if published.Load() != 1 {
		t.Errorf("%d runs published, want the one in flight (finished within the grace)", published.Load())
	}
}
