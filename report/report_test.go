package report

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	junit "github.com/joshdk/go-junit"
	"github.com/prometheus/client_golang/prometheus"
)

var update = flag.Bool("update", false, "rewrite golden files")

func sampleRun() Run {
	return Run{
		Policy: "agent-sandbox", Version: "test", Backend: "local",
		StartedAt: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), Seconds: 0.042,
		Findings: []Finding{
			{Check: "identity.uid", Target: "local/sandbox", Status: Pass, Expected: "uid 65532", Actual: "uid 65532", Seconds: 0.001},
			{Check: "fs.root-readonly", Target: "local/sandbox", Status: Fail, Expected: "a read-only root mount", Actual: "read-write (a file was created in /)", Evidence: "statvfs flags 0x0", Fix: "set readOnlyRootFilesystem: true", Seconds: 0.002},
			{Check: "caps.sets", Subject: "CapBnd", Target: "local/sandbox", Status: Fail, Expected: "no capabilities", Actual: "NET_RAW", Fix: "drop ALL capabilities"},
			{Check: "egress.must-fail", Role: RoleMustFail, Subject: "blocked.lab.test:443", Target: "node/worker-1", Where: Location{Node: "worker-1"}, Status: Inconclusive, Actual: "every allowed host failed too: a dead network proves nothing", Class: "timeout",
				Attempt: &Attempt{Attempted: true, Started: 0.002, Waited: 3.001, Timeout: 3, StoppedBy: StoppedByNetwork, Errno: "ETIMEDOUT", Signal: "no answer: dropped",
					Addresses: []AddressAttempt{{Address: "10.99.20.20", Class: "timeout", Errno: "ETIMEDOUT", Waited: 3.001}, {Address: "fd99:0:0:20::20", Class: "timeout", Errno: "ETIMEDOUT", Waited: 3.001}}}},
			{Check: "egress.allowed", Role: RoleAllowance, Subject: "api.lab.test:443", Target: "node/worker-1", Where: Location{Node: "worker-1"}, Status: Fail, Expected: "answered", Actual: "timeout", Class: "timeout",
				Attempt: &Attempt{Attempted: true, Started: 0.001, Waited: 3.0, Timeout: 3, StoppedBy: StoppedByNetwork, Errno: "ETIMEDOUT", Signal: "no answer: dropped"}},
			{Check: "tools.run", Subject: "chromium", Target: "node/worker-1", Where: Location{Node: "worker-1"}, Status: Skip, Actual: "not applicable"},
			{Check: "probe.result", Target: "node/worker-2", Where: Location{Node: "worker-2"}, Status: Error, Actual: "the probe echoed nonce \"x\", want \"y\""},
		},
	}
}

func TestExitCode(t *testing.T) {
	cases := []struct {
		name string
		st   []Status
		want int
	}{
		{"all pass", []Status{Pass, Pass}, 0},
		{"skip is fine", []Status{Pass, Skip}, 0},
		{"fail", []Status{Pass, Fail}, 1},
		{"inconclusive is not a pass", []Status{Pass, Inconclusive}, 1},
		{"error wins", []Status{Fail, Error}, 3},
		{"unknown status is an error", []Status{"weird"}, 3},
		{"nothing checked proves nothing", nil, 3},
	}
	for _, c := range cases {
		var r Run
		for _, s := range c.st {
			r.Findings = append(r.Findings, Finding{Check: "x", Status: s})
		}
		if got := r.ExitCode(); got != c.want {
			t.Errorf("%s: exit %d, want %d", c.name, got, c.want)
		}
	}
}

// TestJUnitRoundTrip parses the XML back with a real JUnit consumer and
// checks it matches the run: suites, counts, names and failure messages.
func TestJUnitRoundTrip(t *testing.T) {
	run := sampleRun()
	var buf bytes.Buffer
	if err := (JUnit{}).Write(&buf, run); err != nil {
		t.Fatal(err)
	}
	suites, err := junit.Ingest(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(suites) != 3 {
		t.Fatalf("want 3 suites (one per target), got %d", len(suites))
	}
	byName := map[string]junit.Test{}
	total := 0
	for _, s := range suites {
		for _, tc := range s.Tests {
			byName[s.Name+"|"+tc.Name] = tc
			total++
		}
	}
	if total != len(run.Findings) {
		t.Fatalf("want %d testcases, got %d", len(run.Findings), total)
	}
	for _, f := range run.Findings {
		tc, ok := byName[f.Target+"|"+f.Name()]
		if !ok {
			t.Fatalf("no testcase for %s|%s", f.Target, f.Name())
		}
		want := map[Status]junit.Status{Pass: junit.StatusPassed, Fail: junit.StatusFailed, Skip: junit.StatusSkipped, Inconclusive: junit.StatusSkipped, Error: junit.StatusError}[f.Status]
		if tc.Status != want {
			t.Errorf("%s: status %s, want %s", f.Name(), tc.Status, want)
		}
		if f.Status == Fail {
			if tc.Message != "expected "+f.Expected+", actual "+f.Actual || tc.Error == nil || !strings.Contains(tc.Error.Error(), "actual:") {
				t.Errorf("%s: failure message %q body %v", f.Name(), tc.Message, tc.Error)
			}
		}
	}
	agg := suites[0].Totals
	if agg.Failed != 2 || agg.Passed != 1 {
		t.Errorf("suite local/sandbox totals %+v", agg)
	}
}

func TestGolden(t *testing.T) {
	for name, w := range map[string]Writer{"run.junit.xml": JUnit{}, "run.txt": Text{}, "run.verbose.txt": Text{Verbose: true}, "run.json": JSON{}} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := w.Write(&buf, sampleRun()); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				os.MkdirAll("testdata", 0o755)
				if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("output differs from %s (run with -update):\n%s", golden, buf.String())
			}
		})
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.xml")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := WriteFileAtomic(path, func(w io.Writer) error {
		io.WriteString(w, "half")
		return errors.New("boom")
	})
	if err == nil {
		t.Fatal("want error")
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("a failed write changed the file: %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("temp files left behind: %v", entries)
	}
	if err := WriteRunFile(path, JSON{}, sampleRun()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); !bytes.Contains(b, []byte(`"agent-sandbox"`)) {
		t.Fatalf("new content missing: %s", b)
	}
}

// TestBuildStamped: a run stamped with its build (make build, make
// release) says version, commit and build date in every format.
func TestBuildStamped(t *testing.T) {
	run := Run{Policy: "p", Version: "v0.1.0", Commit: "0123456789abcdef0123456789abcdef01234567", BuildDate: "2026-01-02T03:04:05Z", Backend: "drift",
		Findings: []Finding{{Check: "drift.pod.uid", Target: "pod/ns/a", Status: Pass}}}
	for _, tc := range []struct {
		name string
		w    Writer
		want []string
	}{
		{"json", JSON{}, []string{`"version": "v0.1.0"`, `"commit": "0123456789abcdef0123456789abcdef01234567"`, `"buildDate": "2026-01-02T03:04:05Z"`}},
		{"junit", JUnit{}, []string{`<property name="version" value="v0.1.0">`, `<property name="commit" value="0123456789abcdef0123456789abcdef01234567">`, `<property name="build_date" value="2026-01-02T03:04:05Z">`}},
		{"sarif", SARIF{}, []string{`"version": "v0.1.0"`, `"releaseDateUtc": "2026-01-02T03:04:05Z"`, `"commit": "0123456789abcdef0123456789abcdef01234567"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tc.w.Write(&buf, run); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(buf.String(), w) {
					t.Errorf("no %s in\n%s", w, buf.String())
				}
			}
		})
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(run, time.Unix(0, 0))
	var buf bytes.Buffer
	if err := WriteMetrics(&buf, reg); err != nil {
		t.Fatal(err)
	}
	if want := `sandprobe_info{build_date="2026-01-02T03:04:05Z",commit="0123456789abcdef0123456789abcdef01234567",policy="p",version="v0.1.0"} 1`; !strings.Contains(buf.String(), want) {
		t.Errorf("no %s in\n%s", want, buf.String())
	}
}
