package docker_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/docker"
)

// BenchmarkVerifyImage times a whole verify-image of the Debian + Chromium
// image (inspect, create, probe with the browser, logs, remove) under each
// runtime, against the same container running /bin/true under the same
// constraints, measured in the same loop. It reports both and the ratio.
func BenchmarkVerifyImage(b *testing.B) {
	testenv.RequireRoot(b)
	host := testenv.DockerHost(b)
	testenv.DockerImage(b, host, debianImage)
	cli, err := docker.NewClient(host)
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	p, raw, err := policy.LoadFile(testenv.ModuleRoot(b) + "/fixtures/image-policy.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for _, rt := range []string{"runc", gvisor} {
		b.Run(rt, func(b *testing.B) {
			testenv.DockerRuntime(b, host, rt)
			be := &docker.Backend{Client: cli, Image: debianImage, Runtime: rt, RuntimeClass: "gvisor", Binary: testenv.Binary(b),
				Env: []string{"HOME=/tmp"}, EntrypointTimeout: 5 * time.Second}
			empty := *be
			empty.Command = []string{"/bin/true"}
			spec := runner.ProbeSpec{Policy: p, PolicyBytes: raw, Nonce: "bench", NoNetwork: true}
			var verify, baseline time.Duration
			for b.Loop() {
				t0 := time.Now()
				if _, err := be.Run(context.Background(), spec); err != nil {
					b.Fatal(err)
				}
				verify += time.Since(t0)
				t1 := time.Now()
				empty.Run(context.Background(), spec) // /bin/true prints nothing: an error, by design
				baseline += time.Since(t1)
			}
			n := float64(b.N)
			b.ReportMetric(float64(verify.Milliseconds())/n, "ms/verify-image")
			b.ReportMetric(float64(baseline.Milliseconds())/n, "ms/true-container")
			b.ReportMetric(float64(verify)/float64(baseline), "ratio")
		})
	}
}
