package audit_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/audit"
	"github.com/sandprobe/sandprobe/egresslog"
	"github.com/sandprobe/sandprobe/internal/testenv"
)

// TestBenchEgressUsage (make bench; SANDPROBE_BENCH=1): `sandprobe
// egress-usage` over a generated Squid access.log of 1,000,000 lines (and
// of 100,000, for memory), against `grep -c` counting the same file twice
// (the denied lines, then the tunnels) in the same run. Each child's wall
// time, CPU and peak RSS come from drift/testdata/maxrss; each command's
// best of two rounds, taken in turn. Every child writes to a pipe the test
// reads, and grep's counts and egress-usage's record count are checked
// against the generated log: GNU grep whose output is /dev/null stops at
// the first match, so a baseline left writing there counts nothing. Goals: egress-usage in well under
// (≤ 0.5×) the time of grep's two counts; peak RSS flat (the 1,000,000-line
// run ≤ 1.5× the 100,000-line run, ≤ 64 MB). SANDPROBE_BENCH_LOG_LINES
// overrides the sizes ("100000,1000000").
//
// The log is shaped like a real one: 200 sandboxes, destinations drawn
// from a long tail (a few hot hosts, a hundred and fifty rare ones, most
// of them denied),
// each sandbox's requests in bursts, and the probe's own marked attempts.
func TestBenchEgressUsage(t *testing.T) {
	if os.Getenv("SANDPROBE_BENCH") != "1" {
		t.Skip("set SANDPROBE_BENCH=1 (make bench)")
	}
	sizes := []int{100000, 1000000}
	if v := os.Getenv("SANDPROBE_BENCH_LOG_LINES"); v != "" {
		sizes = nil
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("SANDPROBE_BENCH_LOG_LINES: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	bin := testenv.Binary(t)
	grep, err := exec.LookPath("grep")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	maxrss := filepath.Join(tmp, "maxrss")
	if b, err := exec.Command("go", "build", "-o", maxrss, "../drift/testdata/maxrss").CombinedOutput(); err != nil {
		t.Fatalf("build maxrss: %v\n%s", err, b)
	}
	floor := filepath.Join(tmp, "fieldfloor")
	if b, err := exec.Command("go", "build", "-o", floor, "./testdata/fieldfloor").CombinedOutput(); err != nil {
		t.Fatalf("build fieldfloor: %v\n%s", err, b)
	}
	policyPath := filepath.Join(tmp, "policy.yaml")
	if err := os.WriteFile(policyPath, []byte(benchPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(out *bytes.Buffer, okCodes []int, args ...string) usageMeasure {
		return measureRun(t, maxrss, out, nil, okCodes, args...)
	}
	best := func(a, b usageMeasure) usageMeasure {
		return usageMeasure{min(a.seconds, b.seconds), min(a.cpu, b.cpu), min(a.mb, b.mb)}
	}
	var results []usageBenchResult
	for _, n := range sizes {
		file := filepath.Join(tmp, fmt.Sprintf("access-%d.log", n))
		size, denied, tunnels := writeBenchLog(t, file, n)
		r := usageBenchResult{lines: n, fileMB: float64(size) / 1e6}
		var out bytes.Buffer
		count := func(m usageMeasure, want int) usageMeasure {
			if got := strings.TrimSpace(out.String()); got != strconv.Itoa(want) {
				t.Fatalf("grep -c counted %q lines, the log holds %d", got, want)
			}
			return m
		}
		for round := 0; round < 2; round++ {
			g1 := count(run(&out, []int{0}, grep, "-c", "TCP_DENIED", file), denied)
			g2 := count(run(&out, []int{0}, grep, "-c", "TCP_TUNNEL", file), tunnels)
			fl := run(&out, []int{0}, floor, file)
			if got, want := strings.Fields(out.String()), strconv.Itoa(n); len(got) != 2 || got[0] != want {
				t.Fatalf("fieldfloor found %q, the log holds %s lines", out.String(), want)
			}
			usage := func(env []string) usageMeasure {
				return measureUsage(t, maxrss, &out, env, n, bin, "egress-usage", "--policy", policyPath, "--log", file, "-o", "json")
			}
			u := usage(nil)
			// The same on one core, to show how the scan scales with cores.
			u1 := usage(append(os.Environ(), "GOMAXPROCS=1"))
			if round == 0 {
				r.grep1, r.grep2, r.floor, r.usage, r.usage1 = g1, g2, fl, u, u1
			} else {
				r.grep1, r.grep2, r.floor, r.usage, r.usage1 = best(r.grep1, g1), best(r.grep2, g2), best(r.floor, fl), best(r.usage, u), best(r.usage1, u1)
			}
		}
		results = append(results, r)
		os.Remove(file)
	}
	reportUsageBench(t, results)
}

// measureUsage runs egress-usage -o json (args) under the maxrss wrapper
// and checks that its report counted the log's n records.
func measureUsage(t *testing.T, maxrss string, out *bytes.Buffer, env []string, n int, args ...string) usageMeasure {
	t.Helper()
	m := measureRun(t, maxrss, out, env, []int{0, 1}, args...)
	var rep struct {
		EgressUsage struct {
			Sources []struct{ Records int64 }
		}
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.EgressUsage.Sources) != 1 || rep.EgressUsage.Sources[0].Records != int64(n) {
		t.Fatalf("egress-usage did not report %d records (%v): %.300s", n, err, out.String())
	}
	return m
}

// usageBenchResult is one log size's measurements.
type usageBenchResult struct {
	lines        int
	fileMB       float64
	grep1, grep2 usageMeasure
	floor        usageMeasure // testdata/fieldfloor: reading the file and finding every line's fields, nothing else
	usage        usageMeasure
	usage1       usageMeasure // egress-usage with GOMAXPROCS=1
}

// reportUsageBench prints the measurements against the goals; memory that
// is not flat fails the bench.
func reportUsageBench(t *testing.T, results []usageBenchResult) {
	t.Helper()
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	fmt.Printf("egress-usage bench: generated Squid access.log, sandprobe egress-usage -o json vs grep -c counting the same file twice (TCP_DENIED, then TCP_TUNNEL), same run, best of two rounds\n")
	for _, r := range results {
		twice := r.grep1.seconds + r.grep2.seconds
		cpu := r.grep1.cpu + r.grep2.cpu
		fmt.Printf("  %9d lines (%4.0f MB): grep -c ×2 %6.3f s (CPU %.3f s, %5.1f MB) | egress-usage %6.3f s (CPU %.3f s, %5.1f MB peak RSS, %.0f ns CPU a line) = %.2f × grep's two counts (CPU %.2f ×)\n",
			r.lines, r.fileMB, twice, cpu, max(r.grep1.mb, r.grep2.mb), r.usage.seconds, r.usage.cpu, r.usage.mb, r.usage.cpu*1e9/float64(r.lines), r.usage.seconds/twice, r.usage.cpu/cpu)
	}
	last := results[len(results)-1]
	ratio := last.usage.seconds / (last.grep1.seconds + last.grep2.seconds)
	fmt.Printf("  %d lines: egress-usage takes %.2f × the time grep -c takes to count them twice — goal ≤ 0.5×: %s\n", last.lines, ratio, verdict(ratio <= 0.5))
	// The floor: no reader that looks at every field of every line can
	// take less, whatever it does with them; how far the goal is from it
	// says whether a faster parser could meet it on this machine.
	twice := last.grep1.seconds + last.grep2.seconds
	fmt.Printf("  floor (testdata/fieldfloor: read the file and find every line's ten fields on %d cores, nothing else) %.3f s (CPU %.3f s) = %.2f × grep's two counts; egress-usage is %.2f × the floor\n",
		runtime.GOMAXPROCS(0), last.floor.seconds, last.floor.cpu, last.floor.seconds/twice, last.usage.seconds/last.floor.seconds)
	fmt.Printf("  egress-usage on one core (GOMAXPROCS=1) %.3f s, on %d %.3f s: %.2f× faster\n",
		last.usage1.seconds, runtime.GOMAXPROCS(0), last.usage.seconds, last.usage1.seconds/last.usage.seconds)
	if len(results) >= 2 {
		first := results[0]
		growth := last.usage.mb / first.usage.mb
		fmt.Printf("  peak RSS %.1f MB at %d lines, %.1f MB at %d (%.2f×) — goal flat (≤ 1.5×, ≤ 64 MB): %s\n", first.usage.mb, first.lines, last.usage.mb, last.lines, growth, verdict(growth <= 1.5 && last.usage.mb <= 64))
		// Memory is what a loaded machine cannot blur: it fails the bench.
		if growth > 1.5 || last.usage.mb > 64 {
			t.Errorf("egress-usage memory is not flat: %.1f MB at %d lines, %.1f MB at %d", first.usage.mb, first.lines, last.usage.mb, last.lines)
		}
	}
}

// usageMeasure is one run's wall time, CPU time and peak RSS.
type usageMeasure struct{ seconds, cpu, mb float64 }

// measureRun runs args under the maxrss wrapper with env (nil: this
// process's), its output into out, and reads what the wrapper measured;
// an exit code not in okCodes fails.
func measureRun(t *testing.T, maxrss string, out *bytes.Buffer, env []string, okCodes []int, args ...string) usageMeasure {
	t.Helper()
	var errb strings.Builder
	out.Reset()
	cmd := exec.Command(maxrss, args...)
	cmd.Stdout, cmd.Stderr, cmd.Env = out, &errb, env
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", args[0], err)
	}
	if !containsInt(okCodes, code) {
		t.Fatalf("%v: exit %d\n%.2000s", args, code, errb.String())
	}
	m := regexp.MustCompile(`maxrss_kib=(\d+) seconds=([\d.]+) cpu=([\d.]+)`).FindStringSubmatch(errb.String())
	if m == nil {
		t.Fatalf("%v: no measurement in %q", args, errb.String())
	}
	kib, _ := strconv.ParseFloat(m[1], 64)
	secs, _ := strconv.ParseFloat(m[2], 64)
	cpu, _ := strconv.ParseFloat(m[3], 64)
	return usageMeasure{secs, cpu, kib / 1024}
}

func containsInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

const benchPolicy = `apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: bench}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  egress:
    proxy: http://10.99.31.28:3128
    allow:
      - {host: api.anthropic.com, port: 443, reason: "the model API"}
      - {host: "*.github.com", port: 443, reason: "git through the broker"}
      - {host: registry.npmjs.org, port: 443, reason: "packages"}
      - {host: pypi.org, port: 443, reason: "packages"}
      - {host: files.pythonhosted.org, port: 443, reason: "packages"}
      - {host: "*.githubusercontent.com", port: 443, reason: "release assets"}
      - {host: deb.debian.org, port: 80, reason: "apt"}
      - {host: proxy.golang.org, port: 443, reason: "Go modules"}
      - {host: old-mirror.example.com, port: 443, reason: "the mirror before 2024"}
    mustFail: {hosts: [example.com]}
`

// writeBenchLog writes n native Squid lines and returns the file's size
// and how many lines are denied and how many tunnels.
func writeBenchLog(t *testing.T, path string, n int) (size int64, denied, tunnels int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	denied = benchLog(w, n)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	f.Close()
	return fi.Size(), denied, n - denied
}

// benchLog writes n native Squid lines in sandprobe's format and returns
// how many are denied (TCP_DENIED; the others are TCP_TUNNEL).
func benchLog(w io.Writer, n int) (denied int) {
	rng := rand.New(rand.NewPCG(1, 2))
	hot := []string{"api.anthropic.com:443", "api.github.com:443", "registry.npmjs.org:443", "pypi.org:443", "files.pythonhosted.org:443", "objects.githubusercontent.com:443", "proxy.golang.org:443", "codeload.github.com:443"}
	zipf := rand.NewZipf(rng, 1.2, 4, 150)
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	step := int64(30*24*3600*1000) / int64(n)
	line := 0
	for line < n {
		sandbox := fmt.Sprintf("10.244.%d.%d", rng.IntN(2), 2+rng.IntN(100))
		k := int(zipf.Uint64())
		var dest string
		if k < len(hot) {
			dest = hot[k]
		} else {
			dest = fmt.Sprintf("host%d.example.net:443", k)
		}
		refused := k >= len(hot) && rng.IntN(100) < 60
		burst := 1 + rng.IntN(8)
		for b := 0; b < burst && line < n; b++ {
			ms := t0 + int64(line)*step
			ua := "node/20"
			if line%997 == 0 {
				ua = "sandprobe/1.0 nonce=bench"
			}
			if refused {
				fmt.Fprintf(w, "%d.%03d %6d %s TCP_DENIED/403 3900 CONNECT %s - HIER_NONE/- text/html 180 %q\n", ms/1000, ms%1000, 0, sandbox, dest, ua)
				denied++
			} else {
				fmt.Fprintf(w, "%d.%03d %6d %s TCP_TUNNEL/200 %d CONNECT %s - HIER_DIRECT/203.0.113.%d - %d %q\n", ms/1000, ms%1000, rng.IntN(30000), sandbox, 2000+rng.IntN(900000), dest, 1+rng.IntN(250), 200+rng.IntN(5000), ua)
			}
			line++
		}
	}
	return denied
}

// BenchmarkReadSquid: the scan and the tally (what egress-usage does per
// line) over the bench's log shape, 200,000 lines in memory, on one
// worker (cpu-ns/line) and on every core; allocs/line stays near 0.
func BenchmarkReadSquid(b *testing.B) {
	const lines = 200000
	var buf bytes.Buffer
	benchLog(&buf, lines)
	data := buf.Bytes()
	for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			src := audit.Source{Name: "bench", Format: egresslog.FormatSquid, Open: func() (io.ReadCloser, time.Time, error) {
				return io.NopCloser(bytes.NewReader(data)), time.Time{}, nil
			}}
			b.SetBytes(int64(len(data)))
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			mallocs := ms.Mallocs
			cpu0 := cpuTime()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_, used, err := audit.Read(context.Background(), []audit.Source{src}, workers)
				if err != nil || used[0].Records != lines {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lines), "ns/line")
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N*lines), "cpu-ns/line")
			b.ReportMetric(float64(ms.Mallocs-mallocs)/float64(b.N*lines), "allocs/line")
		})
	}
}

// cpuTime is this process's user + system CPU time so far, in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
