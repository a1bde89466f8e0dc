package local_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/local"
)

// benchTimeout is T: each DROP target costs a sequential client T, the probe ~T in all.
const benchTimeout = time.Second

// egressBenchPolicy: 24 must-fail targets behind DROP (the lab's drop
// address on 12 ports, v4 and v6) and the 4 allowed hosts through the proxy.
func egressBenchPolicy() string {
	var ips []string
	for port := 1000; port < 1012; port++ {
		ips = append(ips, fmt.Sprintf(`"10.99.20.10:%d"`, port), fmt.Sprintf(`"[fd99:0:0:20::10]:%d"`, port))
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
    allow:
      - {host: api.lab.test, port: 443, reason: bench}
      - {host: api.lab.test, port: 80, reason: bench}
      - {host: git.lab.test, port: 443, reason: bench}
      - {host: objects.git.lab.test, port: 443, reason: bench}
    mustFail: {ips: [%s]}
    dns: {arbitraryNames: allow}
    timeout: %s
`, strings.Join(ips, ", "), benchTimeout)
}

// BenchmarkEgressVsCurl: the probe's egress wall time for 24 DROP targets
// plus 4 allowed hosts under one deadline T, against a sequential
// `curl --max-time T` loop over the same targets from the same namespace.
func BenchmarkEgressVsCurl(b *testing.B) {
	testenv.Lab(b)
	doc := egressBenchPolicy()
	p, err := policy.Load([]byte(doc))
	if err != nil {
		b.Fatal(err)
	}
	be := &local.Backend{Sandbox: local.SandboxFor(p, "sp-sandbox"), Binary: testenv.Binary(b)}
	var probeT, curlT time.Duration
	for b.Loop() {
		res, err := be.Run(context.Background(), runner.ProbeSpec{Policy: p, PolicyBytes: []byte(doc), Nonce: "bench", Deadline: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range res[0].Findings {
			if f.Status != "pass" && strings.HasPrefix(f.Check, "egress.") {
				b.Fatalf("%s %s: %s %s", f.Check, f.Subject, f.Status, f.Actual)
			}
		}
		probeT += time.Duration(res[0].Seconds * float64(time.Second))
		curlT += curlLoop(b)
	}
	n := time.Duration(b.N)
	b.ReportMetric((probeT / n).Seconds(), "s/probe")
	b.ReportMetric((curlT / n).Seconds(), "s/curl-loop")
	b.ReportMetric(float64(probeT)/float64(benchTimeout)/float64(b.N), "T/probe")
	b.ReportMetric(float64(curlT)/float64(probeT), "x-faster")
}

func curlLoop(b *testing.B) time.Duration {
	max := fmt.Sprint(benchTimeout.Seconds())
	var cmds [][]string
	for port := 1000; port < 1012; port++ {
		cmds = append(cmds, []string{"--max-time", max, fmt.Sprintf("http://10.99.20.10:%d/", port)})
		cmds = append(cmds, []string{"--max-time", max, fmt.Sprintf("http://[fd99:0:0:20::10]:%d/", port)})
	}
	for _, u := range []string{"https://api.lab.test/", "http://api.lab.test/", "https://git.lab.test/", "https://objects.git.lab.test/"} {
		cmds = append(cmds, []string{"--max-time", max, "-x", "http://10.99.31.28:3128", "--cacert", "/run/sandprobe-lab/ca.pem", u})
	}
	start := time.Now()
	for _, c := range cmds {
		args := append([]string{"netns", "exec", "sp-sandbox", "curl", "-s", "-o", "/dev/null"}, c...)
		exec.Command("ip", args...).Run() // the DROP targets fail by design
	}
	return time.Since(start)
}
