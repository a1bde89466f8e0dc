package local_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/local"
)

// benchTimeout is T: each DROP target costs a sequential client T.
const benchTimeout = time.Second

// egressBenchPolicy: 24 must-fail targets behind DROP (the lab's drop
// address on 12 ports, v4 and v6), the 4 allowed hosts through the proxy,
// and the lab's stand-ins for the metadata set (4 addresses on 80 and 443,
// all dropped). concurrency 0 leaves the default.
func egressBenchPolicy(concurrency int) string {
	var ips []string
	for port := 1000; port < 1012; port++ {
		ips = append(ips, fmt.Sprintf(`"10.99.20.10:%d"`, port), fmt.Sprintf(`"[fd99:0:0:20::10]:%d"`, port))
	}
	conc := ""
	if concurrency > 0 {
		conc = fmt.Sprintf("\n    concurrency: %d", concurrency)
	}
	return fmt.Sprintf(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: egress-bench}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  identity: {uid: 65532, gid: 65532}
  egress:
    proxy: http://proxy.lab.test:3128
    caFile: /run/sandprobe-lab/ca.pem
    fronting: {accepted: "the bench measures what a curl loop can do too"}
    allow:
      - {host: api.lab.test, port: 443, reason: bench}
      - {host: api.lab.test, port: 80, reason: bench}
      - {host: git.lab.test, port: 443, reason: bench}
      - {host: objects.git.lab.test, port: 443, reason: bench}
    mustFail: {ips: [%s]}
    metadata: {addresses: [10.99.169.254, "fd99:0:0:169::254", 10.99.169.2, 10.99.169.200], ports: [80, 443]}
    dns: {arbitraryNames: allow}
    timeout: %s%s
`, strings.Join(ips, ", "), benchTimeout, conc)
}

// BenchmarkEgressVsCurl: the probe's egress run against a sequential
// `curl --max-time T` loop over the very same attempts (the probe's own
// plan: every target directly, and through the proxy), from the same
// namespace, at concurrency 4 and at the default. It reports how many
// attempts were dialled (all must be), the bound the probe computes
// (ceil(attempts/concurrency) × T), the egress run's wall time against it
// (goal ≤ 1.3), and how many times faster than the loop it is.
func BenchmarkEgressVsCurl(b *testing.B) {
	testenv.Lab(b)
	for _, conc := range []int{4, 0} {
		name := fmt.Sprintf("concurrency=%d", conc)
		if conc == 0 {
			name = "concurrency=default"
		}
		b.Run(name, func(b *testing.B) { benchEgress(b, conc) })
	}
}

func benchEgress(b *testing.B, conc int) {
	doc := egressBenchPolicy(conc)
	p, err := policy.Load([]byte(doc))
	if err != nil {
		b.Fatal(err)
	}
	plan, _ := probes.PlanEgress(p.Spec.Egress)
	bound := probes.OptionsFor(p.Spec.Egress).Bound(len(plan))
	be := &local.Backend{Sandbox: local.SandboxFor(p, "sp-sandbox"), Binary: testenv.Binary(b)}
	var wall, curlT time.Duration
	dialled := 0
	for b.Loop() {
		res, err := be.Run(context.Background(), runner.ProbeSpec{Policy: p, PolicyBytes: []byte(doc), Nonce: "bench", Deadline: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		w, n := egressWall(b, res[0])
		if n != len(plan) {
			b.Fatalf("%d of %d attempts dialled", n, len(plan))
		}
		dialled, wall = dialled+n, wall+w
		curlT += curlLoop(b, p.Spec.Egress, plan)
	}
	n := time.Duration(b.N)
	b.ReportMetric(float64(len(plan)), "attempts")
	b.ReportMetric(float64(dialled)/float64(b.N), "dialled")
	b.ReportMetric(bound.Seconds(), "s-bound")
	b.ReportMetric((wall / n).Seconds(), "s-wall")
	b.ReportMetric(float64(wall/n)/float64(bound), "wall/bound")
	b.ReportMetric((curlT / n).Seconds(), "s-curl-loop")
	b.ReportMetric(float64(curlT)/float64(wall), "x-faster")
	if float64(wall/n) > 1.3*float64(bound) {
		b.Errorf("egress wall %s over 1.3 × the bound %s", wall/n, bound)
	}
}

// egressWall is the egress run's wall time (from its start to the end of
// its last attempt) and how many attempts were made, from the evidence
// every finding carries; every egress finding must have passed, or be
// inconclusive only for want of a control: the bench runs no control
// vantage (its drop targets' ports have no listener a control could
// reach), so it times the sandbox's attempts, not the proof of each deny.
func egressWall(b *testing.B, res report.ProbeResult) (time.Duration, int) {
	var end float64
	made := 0
	for _, f := range res.Findings {
		if !strings.HasPrefix(f.Check, "egress.") {
			continue
		}
		if f.Status != report.Pass && !(f.Status == report.Inconclusive && f.Deny == report.DenyUnproven) {
			b.Fatalf("%s: %s %s", f.Name(), f.Status, f.Actual)
		}
		if f.Attempt != nil && f.Attempt.Attempted {
			made++
			end = max(end, f.Attempt.Started+f.Attempt.Waited)
		}
	}
	return time.Duration(end * float64(time.Second)), made
}

// curlLoop makes the plan's attempts one after the other with curl, each
// with the same timeout, from the sandbox's namespace.
func curlLoop(b *testing.B, e policy.Egress, plan []probes.Attempt) time.Duration {
	max := strconv.FormatFloat(e.Timeout.Seconds(), 'f', -1, 64)
	start := time.Now()
	for _, a := range plan {
		scheme := a.Scheme
		if scheme == "tcp" {
			scheme = "http"
		}
		args := []string{"netns", "exec", "sp-sandbox", "curl", "-s", "-o", "/dev/null", "--max-time", max, "--cacert", e.CAFile}
		if a.ViaProxy {
			args = append(args, "-x", e.Proxy)
		}
		args = append(args, scheme+"://"+net.JoinHostPort(a.Host, strconv.Itoa(a.Port))+"/")
		exec.Command("ip", args...).Run() // the must-fail targets fail by design
	}
	return time.Since(start)
}
