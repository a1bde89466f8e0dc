package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/sandprobe/sandprobe/report"
)

// DefaultSchedule matches the CronJob users run: every thirty minutes.
const DefaultSchedule = "*/30 * * * *"

// ParseSchedule parses a cron schedule: five fields, or six with seconds
// first, or a descriptor such as "@hourly" or "@every 1s"; a CRON_TZ=
// prefix picks the time zone.
func ParseSchedule(spec string) (cron.Schedule, error) {
	p := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	s, err := p.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", spec, err)
	}
	return s, nil
}

// Scheduler runs cycles on a schedule, one at a time. A tick that finds the
// previous run still going is skipped and counted, never queued: a queue
// behind a hung backend would only grow, and the skip count is the signal.
type Scheduler struct {
	// Cycle runs one full cycle (probe and drift). It must return soon after
	// ctx is cancelled, having cleaned up what it launched.
	Cycle func(ctx context.Context) report.Run
	// Publish receives every run that finished, with the time it finished.
	// A run cut short by shutdown is not published: a rollout must not page.
	Publish func(ctx context.Context, run report.Run, finished time.Time)
	// Skipped is called for every tick skipped because a run was going.
	Skipped func()
	// Grace is how long shutdown lets a run in flight finish before it
	// cancels the run; after the cancel it waits as long again for the run
	// to clean up.
	Grace time.Duration
	// Watch, when set, also starts cycles of a narrow scope when something
	// changed (serve --watch), one at a time with the scheduled ones.
	Watch  *Watch
	Logger *slog.Logger
	Now    func() time.Time

	busy, stopping atomic.Bool
}

// ErrRunDidNotStop is returned when a cancelled run ignored its cancellation.
var ErrRunDidNotStop = errors.New("the run in flight did not stop after it was cancelled")

// Run schedules cycles until ctx is done (SIGTERM), with one run at once if
// runAtStart. Then it stops scheduling, gives a run in flight Grace to
// finish, cancels it if it is still going, and returns once it has.
func (s *Scheduler) Run(ctx context.Context, sched cron.Schedule, runAtStart bool) error {
	log := s.logger()
	// Runs must outlive the signal by the grace period, so their context is
	// not ctx but one that shutdown cancels on its own terms.
	runCtx, cancelRuns := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRuns()

	c := cron.New(cron.WithLocation(time.Local))
	c.Schedule(sched, cron.FuncJob(func() { s.Tick(runCtx) }))
	c.Start()
	var startRun sync.WaitGroup
	if runAtStart {
		startRun.Go(func() { s.Tick(runCtx) })
	}
	if s.Watch != nil {
		// The loop starts nothing once ctx is done, but a targeted cycle
		// in flight runs on runCtx: it gets the grace like any other run.
		startRun.Go(func() { s.loop(runCtx, ctx.Done()) })
	}
	log.Info("schedule started", "next", sched.Next(s.now()).Format(time.RFC3339), "runAtStart", runAtStart)

	<-ctx.Done()
	s.stopping.Store(true)
	stopped := c.Stop() // no new ticks; done once the ticks in flight return
	done := make(chan struct{})
	// Only waits; Tick recovers its own panics.
	go func() {
		<-stopped.Done()
		startRun.Wait()
		close(done)
	}()
	if s.busy.Load() {
		log.Info("shutting down: waiting for the run in flight", "grace", s.Grace)
	}
	select {
	case <-done:
		log.Info("schedule stopped")
		return nil
	case <-time.After(s.Grace):
	}
	log.Warn("grace period over: cancelling the run in flight", "grace", s.Grace)
	cancelRuns()
	select {
	case <-done:
		log.Info("schedule stopped: the run in flight was cancelled and cleaned up")
		return nil
	case <-time.After(s.Grace):
		return ErrRunDidNotStop
	}
}

// Tick runs one cycle now unless one is going; it reports whether it ran.
func (s *Scheduler) Tick(ctx context.Context) bool {
	log := s.logger()
	if s.stopping.Load() {
		return false // shutting down: start nothing new
	}
	if !s.busy.CompareAndSwap(false, true) {
		if s.Watch != nil && s.Watch.queueFull() {
			log.Info("a scheduled run waits for the targeted cycle in flight")
			return false
		}
		log.Warn("skipping a scheduled run: the previous run is still going")
		if s.Skipped != nil {
			s.Skipped()
		}
		return false
	}
	defer func() {
		s.busy.Store(false)
		if s.Watch != nil {
			s.Watch.poke()
		}
	}()
	if s.Watch != nil {
		s.Watch.absorb() // the changes seen so far: this run sees them
	}
	log.Info("run started")
	run := s.guard(s.now(), func() report.Run { return s.Cycle(ctx) })
	finished := s.now()
	if ctx.Err() != nil {
		log.Warn("run cut short by shutdown: not published", "seconds", run.Seconds)
		return true
	}
	c := run.Counts()
	log.Info("run finished", "result", run.Result(), "exit", run.ExitCode(), "seconds", run.Seconds,
		"pass", c.Pass, "fail", c.Fail, "inconclusive", c.Inconclusive, "error", c.Error, "skip", c.Skip)
	if s.Publish != nil {
		s.Publish(ctx, run, finished)
	}
	return true
}

// Running reports whether a run is in flight.
func (s *Scheduler) Running() bool { return s.busy.Load() }

func (s *Scheduler) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Scheduler) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.New(slog.DiscardHandler)
}
