package local_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/local"
)

// BenchmarkLocalProbe times a full local run of the non-network checks —
// sandbox built, probe run, result parsed — against the same sandbox
// starting /bin/true, measured in the same loop. It reports both and the ratio.
func BenchmarkLocalProbe(b *testing.B) {
	testenv.RequireRoot(b)
	p, err := policy.Load([]byte(testPolicy))
	if err != nil {
		b.Fatal(err)
	}
	bin := testenv.Binary(b)
	sb := local.SandboxFor(p, "")
	probe := &local.Backend{Sandbox: sb, Binary: bin}
	baseline := &local.Backend{Sandbox: sb, Binary: bin, Command: []string{"/bin/true"}}
	spec := runner.ProbeSpec{Policy: p, PolicyBytes: []byte(testPolicy), Nonce: "bench", Deadline: 30 * time.Second, NoNetwork: true}
	var probeT, baseT, inProbe time.Duration
	for b.Loop() {
		t0 := time.Now()
		res, err := probe.Run(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		probeT += time.Since(t0)
		inProbe += time.Duration(res[0].Seconds * float64(time.Second))
		t1 := time.Now()
		baseline.Run(context.Background(), spec) // /bin/true prints nothing: an error, by design
		baseT += time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(probeT.Milliseconds())/n, "ms/probe-run")
	b.ReportMetric(float64(inProbe.Microseconds())/n/1000, "ms/checks")
	b.ReportMetric(float64(baseT.Milliseconds())/n, "ms/true-run")
	b.ReportMetric(float64(probeT)/float64(baseT), "ratio")
}
