package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/report"
)

// detectCycle is the schedule the benchmark runs `sandprobe serve` on: the
// CronJob's thirty minutes scaled down, long enough for one run to finish.
const detectCycle = 15 * time.Second

// BenchmarkRegressionToFailingRun measures the promise "the next run
// pages": on the real cluster, under kube-router enforcing the
// NetworkPolicy `sandprobe render` wrote, `sandprobe serve` runs every
// detectCycle; at a random moment of the cycle an allow-all NetworkPolicy
// appears ("for a minute"). From the moment kube-router has programmed it,
// the first run that starts must fail, so the failing run starts at most
// one cycle later and its result is out at most one cycle plus one run
// later. Baseline, measured in the same run: how long a green run takes.
// The undo is measured the same way (the first run after it is green).
func BenchmarkRegressionToFailingRun(b *testing.B) {
	e := newClusterEnv(b)
	e.labCluster(b)
	netpol := filepath.Join(testenv.ModuleRoot(b), "hack", "cluster", "netpol.sh")
	// Nothing in the lab stands between the pods and the targets: only
	// the NetworkPolicy does (and the control pod, in a namespace of its
	// own, under none). Under gVisor, as in make e2e: kube-router programs
	// a new pod's firewall only after it sees the pod's address, and a runc
	// probe starts dialling before that (its first attempts answer — true,
	// and a finding on a real cluster, but not the regression measured here).
	doc := unpinned(labPolicy(b, "{classNames: [gvisor]}"))
	controlNS := e.enforcing(b, doc)
	const widened = reopenName
	b.Cleanup(func() {
		exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "-n", clusterNS, "delete", "networkpolicy", widened, "--ignore-not-found").Run()
	})
	allowAll := reopenPolicy()
	// inForce waits until kube-router's rules show the change.
	inForce := func(want bool) time.Time {
		b.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if (exec.Command(netpol, "has-policy", clusterNS, widened).Run() == nil) == want {
				return time.Now()
			}
		}
		b.Fatalf("kube-router never got %s to present=%v", widened, want)
		return time.Time{}
	}

	dir := b.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(doc), 0o644); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	serve := exec.CommandContext(ctx, e.bin, "serve", "--backend", "kube", "--kubeconfig", e.kubeconfig, "--namespace", clusterNS, "--control-namespace", controlNS,
		"--policy", pol, "--probe-image", labImageRef, "--image-pull-policy", "Never", "--drift=false",
		"--schedule", "@every "+detectCycle.String(), "--listen", addr)
	var serveLog bytes.Buffer
	serve.Stdout, serve.Stderr = &serveLog, &serveLog
	serve.Cancel = func() error { return serve.Process.Signal(os.Interrupt) }
	serve.WaitDelay = 30 * time.Second
	if err := serve.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cancel(); serve.Wait() })

	// next returns the first run that started after t.
	next := func(t time.Time) (report.Run, bool) {
		b.Helper()
		for deadline := time.Now().Add(3 * detectCycle); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			resp, err := http.Get("http://" + addr + "/report.json")
			if err != nil {
				continue
			}
			var run report.Run
			err = json.NewDecoder(resp.Body).Decode(&run)
			resp.Body.Close()
			if err == nil && run.StartedAt.After(t) {
				return run, report.Count(run.Findings).Fail > 0
			}
		}
		b.Fatalf("no run started after %s within %s\n%s", t.Format(time.TimeOnly), 3*detectCycle, serveLog.String())
		return report.Run{}, false
	}
	first, failed := next(time.Time{})
	if failed {
		b.Fatalf("the first run, before any regression, failed:\n%s", failures(first))
	}
	green := time.Duration(first.Seconds * float64(time.Second))

	var maxStart, maxResult, maxUndo, sumResult time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		time.Sleep(rand.N(detectCycle))
		e.apply(b, allowAll)
		t0 := inForce(true)
		run, failed := next(t0)
		if !failed {
			b.Fatalf("trial %d: the first run after the regression (started %s) passed", i, run.StartedAt.Format(time.TimeOnly))
		}
		start := run.StartedAt.Sub(t0)
		result := run.StartedAt.Add(time.Duration(run.Seconds * float64(time.Second))).Sub(t0)
		maxStart, maxResult, sumResult = max(maxStart, start), max(maxResult, result), sumResult+result

		e.kubectlOut(b, "-n", clusterNS, "delete", "networkpolicy", widened)
		t1 := inForce(false)
		run, failed = next(t1)
		if failed {
			b.Fatalf("trial %d: the first run after the undo (started %s) failed:\n%s", i, run.StartedAt.Format(time.TimeOnly), failures(run))
		}
		maxUndo = max(maxUndo, run.StartedAt.Add(time.Duration(run.Seconds*float64(time.Second))).Sub(t1))
		green = max(green, time.Duration(run.Seconds*float64(time.Second)))
	}
	b.StopTimer()
	bound := detectCycle + green
	b.ReportMetric(maxResult.Seconds(), "detect-max-s")
	b.ReportMetric(detectCycle.Seconds(), "cycle-s")
	b.ReportMetric(green.Seconds(), "green-run-s")
	fmt.Printf("regression → failing run: every first run after the regression failed (%d/%d); it started within %.1fs of the regression (cycle %s), its result was out within %.1fs (mean %.1fs; bound: one cycle + one run = %.1fs); baseline, same run: a green run takes %.1fs; undo → green result within %.1fs\n",
		b.N, b.N, maxStart.Seconds(), detectCycle, maxResult.Seconds(), (sumResult / time.Duration(b.N)).Seconds(), bound.Seconds(), green.Seconds(), maxUndo.Seconds())
	if maxStart > detectCycle+time.Second || maxResult > bound+time.Second {
		b.Errorf("a regression took more than one cycle to reach a failing run: start %s, result %s", maxStart, maxResult)
	}
}

// failures lists a run's failed findings, one a line.
func failures(run report.Run) string {
	var bad []string
	for _, f := range run.Findings {
		if f.Status == report.Fail {
			bad = append(bad, f.Name()+": "+report.ExpectedActual(f))
		}
	}
	return strings.Join(bad, "\n")
}
