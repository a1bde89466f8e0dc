package runner_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

func TestParseSchedule(t *testing.T) {
	from := time.Date(2026, 11, 29, 10, 7, 0, 0, time.Local)
	cases := []struct {
		spec    string
		next    time.Time // zero: must not parse
		wantErr string
	}{
		{spec: runner.DefaultSchedule, next: from.Add(23 * time.Minute)},
		{spec: "*/2 * * * * *", next: from.Add(2 * time.Second)}, // seconds first
		{spec: "@every 1s", next: from.Add(time.Second)},
		{spec: "@hourly", next: from.Add(53 * time.Minute)},
		{spec: "every 30 minutes", wantErr: `schedule "every 30 minutes"`},
		{spec: "61 * * * *", wantErr: "61"},
		{spec: "", wantErr: "empty"},
	}
	for _, c := range cases {
		s, err := runner.ParseSchedule(c.spec)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%q: err %v, want one containing %q", c.spec, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.spec, err)
			continue
		}
		if got := s.Next(from); !got.Equal(c.next) {
			t.Errorf("%q: next %v, want %v", c.spec, got, c.next)
		}
	}
}

// fakeCycle is a cycle whose length the test controls, counting how many
// runs overlap (must never exceed one).
type fakeCycle struct {
	release    chan struct{} // a run returns when this is closed or receives
	honourCtx  bool          // return on cancellation
	panicNow   bool
	started    chan struct{}
	running    atomic.Int32
	maxRunning atomic.Int32
	runs       atomic.Int32
	cancelled  atomic.Int32
}

func newFakeCycle() *fakeCycle {
	return &fakeCycle{release: make(chan struct{}), started: make(chan struct{}, 100), honourCtx: true}
}

func (f *fakeCycle) Cycle(ctx context.Context) report.Run {
	n := f.running.Add(1)
	defer f.running.Add(-1)
	for {
		m := f.maxRunning.Load()
		if n <= m || f.maxRunning.CompareAndSwap(m, n) {
			break
		}
	}
	f.runs.Add(1)
	f.started <- struct{}{}
	if f.panicNow {
		panic("backend exploded")
	}
	done := ctx.Done()
	if !f.honourCtx {
		done = nil
	}
	select {
	case <-f.release:
	case <-done:
		f.cancelled.Add(1)
	}
	return report.Run{Policy: "p", Findings: []report.Finding{{Check: "identity.uid", Target: "node/n", Where: report.Location{Node: "n"}, Status: report.Pass}}}
}

type published struct {
	mu   sync.Mutex
	runs []report.Run
}

func (p *published) add(_ context.Context, r report.Run, _ time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runs = append(p.runs, r)
}

func (p *published) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.runs)
}

// TestOverlappingTicksSkipped: a tick while a run is going returns at once,
// is counted, and starts nothing; the next tick after the run ends runs.
func TestOverlappingTicksSkipped(t *testing.T) {
	fc := newFakeCycle()
	var skipped atomic.Int32
	var pub published
	s := &runner.Scheduler{Cycle: fc.Cycle, Publish: pub.add, Skipped: func() { skipped.Add(1) }}
	var wg sync.WaitGroup
	wg.Go(func() { s.Tick(context.Background()) })
	<-fc.started
	for range 3 {
		start := time.Now()
		if s.Tick(context.Background()) {
			t.Fatal("a tick ran while another run was going")
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Errorf("a skipped tick took %v", d)
		}
	}
	fc.release <- struct{}{}
	wg.Wait()
	if skipped.Load() != 3 || fc.runs.Load() != 1 || pub.count() != 1 {
		t.Fatalf("skipped %d runs %d published %d, want 3 1 1", skipped.Load(), fc.runs.Load(), pub.count())
	}
	close(fc.release)
	if !s.Tick(context.Background()) || fc.runs.Load() != 2 {
		t.Fatal("the tick after the run finished did not run")
	}
}

// TestScheduleSkipsOverlapsOnTheClock: on a per-second schedule with runs
// that take 2.5 s, ticks are skipped and counted and runs never overlap.
func TestScheduleSkipsOverlapsOnTheClock(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 4 s")
	}
	fc := newFakeCycle()
	go func() {
		for range fc.started {
			time.Sleep(2500 * time.Millisecond)
			fc.release <- struct{}{}
		}
	}()
	var skipped atomic.Int32
	var pub published
	s := &runner.Scheduler{Cycle: fc.Cycle, Publish: pub.add, Skipped: func() { skipped.Add(1) }, Grace: 5 * time.Second}
	sched, _ := runner.ParseSchedule("@every 1s")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	if err := s.Run(ctx, sched, true); err != nil {
		t.Fatal(err)
	}
	close(fc.started)
	if fc.maxRunning.Load() != 1 {
		t.Errorf("%d runs overlapped", fc.maxRunning.Load())
	}
	// Start run 0–2.5 s, ticks at 1 and 2 skipped, tick at 3 runs until 5.5
	// (finished within grace), tick at 4 skipped.
	if skipped.Load() < 2 || fc.runs.Load() < 2 {
		t.Errorf("runs %d skipped %d, want ≥ 2 and ≥ 2", fc.runs.Load(), skipped.Load())
	}
	if int(fc.runs.Load()) != pub.count() {
		t.Errorf("ran %d, published %d: a finished run was not published", fc.runs.Load(), pub.count())
	}
}

// TestShutdown: on SIGTERM (ctx done) a run in flight finishes within the
// grace period, or is cancelled and not published; a run that ignores its
// cancellation makes Run return an error instead of hanging.
func TestShutdown(t *testing.T) {
	cases := []struct {
		name          string
		runFor        time.Duration // 0: until released or cancelled
		honourCtx     bool
		grace         time.Duration
		wantPublished int
		wantCancelled int32
		wantErr       error
		maxShutdown   time.Duration
	}{
		{"finishes within grace", 300 * time.Millisecond, true, 3 * time.Second, 1, 0, nil, 2 * time.Second},
		{"cancelled after grace", 0, true, 200 * time.Millisecond, 0, 1, nil, time.Second},
		{"ignores cancellation", 0, false, 100 * time.Millisecond, 0, 0, runner.ErrRunDidNotStop, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fc := newFakeCycle()
			fc.honourCtx = c.honourCtx
			if c.runFor > 0 {
				go func() { <-fc.started; time.Sleep(c.runFor); close(fc.release) }()
			} else {
				t.Cleanup(func() { close(fc.release) })
			}
			var pub published
			s := &runner.Scheduler{Cycle: fc.Cycle, Publish: pub.add, Grace: c.grace}
			sched, _ := runner.ParseSchedule(runner.DefaultSchedule)
			ctx, sigterm := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- s.Run(ctx, sched, true) }()
			if c.runFor == 0 {
				<-fc.started
			} else {
				time.Sleep(50 * time.Millisecond)
			}
			start := time.Now()
			sigterm()
			var err error
			select {
			case err = <-errc:
			case <-time.After(c.maxShutdown + c.grace*2):
				t.Fatal("Run did not return after shutdown")
			}
			took := time.Since(start)
			if !errors.Is(err, c.wantErr) {
				t.Errorf("err %v, want %v", err, c.wantErr)
			}
			if took > c.maxShutdown {
				t.Errorf("shutdown took %v, want ≤ %v", took, c.maxShutdown)
			}
			if pub.count() != c.wantPublished || fc.cancelled.Load() != c.wantCancelled {
				t.Errorf("published %d cancelled %d, want %d %d", pub.count(), fc.cancelled.Load(), c.wantPublished, c.wantCancelled)
			}
			t.Logf("shutdown took %v", took.Round(time.Millisecond))
		})
	}
}

// TestPanickingCycleReportsCouldNotRun: a cycle that panics is published as
// a could-not-run run (exit 3), and the scheduler keeps going.
func TestPanickingCycleReportsCouldNotRun(t *testing.T) {
	fc := newFakeCycle()
	fc.panicNow = true
	var pub published
	s := &runner.Scheduler{Cycle: fc.Cycle, Publish: pub.add}
	if !s.Tick(context.Background()) || pub.count() != 1 {
		t.Fatal("the panicking run was not published")
	}
	r := pub.runs[0]
	if r.ExitCode() != report.ExitCouldNotRun || r.Findings[0].Subject != runner.ReasonCrashed || !strings.Contains(r.Findings[0].Actual, "backend exploded") {
		t.Fatalf("want a crashed could-not-run, got exit %d %+v", r.ExitCode(), r.Findings)
	}
	if s.Running() {
		t.Fatal("still marked running after the panic")
	}
}
