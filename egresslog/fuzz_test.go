package egresslog

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// numbered is a record with its line number and the line, for FuzzScan.
type numbered struct{ recs []string }

func (n *numbered) Add(r *Record) {
	n.recs = append(n.recs, fmt.Sprintf("%d %q %v t=%d user=%q", r.LineNo, r.Line, recOf(r), r.Time, r.User))
}

// FuzzScan reads any bytes as each format, as an agent can put nearly any
// bytes into what a proxy writes down (its URL, its User-Agent): no input
// panics, and a scan on one worker with one large chunk finds the same
// records, line numbers and counts as one on three workers with small
// chunks (every line shorter than a chunk, so that none is skipped as too
// long in one and read in the other).
func FuzzScan(f *testing.F) {
	// Each real record as its own format (its index in Formats, +1) and
	// as auto (0).
	for name, fm := range map[string]Format{"squid-native.log": FormatSquid, "squid-sandprobe.log": FormatSquid, "squid-common.log": FormatSquidCommon, "squid-combined.log": FormatSquidCombined, "tinyproxy.log": FormatTinyproxy, "audit.jsonl": FormatJSON, "envoy.log": FormatEnvoy, "hubble.jsonl": FormatHubble} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(slices.Index(Formats, fm)+1), uint16(200))
		f.Add(b, uint8(0), uint16(300))
	}
	f.Add(squidBenchLines(40), uint8(0), uint16(300))
	f.Add([]byte("1796189515.000 1 10.0.0.1 TCP_DENIED/403 0 CONNECT a:443 - HIER_NONE/- - 0 \"x\\\"y\"\r\n\n"), uint8(0), uint16(0))
	ref := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte, format uint8, chunk uint16) {
		longest := 0
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			longest = max(longest, len(line))
		}
		small := max(int(chunk)%2048, longest+2, 16)
		scan := func(fm Format, workers, size int) (Stats, string, []string) {
			sinks, st, err := Scan(context.Background(), bytes.NewReader(data), Options{Format: fm, Workers: workers, ChunkSize: size, Reference: ref}, func() *numbered { return &numbered{} })
			var all []string
			for _, s := range sinks {
				all = append(all, s.recs...)
			}
			slices.Sort(all)
			return st, fmt.Sprintf("%s lines=%d records=%d skipped=%d first=%d %q time=%d..%d err=%v", st.Format, st.Lines, st.Records, st.Skipped, st.FirstSkipped, st.FirstSkipReason, st.FirstTime, st.LastTime, err), all
		}
		fm := append([]Format{FormatAuto}, Formats...)[int(format)%(len(Formats)+1)]
		// A scan that never ends would stall the fuzzer without a word:
		// a minute on inputs this small is a hang, and says which.
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(time.Minute):
				panic(fmt.Sprintf("FuzzScan: %s, %d-byte chunks: still scanning after a minute: %q", fm, small, data))
			}
		}()
		st, wantSt, want := scan(fm, 1, 1<<20)
		if fm == FormatAuto {
			// What a format's first lines look like is read from the first
			// chunk, which in use holds at least 256 KiB or the whole
			// input: a small chunk would show fewer lines. The small scan
			// takes the format the large one found.
			if st.Format == FormatAuto {
				return
			}
			fm = st.Format
		}
		_, gotSt, got := scan(fm, 3, small)
		if gotSt != wantSt {
			t.Fatalf("%s: three workers, %d-byte chunks: %s\none worker, one chunk: %s", fm, small, gotSt, wantSt)
		}
		if !slices.Equal(got, want) {
			for i := range min(len(got), len(want)) {
				if got[i] != want[i] {
					t.Fatalf("%s: three workers, %d-byte chunks read %d records, one worker %d; first difference:\n%s\n%s", fm, small, len(got), len(want), got[i], want[i])
				}
			}
			t.Fatalf("%s: three workers, %d-byte chunks read %d records, one worker %d", fm, small, len(got), len(want))
		}
	})
}
