package egresslog

import (
	"bytes"
	"context"
	"fmt"
	"testing"
)

type countSink struct{ n, denied int64 }

func (c *countSink) Add(r *Record) {
	c.n++
	if r.Decision == Denied {
		c.denied++
	}
}

// BenchmarkScanSquid: the parser alone over 100,000 native Squid lines
// in memory, on every core (the command's figure against grep is
// cmd/sandprobe's TestBenchEgressUsage).
func BenchmarkScanSquid(b *testing.B) {
	var buf bytes.Buffer
	for i := 0; i < 100000; i++ {
		fmt.Fprintf(&buf, "1796189515.%03d %6d 10.0.%d.%d TCP_TUNNEL/200 %d CONNECT host%d.example.com:443 - HIER_DIRECT/1.2.3.4 -\n", i%1000, i%900, i%4, i%250, i*7, i%50)
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, st, err := Scan(context.Background(), bytes.NewReader(data), Options{Format: FormatSquid}, func() *countSink { return &countSink{} })
		if err != nil || st.Records != 100000 {
			b.Fatal(err, st.Records)
		}
	}
}
