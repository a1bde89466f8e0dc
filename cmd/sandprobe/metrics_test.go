package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

// parseSamples reads a text exposition into "name{label="value",…}" → value,
// labels sorted by name.
func parseSamples(t *testing.T, r io.Reader) map[string]float64 {
	t.Helper()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("parse exposition: %v", err)
	}
	out := map[string]float64{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetUntyped() != nil:
				out[key] = m.GetUntyped().GetValue()
			}
		}
	}
	return out
}

func fileSamples(t *testing.T, path string) map[string]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return parseSamples(t, f)
}

func httpSamples(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return parseSamples(t, resp.Body)
}

func promtoolCheck(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(testenv.Promtool(t), "check", "metrics")
	cmd.Stdin = f
	if out, err := cmd.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("promtool check metrics %s: %v\n%s", path, err, out)
	}
}

const localPolicy = "../../fixtures/local-policy.yaml"

// TestRunMetricsFile: `run --metrics-file` writes an exposition promtool
// accepts, with up, the checks and, after a run that was not conformant
// (exit 1 or 3), the previous run's last success carried over.
func TestRunMetricsFile(t *testing.T) {
	testenv.RequireRoot(t)
	path := filepath.Join(t.TempDir(), "sandprobe.prom")
	cases := []struct {
		name     string
		args     []string
		wantExit int
		want     map[string]float64
	}{
		{"healthy", nil, 0, map[string]float64{
			"sandprobe_up": 1,
			`sandprobe_check_success{check="fs.root-readonly",namespace="",node="local/sandbox",severity="medium",target="/"}`: 1,
			`sandprobe_runs_total{result="pass"}`: 1,
		}},
		{"sabotaged: a read-write root", []string{"--sabotage", "writable-root"}, 1, map[string]float64{
			"sandprobe_up": 1, // it could check; what it found is the failure
			`sandprobe_check_success{check="fs.root-readonly",namespace="",node="local/sandbox",severity="medium",target="/"}`: 0,
			`sandprobe_runs_total{result="fail"}`: 1,
			// A counter: it carries on from the previous run's file.
			`sandprobe_runs_total{result="pass"}`: 1,
		}},
		{"could not run", []string{"--netns", "sandprobe-no-such-netns"}, 3, map[string]float64{
			"sandprobe_up": 0,
			`sandprobe_check_success{check="probe.run",namespace="",node="local/sandprobe-no-such-netns",severity="medium",target="launch-failed"}`: 0,
			`sandprobe_runs_total{result="pass"}`:  1,
			`sandprobe_runs_total{result="fail"}`:  1,
			`sandprobe_runs_total{result="error"}`: 1,
		}},
	}
	var lastSuccess float64
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"run", "--policy", localPolicy, "--metrics-file", path}, c.args...)
			code, stdout, stderr := runAppBin(t, args...)
			if code != c.wantExit {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, c.wantExit, stdout, stderr)
			}
			promtoolCheck(t, path)
			got := fileSamples(t, path)
			for k, want := range c.want {
				if v, ok := got[k]; !ok || v != want {
					t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
				}
			}
			ls, ok := got["sandprobe_last_success_timestamp_seconds"]
			if !ok {
				t.Fatal("no last success timestamp")
			}
			// Only a conformant run is a success for the staleness alert:
			// the sabotaged run (exit 1) keeps the healthy run's time too.
			if c.wantExit != 0 && ls != lastSuccess {
				t.Errorf("a run that exited %d changed or dropped the last success: %v, want %v", c.wantExit, ls, lastSuccess)
			}
			lastSuccess = ls
		})
	}
}

// TestRunPushgateway: `run --pushgateway` pushes the run to a real gateway,
// in the group of its cluster; a gateway that is down is a warning line
// and sandprobe_push_failures_total 1 (the metrics file shows it), and the
// run's exit code stands; with --require-push it is exit 3, saying why.
func TestRunPushgateway(t *testing.T) {
	testenv.RequireRoot(t)
	gw := testenv.Pushgateway(t)
	testenv.Binary(t) // build first: time the run, not the compiler
	start := time.Now()
	code, stdout, stderr := runAppBin(t, "run", "--policy", localPolicy, "-o", "json", "--pushgateway", gw, "--cluster", "lab-1")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	t.Logf("run with push: %v", time.Since(start))
	got := httpSamples(t, gw+"/metrics")
	for k, want := range map[string]float64{
		`sandprobe_up{cluster="lab-1",instance="",job="sandprobe"}`: 1,
		`sandprobe_check_success{check="identity.uid",cluster="lab-1",instance="",job="sandprobe",namespace="",node="local/sandbox",severity="high",target=""}`: 1,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
	// A CronJob is a new process each run: the counter carries on from the
	// group, so rate() sees runs, not a 1 in every push.
	if code, stdout, stderr := runAppBin(t, "run", "--policy", localPolicy, "--pushgateway", gw, "--cluster", "lab-1"); code != 0 {
		t.Fatalf("second run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if v := httpSamples(t, gw+"/metrics")[`sandprobe_runs_total{cluster="lab-1",instance="",job="sandprobe",result="pass"}`]; v != 2 {
		t.Errorf("sandprobe_runs_total{result=pass} after two runs = %v, want 2", v)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	metricsFile := filepath.Join(t.TempDir(), "sandprobe.prom")
	code, _, stderr = runAppBin(t, "run", "--policy", localPolicy, "--pushgateway", down, "--cluster", "lab-1", "--metrics-file", metricsFile)
	if code != 0 || !strings.Contains(stderr, "warning: push metrics to "+down) || !strings.Contains(stderr, "--require-push") {
		t.Fatalf("gateway down: exit %d, stderr %q; want 0 and a warning naming the push, the gateway and --require-push", code, stderr)
	}
	if prom, err := os.ReadFile(metricsFile); err != nil || !strings.Contains(string(prom), "\nsandprobe_push_failures_total 1\n") || !strings.Contains(string(prom), "\nsandprobe_up 1\n") {
		t.Errorf("the metrics file after a failed push (%v):\n%s", err, prom)
	}
	code, _, stderr = runAppBin(t, "run", "--policy", localPolicy, "--pushgateway", down, "--cluster", "lab-1", "--require-push")
	if code != 3 || !strings.Contains(stderr, "push metrics to "+down) {
		t.Fatalf("gateway down, --require-push: exit %d, stderr %q; want 3 naming the push and the gateway", code, stderr)
	}
}

func TestMetricsFlagsBadInput(t *testing.T) {
	cases := [][]string{
		{"run", "--policy", localPolicy, "--pushgateway", "pushgateway:9091"},
		{"run", "--policy", localPolicy, "--pushgateway", "ftp://gw"},
		{"serve", "--policy", localPolicy, "--pushgateway", "http://"},
		{"serve", "--policy", localPolicy, "--schedule", "every half hour"},
		{"serve", "--policy", localPolicy, "--schedule", "*/0 * * * *"},
		{"serve", "--policy", localPolicy, "--grace", "0s"},
		{"serve", "--policy", localPolicy, "--backend", "moon"},
		{"serve"},
	}
	for _, args := range cases {
		if args[0] == "serve" {
			// Should a case pass validation, it must not hold a real port.
			args = append(args, "--listen", "127.0.0.1:0", "--run-at-start=false")
		}
		if code, _, stderr := runApp(t, "", args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, stderr)
		}
	}
}
