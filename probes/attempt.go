package probes

import (
	"context"
	"fmt"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// What an attempt does (Attempt.Op).
const (
	OpDial    = ""        // connect (directly or through the proxy); the default
	OpResolve = "resolve" // resolve the name through the sandbox's resolver only
	OpQuery   = "query"   // ask one DNS server directly (Server, over Network)
	OpFront   = "front"   // through the proxy to Host, then a ClientHello and a Host header for SNI
	OpHello   = "hello"   // directly to Host, a ClientHello for SNI (a control's view of a front)
)

// Attempt is one planned network attempt: what to reach, how, and what the
// check expects of it. The probe plans them from the policy (PlanEgress); a
// control vantage outside the sandbox dials the same ones (RunAttempts), so
// both sides name every destination alike.
type Attempt struct {
	Check    string // the check it belongs to: egress.must-fail, egress.metadata, …
	Subject  string // how findings name it: "example.com:443 via proxy"
	Host     string // a name or an address
	Port     int
	Scheme   string // https, http or tcp
	ViaProxy bool
	Expect   string // a pinned failure class (direct must-fail targets only)
	Op       string // OpDial, OpResolve, OpQuery, OpFront or OpHello
	// Server and Network are where an OpQuery goes: "10.0.0.1:53", udp or tcp.
	Server, Network string
	// AllAddrs dials every address the name resolves to: a must-fail name is
	// only closed if each of its A and AAAA addresses is.
	AllAddrs bool
	// Addresses are known without DNS (the policy lists them): dialled
	// besides what the name resolves to, and alone when it does not.
	Addresses []string
	// SNI is the name an OpFront attempt puts in its ClientHello and Host
	// header, in a tunnel the proxy opened for Host.
	SNI string
	// role says what a DNS attempt stands for (dnsRandom, dnsCanary, dnsName).
	role string
}

// MustAnswer reports whether the attempt has to get through (an allowance).
func (a Attempt) MustAnswer() bool { return a.Check == checkAllowed }

// direct reports whether the attempt's op is one the network's own rules
// stop on its way out: a dial, a UDP datagram or a query to an outside
// DNS server (whether it goes through the proxy is ViaProxy's to say). A
// lookup through the sandbox's resolver, a front and a hello are judged
// by what answers them.
func (a Attempt) direct() bool {
	return a.Op == OpDial || a.Op == OpUDP || (a.Op == OpQuery && a.Check == checkDNSBypass)
}

// Result is an attempt's classified outcome.
type Result struct {
	Class    string   // a policy.Verdict* value
	Detail   string   // what happened, in words (errno, status line, TLS version)
	Answered []string // addresses (or names) that answered
	// Evidence is what the report carries: timing, errno, who stopped it.
	Evidence result.Attempt
	// Interrupted is an attempt that ended with the run (the probe was
	// stopped), not on its own: whatever class it got, nothing was stopped.
	Interrupted bool
	// Unresolved is a dial whose name did not resolve and whose addresses
	// are not known otherwise: no address was dialled.
	Unresolved bool
	// Unproven is an attempt that never reached what it tests (a fronting
	// tunnel whose allowed host did not answer first): nothing was tested.
	Unproven bool
}

// Took is how long the attempt waited for its outcome.
func (r Result) Took() time.Duration { return time.Duration(r.Evidence.Waited * float64(time.Second)) }

// RunOptions bound one run of attempts.
type RunOptions struct {
	// Concurrency is how many attempts run at once; 0 sizes the pool to
	// the attempts (AutoConcurrency), so a healthy run takes one timeout.
	Concurrency int
	// Timeout is each attempt's own budget, counted from the moment it
	// starts, not from the start of the run: an attempt queued behind
	// others still gets all of it.
	Timeout time.Duration
}

// OptionsFor reads the run options from the policy.
func OptionsFor(e policy.Egress) RunOptions {
	return RunOptions{Concurrency: e.Concurrency, Timeout: e.Timeout.Duration}
}

// MaxAutoConcurrency bounds the pool AutoConcurrency sizes: enough for
// every attempt of the policies seen (a few dozen must-fail targets on
// two ports, the metadata set, the allowances through the proxy) in one
// wave, and a cap on the sockets a probe holds at once.
const MaxAutoConcurrency = 512

// fdsPerAttempt is what one attempt may hold open at once: its socket and
// a resolver query's. fdReserve is left to the rest of the probe.
const fdsPerAttempt, fdReserve = 2, 64

// AutoConcurrency is the pool for n attempts when the policy sets no
// spec.egress.concurrency: every attempt at once, so every attempt starts
// with the run and a healthy run takes one timeout, not one per wave —
// bounded by MaxAutoConcurrency and by the open-file limit (limit) the
// sockets must fit in (0: unknown, not a bound).
func AutoConcurrency(n int, limit uint64) int {
	w := min(max(1, n), MaxAutoConcurrency)
	if limit > 0 {
		fit := 1
		if limit > fdReserve+fdsPerAttempt {
			fit = int(min(limit-fdReserve, uint64(MaxAutoConcurrency)*fdsPerAttempt) / fdsPerAttempt)
		}
		w = min(w, fit)
	}
	return w
}

// width is the pool for n attempts: the policy's concurrency, or sized to
// the attempts and this process's open-file limit.
func (o RunOptions) width(n int) int {
	if o.Concurrency > 0 {
		return o.Concurrency
	}
	return AutoConcurrency(n, openFileLimit())
}

// Bound is the longest n attempts can take when each uses its whole
// timeout: ceil(n / width) waves of Timeout — one wave by default.
func (o RunOptions) Bound(n int) time.Duration {
	w := o.width(n)
	waves := (n + w - 1) / w
	return time.Duration(waves) * o.Timeout
}

// boundGrace is what the run may overrun its computed bound by (scheduling,
// a last TLS close) before attempts still waiting to start are given up. It
// is at least one attempt's timeout: on a loaded node under gVisor the
// goroutines of a single wave were seen to start 1.0–1.3 s late (make e2e,
// 2 cores shared), and with a grace of 1 s a 2 s attempt starting that late
// was "not attempted" — an error for what was only a slow start.
func boundGrace(bound, timeout time.Duration) time.Duration {
	return max(time.Second, timeout, bound/10)
}

// RunAttempts makes every attempt, at most Concurrency at once, each with
// its whole Timeout from the moment it starts. The run as a whole is bounded
// by Bound(len(plan)) plus a grace; an attempt that could not start before
// that, or before ctx ended, is an error "not attempted" — never a failure
// class, since nothing was stopped. results[i] belongs to plan[i].
func (c *NetClient) RunAttempts(ctx context.Context, plan []Attempt, o RunOptions) []Result {
	results := make([]Result, len(plan))
	bound := o.Bound(len(plan))
	runCtx, cancel := context.WithTimeout(ctx, bound+boundGrace(bound, o.Timeout))
	defer cancel()
	start := time.Now()
	p := pool.New().WithMaxGoroutines(o.width(len(plan)))
	for i, a := range plan {
		p.Go(func() {
			started := time.Since(start)
			if why := cannotStart(runCtx, o.Timeout); why != "" {
				results[i] = notAttempted(why, started, o.Timeout)
				return
			}
			actx, acancel := context.WithTimeout(runCtx, o.Timeout)
			defer acancel()
			t0 := time.Now()
			r := c.try(actx, a)
			waited := time.Since(t0)
			if runCtx.Err() != nil && r.Class != policy.VerdictAnswered {
				// It ended with the run, not on its own: nothing was stopped.
				r = Result{Class: policy.VerdictError, Interrupted: true,
					Detail: fmt.Sprintf("cut short: %s after %s of its %s timeout", stopReason(runCtx), waited.Round(time.Millisecond), o.Timeout)}
			}
			r.Evidence.Attempted = true
			r.Evidence.Started = started.Seconds()
			r.Evidence.Waited = waited.Seconds()
			r.Evidence.Timeout = o.Timeout.Seconds()
			results[i] = r
		})
	}
	p.Wait()
	return results
}

// cannotStart says why an attempt may not start now: the run has ended, or
// it has less time left than the attempt's whole timeout.
func cannotStart(ctx context.Context, timeout time.Duration) string {
	if ctx.Err() != nil {
		return stopReason(ctx)
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		return fmt.Sprintf("less than its %s timeout was left of the run", timeout)
	}
	return ""
}

func stopReason(ctx context.Context) string {
	if ctx.Err() == context.Canceled {
		return "the probe was stopped"
	}
	return "the egress run's time was up"
}

func notAttempted(why string, at, timeout time.Duration) Result {
	return Result{
		Class:    policy.VerdictError,
		Detail:   fmt.Sprintf("not attempted: %s (+%s)", why, at.Round(time.Millisecond)),
		Evidence: result.Attempt{Attempted: false, Started: at.Seconds(), Timeout: timeout.Seconds()},
	}
}

// EgressBound is the longest the probe's egress run can take for this
// policy: every attempt using its whole timeout, in waves of Concurrency,
// plus the grace RunAttempts allows. The kube runner's per-run deadline is
// built from it.
func EgressBound(e policy.Egress) time.Duration {
	plan, _ := PlanEgress(e)
	o := OptionsFor(e)
	bound := o.Bound(len(plan))
	return bound + boundGrace(bound, o.Timeout)
}

// EgressWarnings are what `validate` says about the egress run: a probe
// deadline too short for the run's bound leaves attempts unmade.
func EgressWarnings(p *policy.Policy) []string {
	plan, _ := PlanEgress(p.Spec.Egress)
	o := OptionsFor(p.Spec.Egress)
	need := EgressBound(p.Spec.Egress)
	if d := p.Spec.Probe.Deadline.Duration; d > 0 && need > d {
		return []string{fmt.Sprintf("spec.probe.deadline: %s is shorter than the egress run can take (%d attempts, %d at a time, %s each: up to %s), so the probe would be killed before its verdicts: raise it, or spec.egress.concurrency",
			d, len(plan), o.width(len(plan)), o.Timeout, need)}
	}
	return nil
}
