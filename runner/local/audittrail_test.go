package local_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sourcegraph/conc"

	"github.com/sandprobe/sandprobe/audit"
	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/local"
)

// proxyLog is where the lab's proxy of a flavour writes its record.
func proxyLog(flavour string) string {
	if flavour == "squid" {
		return filepath.Join(testenv.LabDir(), "proxy", "squid", "access.log")
	}
	return filepath.Join(testenv.LabDir(), "proxy", "access.log")
}

// trailRun is a full cycle of the lab's policy with the proxy's record
// read after the probe; during, if set, runs while the probe runs.
func trailRun(t *testing.T, flavour string, during func()) report.Run {
	t.Helper()
	doc := labPolicy(t)
	p, err := policy.Load(doc)
	if err != nil {
		t.Fatal(err)
	}
	log := proxyLog(flavour)
	if _, err := os.Stat(log); err != nil {
		createLike(t, log, filepath.Dir(log)) // a proxy that has logged nothing yet
	}
	be := &local.Backend{Sandbox: local.SandboxFor(p, "sp-sandbox"), ControlNetNS: "sp-control", Binary: testenv.Binary(t)}
	cyc := runner.Cycle{Backend: be, Name: "local", FixFor: probes.FixFor,
		Trail: &runner.Trail{Record: runner.FileRecord{Path: log}, Client: "10.99.1.2"}}
	spec := runner.ProbeSpec{Policy: p, PolicyBytes: doc, Nonce: runner.NewNonce(), Deadline: time.Minute}
	var wg conc.WaitGroup
	if during != nil {
		wg.Go(during)
	}
	run, err := cyc.Run(context.Background(), spec)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// createLike creates an empty file owned as like is (the proxy's user:
// Squid opens its log as user proxy), as logrotate's create does.
func createLike(t *testing.T, path, like string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(like); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			os.Chown(path, int(st.Uid), int(st.Gid))
		}
	}
}

func trailFindings(run report.Run) map[string]report.Finding {
	out := map[string]report.Finding{}
	for _, f := range run.Findings {
		if f.Check == audit.CheckTrail {
			out[f.Subject] = f
		}
	}
	return out
}

// TestLabAuditTrail: with tinyproxy and with Squid, every attempt the
// probe made through the proxy is in the proxy's record with the decision
// the probe saw; logging switched off fails; a log rotated during the run
// is inconclusive; a proxy that allows one must-fail host (and writes down
// that it did) fails, naming the host.
func TestLabAuditTrail(t *testing.T) {
	script := testenv.Lab(t)
	for _, flavour := range []string{"tinyproxy", "squid"} {
		t.Run(flavour, func(t *testing.T) {
			if _, err := exec.LookPath(flavour); err != nil {
				testenv.Missing(t, "the lab's "+flavour+" flavour needs "+flavour)
			}
			labCmd(t, script, "heal")
			labCmd(t, script, "proxy", flavour)

			t.Run("healthy", func(t *testing.T) {
				fs := trailFindings(trailRun(t, flavour, nil))
				if len(fs) < 6 {
					t.Fatalf("%d attempts through the proxy judged, want the allowances and must-fail targets via proxy: %v", len(fs), fs)
				}
				for s, f := range fs {
					if f.Status != report.Pass || f.Evidence == "" {
						t.Errorf("%s: %s — %s (%s)", s, f.Status, f.Actual, f.Evidence)
					}
				}
				f := fs["blocked.lab.test:443 via proxy"]
				t.Logf("%s: %s | %s", flavour, f.Actual, f.Evidence)
			})

			t.Run("logging off", func(t *testing.T) {
				labCmd(t, script, "break", "proxy-nolog")
				defer labCmd(t, script, "heal", "proxy-nolog")
				fs := trailFindings(trailRun(t, flavour, nil))
				if len(fs) == 0 {
					t.Fatal("no egress.audit-trail finding")
				}
				for s, f := range fs {
					if f.Status != report.Fail || !strings.Contains(f.Actual, "no record of it") {
						t.Errorf("%s: %s — %s", s, f.Status, f.Actual)
					}
				}
			})

			t.Run("rotated mid-run", func(t *testing.T) {
				log := proxyLog(flavour)
				fi, _ := os.Stat(log)
				fs := trailFindings(trailRun(t, flavour, func() {
					// logrotate's create: once the run has written something,
					// the file moves aside and a new empty one takes its place
					for i := 0; i < 200; i++ {
						if now, err := os.Stat(log); err == nil && now.Size() > fi.Size() {
							break
						}
						time.Sleep(25 * time.Millisecond)
					}
					os.Rename(log, log+".1")
					createLike(t, log, log+".1")
				}))
				if len(fs) == 0 {
					t.Fatal("no egress.audit-trail finding")
				}
				for s, f := range fs {
					if f.Status != report.Inconclusive || !strings.Contains(f.Actual, "rotated during the run") {
						t.Errorf("%s: %s — %s", s, f.Status, f.Actual)
					}
				}
			})

			t.Run("proxy allows a must-fail host", func(t *testing.T) {
				labCmd(t, script, "break", "proxy-allows-blocked")
				defer labCmd(t, script, "heal", "proxy-allows-blocked")
				fs := trailFindings(trailRun(t, flavour, nil))
				for s, f := range fs {
					want := report.Pass
					if strings.HasPrefix(s, "blocked.lab.test:") { // every port: the proxy filters names
						want = report.Fail
						if !strings.Contains(f.Actual, "must-fail blocked.lab.test:") || !strings.Contains(f.Actual, "ALLOWED") {
							t.Errorf("%s: %q does not name the host allowed", s, f.Actual)
						}
					}
					if f.Status != want {
						t.Errorf("%s: %s, want %s — %s", s, f.Status, want, f.Actual)
					}
				}
				if _, ok := fs["blocked.lab.test:443 via proxy"]; !ok {
					t.Errorf("no finding for blocked.lab.test via proxy: %v", fs)
				}
			})
		})
	}
}
