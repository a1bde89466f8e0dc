package egresslog

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
)

type countSink struct{ n, denied int64 }

func (c *countSink) Add(r *Record) {
	c.n++
	if r.Decision == Denied {
		c.denied++
	}
}

// squidBenchLines writes n native Squid lines in sandprobe's format
// (docs/egress.md), shaped as audit's TestBenchEgressUsage shapes its log:
// bursts from one sandbox to one destination, most of a long tail denied.
func squidBenchLines(n int) []byte {
	var buf bytes.Buffer
	rng := rand.New(rand.NewPCG(1, 2))
	ms := int64(1793491200000)
	for line := 0; line < n; {
		client := fmt.Sprintf("10.244.%d.%d", rng.IntN(2), 2+rng.IntN(100))
		host := rng.IntN(150)
		denied := host >= 8 && rng.IntN(100) < 60
		for b := 1 + rng.IntN(8); b > 0 && line < n; b-- {
			ms += 2592
			if denied {
				fmt.Fprintf(&buf, "%d.%03d %6d %s TCP_DENIED/403 3900 CONNECT host%d.example.net:443 - HIER_NONE/- text/html 180 \"node/20\"\n", ms/1000, ms%1000, 0, client, host)
			} else {
				fmt.Fprintf(&buf, "%d.%03d %6d %s TCP_TUNNEL/200 %d CONNECT host%d.example.net:443 - HIER_DIRECT/203.0.113.%d - %d \"node/20\"\n", ms/1000, ms%1000, rng.IntN(30000), client, 2000+rng.IntN(900000), host, 1+rng.IntN(250), 200+rng.IntN(5000))
			}
			line++
		}
	}
	return buf.Bytes()
}

// BenchmarkScanSquid: the reader and the native Squid parser alone over
// 100,000 lines in memory, on one worker (ns/line is CPU per line) and on
// every core; allocs/line must stay 0 (memory flat whatever the size).
// The command's figure against grep is audit's TestBenchEgressUsage.
func BenchmarkScanSquid(b *testing.B) {
	const lines = 100000
	data := squidBenchLines(lines)
	for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			mallocs := ms.Mallocs
			cpu0 := cpuTime()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_, st, err := Scan(context.Background(), bytes.NewReader(data), Options{Format: FormatSquid, Workers: workers}, func() *countSink { return &countSink{} })
				if err != nil || st.Records != lines {
					b.Fatal(err, st.Records)
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lines), "ns/line")
			// CPU (user + system) per line: what a loaded machine cannot blur.
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
