package report

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	junit "github.com/joshdk/go-junit"
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
			{Check: "egress.must-fail", Subject: "blocked.lab.test:443", Target: "node/worker-1", Status: Inconclusive, Actual: "every allowed host failed too: a dead network proves nothing", Class: "timeout",
				Attempt: &Attempt{Attempted: true, Started: 0.002, Waited: 3.001, Timeout: 3, StoppedBy: StoppedByNetwork, Errno: "ETIMEDOUT", Signal: "no answer: dropped",
					Addresses: []AddressAttempt{{Address: "10.99.20.20", Class: "timeout", Errno: "ETIMEDOUT", Waited: 3.001}, {Address: "fd99:0:0:20::20", Class: "timeout", Errno: "ETIMEDOUT", Waited: 3.001}}}},
			{Check: "egress.allowed", Subject: "api.lab.test:443", Target: "node/worker-1", Status: Fail, Expected: "answered", Actual: "timeout", Class: "timeout",
				Attempt: &Attempt{Attempted: true, Started: 0.001, Waited: 3.0, Timeout: 3, StoppedBy: StoppedByNetwork, Errno: "ETIMEDOUT", Signal: "no answer: dropped"}},
			{Check: "tools.run", Subject: "chromium", Target: "node/worker-1", Status: Skip, Actual: "not applicable"},
			{Check: "probe.result", Target: "node/worker-2", Status: Error, Actual: "the probe echoed nonce \"x\", want \"y\""},
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

// TestTerminationMessage: the whole result travels compressed when it fits
// (every finding, passes and evidence included), and decodes to exactly
// what the probe printed; one too large for that falls back to the compact
// form; garbage behind the prefix is an error, never an empty result.
func TestTerminationMessage(t *testing.T) {
	res := ProbeResult{Schema: ProbeResultSchema, Nonce: "n-1", Policy: "p", StartedAt: time.Now().UTC().Truncate(time.Second)}
	for i := range 60 {
		res.Findings = append(res.Findings, Finding{Check: "egress.must-fail", Subject: fmt.Sprintf("10.99.20.%d:443", i), Status: Pass, Class: "timeout",
			Expected: "no answer (any failure)", Actual: "timeout", Evidence: fmt.Sprintf("10.99.20.%d:443: no answer before the deadline (dropped) in 2.001s", i)})
	}
	for _, c := range []struct {
		name       string
		findings   int
		compressed bool
	}{{"60 findings: whole", 60, true}, {"one: whole", 1, true}} {
		t.Run(c.name, func(t *testing.T) {
			r := res
			r.Findings = res.Findings[:c.findings]
			msg, err := r.TerminationMessage(TerminationMsgSize)
			if err != nil {
				t.Fatal(err)
			}
			if len(msg) > TerminationMsgSize {
				t.Fatalf("%d bytes", len(msg))
			}
			doc, compressed, err := DecodeTerminationMessage(string(msg))
			if err != nil || compressed != c.compressed {
				t.Fatalf("compressed %v err %v", compressed, err)
			}
			var back ProbeResult
			if err := json.Unmarshal(doc, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, r) {
				t.Errorf("decoded result differs from the probe's:\n%+v\n%+v", back, r)
			}
		})
	}
	// Evidence too varied to compress: the passes lose their texts, not
	// their place (one series each in the metrics).
	noisy := res
	noisy.Findings = append([]Finding(nil), res.Findings...)
	for i := range noisy.Findings {
		h := sha256.Sum256([]byte(noisy.Findings[i].Subject))
		noisy.Findings[i].Evidence = fmt.Sprintf("%x%x", h, sha256.Sum256(h[:]))
	}
	msg, err := noisy.TerminationMessage(TerminationMsgSize)
	if err != nil {
		t.Fatal(err)
	}
	doc, compressed, err := DecodeTerminationMessage(string(msg))
	var back ProbeResult
	if err == nil {
		err = json.Unmarshal(doc, &back)
	}
	if err != nil || !compressed || !back.Compact || len(back.Findings) != len(noisy.Findings) || back.Findings[0].Evidence != "" {
		t.Errorf("noisy evidence: compressed %v, compact %v, %d of %d findings, err %v: want every finding, without its texts", compressed, back.Compact, len(back.Findings), len(noisy.Findings), err)
	}
	// Every must-fail target answering (an allow-all "for a minute"): many
	// failures, each with evidence of its own, beside as many passes. Every
	// finding still arrives, failures with their verdicts, nothing cut: a
	// cut result would be an error (exit 3), not the failure it is.
	open := noisy
	open.Findings = append([]Finding(nil), noisy.Findings...)
	for i := range 36 {
		h := sha256.Sum256([]byte(fmt.Sprint("open", i)))
		open.Findings[i] = Finding{Check: "egress.must-fail", Subject: fmt.Sprintf("10.99.%d.%d:443", i, i*7), Status: Fail, Class: "answered",
			Expected: "no answer (any failure)", Actual: fmt.Sprintf("answered: 10.99.%d.%d:443: connected", i, i*7), Evidence: fmt.Sprintf("%x%x", h, sha256.Sum256(h[:])),
			Fix: fmt.Sprintf("a rule that blocked 10.99.%d.%d:443 is gone or was widened: restore the deny (NetworkPolicy, firewall) for it", i, i*7), Attempt: &Attempt{Attempted: true, Started: float64(i) / 1000, Waited: 0.004, Timeout: 2, Addresses: []AddressAttempt{{Address: fmt.Sprintf("10.99.%d.%d:443", i, i*7), Class: "answered", Waited: 0.004}}}}
	}
	msg, err = open.TerminationMessage(TerminationMsgSize)
	if err != nil {
		t.Fatal(err)
	}
	doc, compressed, err = DecodeTerminationMessage(string(msg))
	back = ProbeResult{}
	if err == nil {
		err = json.Unmarshal(doc, &back)
	}
	if err != nil || !compressed || len(back.Findings) != len(open.Findings) || back.OmittedPasses != 0 {
		t.Fatalf("an allow-all: compressed %v, %d of %d findings (%d passes omitted), err %v: want every finding", compressed, len(back.Findings), len(open.Findings), back.OmittedPasses, err)
	}
	for i, f := range back.Findings {
		if f.Check != open.Findings[i].Check || f.Status != open.Findings[i].Status || f.Subject != open.Findings[i].Subject || (f.Status == Fail && f.Actual == "") {
			t.Errorf("finding %d: %s %s %s %q, the probe's %s %s %s", i, f.Check, f.Subject, f.Status, f.Actual, open.Findings[i].Check, open.Findings[i].Subject, open.Findings[i].Status)
		}
	}
	big := res
	for i := range 2000 {
		big.Findings = append(big.Findings, Finding{Check: "creds.env-secrets", Subject: fmt.Sprintf("K%x_KEY", i*7919), Status: Pass, Evidence: strings.Repeat(fmt.Sprint(i), 9)})
	}
	msg, err = big.TerminationMessage(TerminationMsgSize)
	if err != nil {
		t.Fatal(err)
	}
	if doc, compressed, err := DecodeTerminationMessage(string(msg)); err != nil || compressed || !strings.Contains(string(doc), `"compact":true`) {
		t.Errorf("too large to compress into the message: compressed %v, err %v, want the compact form", compressed, err)
	}
	if _, _, err := DecodeTerminationMessage(GzipPrefix + "not base64!"); err == nil {
		t.Errorf("garbage behind the prefix decoded")
	}
}

func TestCompactFitsTerminationMessage(t *testing.T) {
	res := ProbeResult{Schema: ProbeResultSchema, Nonce: "n-123", Policy: "p", StartedAt: time.Now()}
	for i := range 400 {
		st := Pass
		if i%7 == 0 {
			st = Fail
		}
		res.Findings = append(res.Findings, Finding{Check: "egress.must-fail", Subject: strings.Repeat("x", 30) + string(rune('a'+i%26)), Status: st,
			Expected: strings.Repeat("e", 300), Actual: strings.Repeat("a", 300), Evidence: strings.Repeat("v", 500), Fix: "fix it"})
	}
	for _, n := range []int{1, 10, 60, 400} {
		r := res
		r.Findings = res.Findings[:n]
		out, err := r.CompactJSON(TerminationMsgSize)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) > TerminationMsgSize {
			t.Fatalf("%d findings: %d bytes", n, len(out))
		}
		var back ProbeResult
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatal(err)
		}
		if back.Nonce != "n-123" || !back.Compact {
			t.Fatalf("lost nonce or compact flag: %+v", back)
		}
		fails := 0
		for _, f := range back.Findings {
			if f.Status != Pass {
				fails++
			}
		}
		if fails == 0 && n > 1 {
			t.Fatalf("%d findings: compact form dropped every failure", n)
		}
		if n == 400 && Count(back.Findings).Error == 0 {
			t.Fatalf("a cut result must carry an error finding")
		}
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
