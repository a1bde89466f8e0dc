package probes

import (
	"context"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// blackHole is a loopback port that drops every SYN, the way a DROP rule
// does: a listener with a backlog of 0 whose one queue slot is taken by a
// connection nobody accepts. Unprivileged, and it never leaves loopback.
func blackHole(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	filler, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err != nil {
		t.Fatalf("fill the black hole's queue: %v", err)
	}
	t.Cleanup(func() { filler.Close() })
	// The queue is full once a second connect gets no answer.
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 30*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("the black hole answered")
	}
	return port
}

// openPort is a loopback listener that accepts everything and speaks
// first (a banner, as SSH does): a target that must fail but answers.
func openPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("SSH-2.0-sandprobe-test\r\n"))
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// TestEveryAttemptGetsItsTimeout breaks item 1 of the "no vacuous verdict"
// rule the way it broke in practice: an open metadata stand-in queued
// behind many dropped must-fail targets. Under one shared deadline it was
// never dialled, got "timeout" and passed; now it is dialled with its whole
// timeout and fails as answered.
func TestEveryAttemptGetsItsTimeout(t *testing.T) {
	const drops, conc = 16, 4
	timeout := 300 * time.Millisecond
	var ips []string
	for range drops {
		ips = append(ips, fmt.Sprintf(`"127.0.0.1:%d"`, blackHole(t)))
	}
	open := openPort(t)
	p := mustPolicy(t, fmt.Sprintf(`
  egress:
    mustFail: {ips: [%s]}
    metadata: {address: 127.0.0.1, port: %d}
    dns: {arbitraryNames: allow}
    timeout: %s
    concurrency: %d
`, strings.Join(ips, ", "), open, timeout, conc))
	env := &Env{Policy: p}
	start := time.Now()
	fs := runEgress(context.Background(), env)
	wall := time.Since(start)

	meta := fs[checkMetadata]
	if len(meta) != 1 || meta[0].Status != result.Fail || meta[0].Class != policy.VerdictAnswered || meta[0].Fix == "" {
		t.Fatalf("open metadata stand-in behind %d drops: %+v", drops, meta)
	}
	if ev := meta[0].Attempt; ev == nil || !ev.Attempted || ev.Started < float64(drops/conc-1)*timeout.Seconds() {
		t.Errorf("metadata attempt evidence %+v: it should have started after the drops ahead of it", ev)
	}
	must := fs[checkMustFail]
	if len(must) != drops {
		t.Fatalf("%d must-fail findings, want %d", len(must), drops)
	}
	for _, f := range must {
		ev := f.Attempt
		if f.Status != result.Pass || f.Class != policy.VerdictTimeout || ev == nil || !ev.Attempted {
			t.Errorf("%s: %s/%s %+v", f.Name(), f.Status, f.Class, ev)
			continue
		}
		if ev.Waited < 0.9*timeout.Seconds() || ev.StoppedBy != result.StoppedByNetwork || ev.Errno != "ETIMEDOUT" {
			t.Errorf("%s: waited %.3fs of %s, stopped by %q (%s): a drop waits its whole timeout", f.Name(), ev.Waited, timeout, ev.StoppedBy, ev.Errno)
		}
	}
	bound := OptionsFor(p.Spec.Egress).Bound(drops + 1)
	if wall > bound*13/10 {
		t.Errorf("wall %s, bound %s", wall, bound)
	}
}

// TestNotAttemptedIsAnError: attempts the run could not start (the probe
// was stopped) are errors, never a failure class that passes.
func TestNotAttemptedIsAnError(t *testing.T) {
	const n = 8
	var plan []Attempt
	for range n {
		port := blackHole(t)
		plan = append(plan, Attempt{Check: checkMustFail, Subject: fmt.Sprintf("127.0.0.1:%d", port), Host: "127.0.0.1", Port: port, Scheme: "tcp", AllAddrs: true})
	}
	c, err := NewNetClient(policy.Egress{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(150*time.Millisecond, cancel) // SIGTERM while the first wave waits
	results := c.RunAttempts(ctx, plan, RunOptions{Concurrency: 2, Timeout: time.Second})
	cut, skipped := 0, 0
	for i, r := range results {
		f := judge(plan[i], r, policy.Egress{})
		if f.Status != result.Error || f.Fix == "" {
			t.Errorf("%s: %s (%s), want an error: nothing was stopped", f.Name(), f.Status, f.Actual)
		}
		switch {
		case r.Evidence.Attempted && strings.Contains(f.Actual, "cut short"):
			cut++
		case !r.Evidence.Attempted && strings.Contains(f.Actual, "not attempted"):
			skipped++
		}
	}
	if cut != 2 || skipped != n-2 {
		t.Errorf("%d cut short, %d not attempted; want 2 and %d", cut, skipped, n-2)
	}
	// A run that is left less time than one attempt's timeout starts nothing.
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	for i, r := range c.RunAttempts(short, plan[:2], RunOptions{Concurrency: 2, Timeout: time.Second}) {
		if r.Evidence.Attempted || r.Class != policy.VerdictError || !strings.Contains(r.Detail, "less than its 1s timeout") {
			t.Errorf("%s: %s %q, want not attempted", plan[i].Subject, r.Class, r.Detail)
		}
	}
}

func TestBound(t *testing.T) {
	for _, c := range []struct {
		n, conc int
		want    time.Duration
	}{
		{0, 4, 0}, {1, 4, time.Second}, {4, 4, time.Second}, {5, 4, 2 * time.Second}, {36, 4, 9 * time.Second}, {36, 64, time.Second}, {3, 0, time.Second}, {100, 0, time.Second},
	} {
		if got := (RunOptions{Concurrency: c.conc, Timeout: time.Second}).Bound(c.n); got != c.want {
			t.Errorf("Bound(%d) at concurrency %d: %s, want %s", c.n, c.conc, got, c.want)
		}
	}
}

// TestAutoConcurrency: without spec.egress.concurrency the pool holds every
// attempt, up to MaxAutoConcurrency and what the open-file limit leaves
// (two descriptors an attempt, 64 kept for the rest of the probe).
func TestAutoConcurrency(t *testing.T) {
	for _, c := range []struct {
		n     int
		limit uint64
		want  int
	}{
		{0, 0, 1}, {58, 0, 58}, {58, 1 << 20, 58}, {2000, 0, MaxAutoConcurrency}, {2000, 1 << 20, MaxAutoConcurrency},
		{2000, 1024, 480}, {100, 164, 50}, {100, 50, 1},
	} {
		if got := AutoConcurrency(c.n, c.limit); got != c.want {
			t.Errorf("AutoConcurrency(%d, limit %d) = %d, want %d", c.n, c.limit, got, c.want)
		}
	}
}

// TestDefaultRunTakesOneTimeout breaks item 13 of issue 23 as it was
// measured: more dropped destinations than the old default pool of 64
// took two timeouts (a healthy run at 2.4 × T). With the pool sized to the
// attempts, all of them start with the run and it takes about one T, each
// still waiting its whole timeout.
func TestDefaultRunTakesOneTimeout(t *testing.T) {
	const drops = 80
	timeout := 400 * time.Millisecond
	var plan []Attempt
	for range drops {
		port := blackHole(t)
		plan = append(plan, Attempt{Check: checkMustFail, Subject: fmt.Sprintf("127.0.0.1:%d", port), Host: "127.0.0.1", Port: port, Scheme: "tcp", AllAddrs: true})
	}
	c, err := NewNetClient(policy.Egress{})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t, "") // no spec.egress.concurrency: the default
	o := OptionsFor(p.Spec.Egress)
	o.Timeout = timeout
	if b := o.Bound(drops); b != timeout {
		t.Fatalf("Bound(%d) at the default = %s, want one timeout (%s)", drops, b, timeout)
	}
	start := time.Now()
	results := c.RunAttempts(context.Background(), plan, o)
	wall := time.Since(start)
	for i, r := range results {
		if r.Class != policy.VerdictTimeout || !r.Evidence.Attempted || r.Evidence.Started > timeout.Seconds()/2 || r.Evidence.Waited < 0.9*timeout.Seconds() {
			t.Errorf("%s: %s, started +%.3fs, waited %.3fs: every attempt starts with the run and waits its whole timeout", plan[i].Subject, r.Class, r.Evidence.Started, r.Evidence.Waited)
			break
		}
	}
	t.Logf("%d dropped attempts at the default pool: %s (T = %s, %.2f T)", drops, wall.Round(time.Millisecond), timeout, wall.Seconds()/timeout.Seconds())
	if wall > timeout*13/10 {
		t.Errorf("wall %s, want ≤ 1.3 T = %s", wall, timeout*13/10)
	}
}
