package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/page"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// slowBackend is an in-process runner.Backend for the scheduling logic: the
// first run answers at once, later ones hold until released (or cancelled).
type slowBackend struct {
	calls     atomic.Int32
	started   chan int // the call number, when a call starts
	release   chan struct{}
	cancelled atomic.Int32
}

func newSlowBackend() *slowBackend {
	return &slowBackend{started: make(chan int, 100), release: make(chan struct{})}
}

func (b *slowBackend) Run(ctx context.Context, spec runner.ProbeSpec) ([]report.ProbeResult, error) {
	n := int(b.calls.Add(1))
	b.started <- n
	if n > 1 {
		select {
		case <-b.release:
		case <-ctx.Done():
			b.cancelled.Add(1)
			return nil, ctx.Err()
		}
	}
	return []report.ProbeResult{{
		Schema: report.ProbeResultSchema, Target: "node/fake-1", Where: report.Location{Node: "fake-1"}, Nonce: spec.Nonce, Policy: spec.Policy.Metadata.Name,
		Findings: []report.Finding{
			{Check: "identity.uid", Status: report.Pass},
			{Check: "fs.root-readonly", Subject: "/", Status: report.Pass},
		},
	}}, nil
}

// startServe runs serve in-process with a fake backend on a loopback port.
func startServe(t *testing.T, be runner.Backend, schedule string, runAtStart bool, grace time.Duration) (base string, sigterm func() error) {
	t.Helper()
	p, raw, err := policy.LoadFile(localPolicy)
	if err != nil {
		t.Fatal(err)
	}
	cyc := &cycle{policy: p, raw: raw, backendName: "fake", backend: be}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := newServer(cyc.run, &outputs{policy: p, history: page.NewHistory(0)}, grace, logger)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := runner.ParseSchedule(schedule)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- srv.serve(ctx, ln, sched, runAtStart) }()
	var once sync.Once
	var serveErr error
	sigterm = func() error {
		once.Do(func() {
			cancel()
			select {
			case serveErr = <-errc:
			case <-time.After(grace*2 + 10*time.Second):
				t.Fatal("serve did not return after SIGTERM")
			}
		})
		return serveErr
	}
	t.Cleanup(func() { sigterm() })
	return "http://" + ln.Addr().String(), sigterm
}

// testWriter sends logs to t.Log, shown only when a test fails.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitFor polls cond every 20 ms until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeScrapeWhileRunInFlight: while a scheduled run hangs, /metrics,
// /healthz and /report.json answer at once with the last finished run, the
// ticks that find it still going are skipped and counted, and the run is
// published when it ends.
func TestServeScrapeWhileRunInFlight(t *testing.T) {
	be := newSlowBackend()
	base, sigterm := startServe(t, be, "@every 1s", true, 5*time.Second)

	waitFor(t, 5*time.Second, "the first run's report", func() bool {
		code, _ := get(t, base+"/report.json")
		return code == http.StatusOK
	})
	for n := range be.started {
		if n == 2 {
			break // the first scheduled run is in flight and hangs
		}
	}

	var slowest time.Duration
	var got map[string]float64
	for range 20 {
		start := time.Now()
		got = httpSamples(t, base+"/metrics")
		slowest = max(slowest, time.Since(start))
	}
	t.Logf("20 scrapes while a run is in flight: slowest %v", slowest)
	if slowest > time.Second {
		t.Errorf("a scrape during a run took %v", slowest)
	}
	for k, want := range map[string]float64{
		"sandprobe_up": 1,
		`sandprobe_check_success{check="identity.uid",namespace="",node="fake-1",severity="high",target=""}`:        1,
		`sandprobe_check_success{check="fs.root-readonly",namespace="",node="fake-1",severity="medium",target="/"}`: 1,
		`sandprobe_runs_total{result="pass"}`:                                          1,
		`sandprobe_info{build_date="",commit="",policy="local-sandbox",version="dev"}`: 1,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
	if code, body := get(t, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	code, body := get(t, base+"/report.json")
	var run report.Run
	if code != http.StatusOK || json.Unmarshal([]byte(body), &run) != nil || run.Policy != "local-sandbox" || len(run.Findings) != 2 {
		t.Errorf("/report.json during a run: %d %s", code, body)
	}

	waitFor(t, 4*time.Second, "a skipped tick to be counted", func() bool {
		return httpSamples(t, base+"/metrics")["sandprobe_runs_skipped_total"] >= 1
	})
	if be.calls.Load() != 2 {
		t.Errorf("%d backend calls while one hung; skipped ticks must not start runs", be.calls.Load())
	}
	close(be.release)
	waitFor(t, 4*time.Second, "the hung run to be published", func() bool {
		return httpSamples(t, base+"/metrics")[`sandprobe_runs_total{result="pass"}`] >= 2
	})
	if err := sigterm(); err != nil {
		t.Fatalf("serve after SIGTERM: %v", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("still serving after shutdown")
	}
}

// TestServeBeforeFirstRun: /report.json is 503 until a run finishes, and
// /metrics has no verdict (no sandprobe_up) rather than a false one.
func TestServeBeforeFirstRun(t *testing.T) {
	base, sigterm := startServe(t, newSlowBackend(), "@every 1h", false, time.Second)
	if code, _ := get(t, base+"/report.json"); code != http.StatusServiceUnavailable {
		t.Errorf("/report.json before the first run: %d, want 503", code)
	}
	got := httpSamples(t, base+"/metrics")
	if _, ok := got["sandprobe_up"]; ok {
		t.Error("sandprobe_up exposed before any run")
	}
	if v, ok := got[`sandprobe_runs_total{result="pass"}`]; !ok || v != 0 {
		t.Errorf("runs_total should start at 0: %v %v", v, ok)
	}
	if _, ok := got["process_start_time_seconds"]; !ok {
		t.Error("serve should expose its process metrics")
	}
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	if err := sigterm(); err != nil {
		t.Fatal(err)
	}
}

// TestServeSIGTERMCancelsHungRun: a run still hanging when the grace period
// ends is cancelled; serve returns promptly and publishes nothing of it.
func TestServeSIGTERMCancelsHungRun(t *testing.T) {
	be := newSlowBackend()
	be.calls.Store(1) // every call hangs
	base, sigterm := startServe(t, be, "@every 1h", true, 300*time.Millisecond)
	<-be.started
	start := time.Now()
	if err := sigterm(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("SIGTERM to exit with a hung run, grace 300ms: %v", took)
	if took > 2*time.Second || be.cancelled.Load() != 1 {
		t.Fatalf("shutdown took %v, backend cancelled %d times; want ≤ 2s and 1", took, be.cancelled.Load())
	}
	if _, err := http.Get(base + "/report.json"); err == nil {
		t.Error("still serving after shutdown")
	}
}

// TestServeBinaryLocalBackend runs the real binary's serve with the local
// backend on a per-second schedule, scrapes it, and stops it with SIGTERM.
func TestServeBinaryLocalBackend(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.Binary(t)
	metricsFile := filepath.Join(t.TempDir(), "sandprobe.prom")
	cmd := exec.Command(bin, "serve", "--policy", localPolicy, "--schedule", "* * * * * *",
		"--listen", "127.0.0.1:0", "--log-format", "json", "--metrics-file", metricsFile)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	addr := make(chan string, 1)
	var logs strings.Builder
	var logsMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logsMu.Lock()
			logs.WriteString(sc.Text() + "\n")
			logsMu.Unlock()
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "listening" {
				addr <- line.Addr
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
		if t.Failed() {
			logsMu.Lock()
			t.Logf("serve logs:\n%s", logs.String())
			logsMu.Unlock()
		}
	})
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-exited:
		t.Fatalf("serve exited before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start listening")
	}

	waitFor(t, 10*time.Second, "two scheduled runs", func() bool {
		return httpSamples(t, base+"/metrics")[`sandprobe_runs_total{result="pass"}`] >= 2
	})
	checkServedRun(t, base)

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("serve exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("serve did not exit after SIGTERM")
	}
	t.Logf("SIGTERM to exit: %v", time.Since(start))
	promtoolCheck(t, metricsFile)
	inFile := fileSamples(t, metricsFile)
	if inFile["sandprobe_up"] != 1 {
		t.Error("the metrics file does not hold the last run")
	}
	for k := range inFile {
		if !strings.HasPrefix(k, "sandprobe_") {
			t.Errorf("the metrics file holds %s: node_exporter would reject it as a duplicate of its own", k)
		}
	}
}

// checkServedRun: serve's /metrics and /report.json show a passing run of
// the local sandbox, a recent one on a per-second schedule.
func checkServedRun(t *testing.T, base string) {
	t.Helper()
	got := httpSamples(t, base+"/metrics")
	for k, want := range map[string]float64{
		"sandprobe_up": 1,
		`sandprobe_check_success{check="identity.uid",namespace="",node="local/sandbox",severity="high",target=""}`:        1,
		`sandprobe_check_success{check="fs.root-readonly",namespace="",node="local/sandbox",severity="medium",target="/"}`: 1,
		`sandprobe_runs_total{result="error"}`: 0,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
	if age := float64(time.Now().Unix()) - got["sandprobe_last_success_timestamp_seconds"]; age > 5 {
		t.Errorf("last success %v s ago on a per-second schedule", age)
	}
	code, body := get(t, base+"/report.json")
	var run report.Run
	if code != http.StatusOK || json.Unmarshal([]byte(body), &run) != nil || run.Policy != "local-sandbox" || run.ExitCode() != 0 {
		t.Errorf("/report.json: %d %.300s", code, body)
	}
}

// TestServePage: / is the egress page of the last run, sent with a
// Content-Security-Policy that lets it load nothing; before the first run
// has finished it says so (503, Retry-After) instead of showing an empty
// page that could pass for a clean one.
func TestServePage(t *testing.T) {
	t.Run("before the first run", func(t *testing.T) {
		base, _ := startServe(t, newSlowBackend(), "@every 1h", false, time.Second)
		resp, err := http.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "NO RUN YET") {
			t.Fatalf("before any run: %d %q", resp.StatusCode, body)
		}
	})
	t.Run("after a run", func(t *testing.T) {
		base, _ := startServe(t, newSlowBackend(), "@every 1h", true, time.Second)
		waitFor(t, 5*time.Second, "the first run's report", func() bool {
			code, _ := get(t, base+"/report.json")
			return code == http.StatusOK
		})
		resp, err := http.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("/: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("Content-Security-Policy %q", csp)
		}
		for _, want := range []string{"sandprobe egress page: local-sandbox", `data-check="identity.uid"`, `data-target="node/fake-1"`, `href="/report.json"`, "from the last 1 run."} {
			if !strings.Contains(string(body), want) {
				t.Errorf("the page lacks %q", want)
			}
		}
	})
}

// TestHTMLFlagBadInput: a page or report that cannot be written, a file
// that cannot be read, or a history that keeps nothing, is found before
// anything runs: one line, exit 2, "FLAG FILE: message" (or "FILE:
// message" for the policy, as its problems read).
func TestHTMLFlagBadInput(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args   []string
		stderr string
	}{
		{[]string{"run", "--policy", localPolicy, "--html", filepath.Join(dir, "missing", "page.html")}, "sandprobe run: --html " + filepath.Join(dir, "missing", "page.html") + ": cannot write: no such file or directory"},
		{[]string{"run", "--policy", localPolicy, "--html", dir}, "sandprobe run: --html " + dir + ": is a directory"},
		{[]string{"serve", "--policy", localPolicy, "--html", filepath.Join(dir, "missing", "page.html")}, "sandprobe serve: --html " + filepath.Join(dir, "missing", "page.html") + ": cannot write"},
		{[]string{"serve", "--policy", localPolicy, "--history", "0"}, "sandprobe serve: --history: want 1 to 10000 runs, got 0"},
		{[]string{"drift", "--policy", localPolicy, "-f", "testdata/would-refuse-pods.yaml", "--html", dir}, "sandprobe drift: --html " + dir + ": is a directory"},
		{[]string{"drift", "--policy", localPolicy, "-f", "testdata/would-refuse-pods.yaml", "--json", filepath.Join(dir, "missing", "r.json")}, "sandprobe drift: --json " + filepath.Join(dir, "missing", "r.json") + ": cannot write: no such file or directory"},
		{[]string{"drift", "--policy", localPolicy, "-f", filepath.Join(dir, "nothing.yaml")}, "sandprobe drift: -f " + filepath.Join(dir, "nothing.yaml") + ": no such file or directory"},
		{[]string{"drift", "--policy", localPolicy, "--inspect", filepath.Join(dir, "nothing.json")}, "sandprobe drift: --inspect " + filepath.Join(dir, "nothing.json") + ": no such file or directory"},
		{[]string{"run", "--policy", filepath.Join(dir, "nothing.yaml")}, filepath.Join(dir, "nothing.yaml") + ": no such file or directory"},
		{[]string{"validate", "-f", filepath.Join(dir, "nothing.yaml")}, filepath.Join(dir, "nothing.yaml") + ": no such file or directory"},
		{[]string{"validate"}, "sandprobe validate: -f is required"},
	}
	for _, c := range cases {
		code, _, stderr := runApp(t, "", c.args...)
		if code != report.ExitBadInput || !strings.HasPrefix(stderr, c.stderr) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line %q", c.args, code, stderr, c.stderr)
		}
	}
}
