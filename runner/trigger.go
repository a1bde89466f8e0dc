package runner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sandprobe/sandprobe/report"
)

// Defaults of serve --watch's debounce and rate cap (docs/fleet.md, "Minutes,
// not half hours").
const (
	// DefaultDebounce is the quiet time after the last change before a
	// triggered cycle starts: a kubectl apply of ten objects is one cycle.
	DefaultDebounce = 2 * time.Second
	// DefaultMinInterval is the least time between the starts of two
	// triggered cycles: a storm of changes costs one cycle per interval.
	DefaultMinInterval = 10 * time.Second
)

// Watch is how a Scheduler starts cycles when something changed (serve
// --watch): Request says what changed, and one targeted cycle over the
// union of every pending change starts once the changes have been quiet for
// Debounce — never later than max(Debounce, MinInterval) after the first of
// them, so a change that never stops cannot starve the cycle, and never
// sooner than MinInterval after the previous targeted cycle started. A
// change that arrives while a cycle runs waits for it, as one follow-up
// cycle: never lost, never more than one queued. Scheduled full cycles go on
// as before; one that starts absorbs the changes pending at its start.
type Watch struct {
	// Cycle runs one cycle over scope and returns what the fleet looks
	// like after it (the server merges it with what it knew).
	Cycle       func(ctx context.Context, scope Scope) report.Run
	Debounce    time.Duration // 0 is DefaultDebounce
	MinInterval time.Duration // 0 is DefaultMinInterval
	// Coalesced hears every change that joined changes already pending
	// (metrics).
	Coalesced func()

	mu           sync.Mutex
	pending      Scope
	changes      int      // how many changes are pending
	why          []string // what the pending changes were, for the log
	first, last  time.Time
	lastStart    time.Time
	fullQueued   bool // a scheduled tick came while a targeted cycle ran
	targetedBusy bool
	wake         chan struct{}
}

func (w *Watch) init() {
	w.mu.Lock()
	if w.wake == nil {
		w.wake = make(chan struct{}, 1)
	}
	w.mu.Unlock()
}

func (w *Watch) poke() {
	w.init()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Request asks for a cycle over scope because of why ("networkpolicy
// sandboxes/allow-all changed").
func (w *Watch) Request(scope Scope, why string, now time.Time) {
	if scope.Empty() {
		return
	}
	w.mu.Lock()
	if w.pending.Empty() {
		w.first = now
		w.why = w.why[:0]
	} else if w.Coalesced != nil {
		w.Coalesced()
	}
	w.pending.Add(scope)
	w.changes++
	if len(w.why) < 5 {
		w.why = append(w.why, why)
	}
	w.last = now
	w.mu.Unlock()
	w.poke()
}

// due is when the pending changes' cycle may start; ok is false when none
// is pending.
func (w *Watch) due() (time.Time, bool) {
	if w.pending.Empty() {
		return time.Time{}, false
	}
	debounce, minInterval := w.debounce(), w.minInterval()
	at := w.last.Add(debounce)
	if latest := w.first.Add(max(debounce, minInterval)); latest.Before(at) {
		at = latest
	}
	if !w.lastStart.IsZero() {
		if cap := w.lastStart.Add(minInterval); cap.After(at) {
			at = cap
		}
	}
	return at, true
}

func (w *Watch) debounce() time.Duration {
	if w.Debounce > 0 {
		return w.Debounce
	}
	return DefaultDebounce
}

func (w *Watch) minInterval() time.Duration {
	if w.MinInterval > 0 {
		return w.MinInterval
	}
	return DefaultMinInterval
}

// absorb drops the pending changes: a full cycle is starting, and it sees them.
func (w *Watch) absorb() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for range w.changes {
		if w.Coalesced != nil {
			w.Coalesced()
		}
	}
	w.pending, w.changes, w.fullQueued = Scope{}, 0, false
}

// loop starts the targeted cycles, on ctx, until stop is closed.
func (s *Scheduler) loop(ctx context.Context, stop <-chan struct{}) {
	w := s.Watch
	w.init()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		w.mu.Lock()
		at, pending := w.due()
		full := w.fullQueued
		w.mu.Unlock()
		wait := time.Hour
		switch {
		case full:
			wait = 0
		case pending:
			wait = max(0, at.Sub(s.now()))
		}
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-stop:
				return
			case <-w.wake:
			case <-timer.C:
			}
			continue
		}
		select {
		case <-stop:
			return
		default:
		}
		if full {
			w.mu.Lock()
			w.fullQueued = false
			w.mu.Unlock()
			s.Tick(ctx) // the scheduled cycle a targeted one held up
			continue
		}
		if !s.busy.CompareAndSwap(false, true) {
			// A scheduled cycle runs: its end pokes the loop, and the
			// pending changes become its follow-up.
			select {
			case <-stop:
				return
			case <-w.wake:
			}
			continue
		}
		s.targeted(ctx)
	}
}

// targeted runs one targeted cycle over what is pending; busy is held.
func (s *Scheduler) targeted(ctx context.Context) {
	w := s.Watch
	log := s.logger()
	w.mu.Lock()
	scope, why := w.pending, append([]string(nil), w.why...)
	w.pending, w.why, w.changes = Scope{}, nil, 0
	w.lastStart = s.now()
	w.targetedBusy = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.targetedBusy = false
		w.mu.Unlock()
		s.busy.Store(false)
		w.poke()
	}()
	log.Info("watch: cycle started", "scope", scope.String(), "targets", why)
	start := s.now()
	run := s.guard(start, func() report.Run { return w.Cycle(ctx, scope) })
	if ctx.Err() != nil {
		log.Warn("watch: cycle cut short by shutdown: not published", "scope", scope.String())
		return
	}
	c := run.Counts()
	log.Info("watch: cycle finished", "scope", scope.String(), "result", run.Result(), "exit", run.ExitCode(), "seconds", s.now().Sub(start).Seconds(),
		"pass", c.Pass, "fail", c.Fail, "inconclusive", c.Inconclusive, "error", c.Error)
	if s.Publish != nil {
		s.Publish(ctx, run, s.now())
	}
}

// queueFull asks for a scheduled cycle after the targeted one running now;
// false when no targeted cycle is running (the tick is skipped as before).
func (w *Watch) queueFull() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.targetedBusy {
		return false
	}
	w.fullQueued = true
	return true
}

// guard runs a cycle and turns a panic into a could-not-run: a crashed run
// is reported as one, never lost and never a pass.
func (s *Scheduler) guard(start time.Time, cycle func() report.Run) (run report.Run) {
	defer func() {
		if r := recover(); r != nil {
			s.logger().Error("run panicked", "panic", r)
			cnr := &CouldNotRun{Target: "sandprobe", Reason: ReasonCrashed, Detail: fmt.Sprintf("the run panicked: %v", r)}
			run = report.Run{StartedAt: start.UTC(), Seconds: s.now().Sub(start).Seconds(), Findings: []report.Finding{cnr.Finding()}}
		}
	}()
	return cycle()
}
