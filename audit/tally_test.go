package audit

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/egresslog"
)

// The table of pairs gives way to a map when sandboxes times hosts grows
// past its bound, mid-scan or in a merge, and the counts stay the same:
// many clients and many hosts, ports and decisions, in bursts and not.
func TestTallyPairsOutgrowTheTable(t *testing.T) {
	var b strings.Builder
	end := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	for i := 0; i < 3000; i++ {
		client := fmt.Sprintf("10.99.%d.%d", i%7, i%13)
		url := fmt.Sprintf("h%d.lab.test:%d", (i*31)%97, 443+i%3)
		tag, status := "TCP_TUNNEL", 200
		if i%5 == 0 {
			tag, status = "TCP_DENIED", 403
		}
		for k := 0; k < 1+i%3; k++ {
			b.WriteString(squidLine(end.Add(time.Duration(i)*time.Second), client, tag, status, "CONNECT", url, "agent/1"))
		}
	}
	dump := func(maxCells int) string {
		sinks, _, err := egresslog.Scan(context.Background(), strings.NewReader(b.String()), egresslog.Options{Format: egresslog.FormatSquid, Workers: 3, ChunkSize: 4096},
			func() *Tally { t := NewTally(); t.maxCells = maxCells; return t })
		if err != nil {
			t.Fatal(err)
		}
		total := sinks[0]
		for _, o := range sinks[1:] {
			total.Merge(o)
		}
		var lines []string
		total.each(func(e entry) {
			lines = append(lines, fmt.Sprintf("%s %s %d %s %+v", e.sandbox, e.host, e.port, e.decision, e.stats))
		})
		slices.Sort(lines)
		if maxCells < maxDense && total.pairs == nil {
			t.Errorf("maxCells %d: the table never gave way to the map", maxCells)
		}
		return strings.Join(lines, "\n")
	}
	dense, small := dump(maxDense), dump(50)
	if dense != small || strings.Count(dense, "\n") < 200 {
		t.Errorf("the map's counts differ from the table's (or too few keys):\n%s\n---\n%s", firstDiff(dense, small), "")
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return al[i] + "\n" + bl[i]
		}
	}
	return fmt.Sprintf("%d lines vs %d", len(al), len(bl))
}

// firstSorted gives what sorting the whole list and keeping the first n
// gives, for every n, with ties and without.
func TestFirstSorted(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, size := range []int{0, 1, 2, 7, 100, 1000} {
		for _, spread := range []int{3, 1 << 30} { // many ties, next to none
			list := make([]int, size)
			for i := range list {
				list[i] = rng.IntN(spread)
			}
			want := slices.Clone(list)
			slices.Sort(want)
			for _, n := range []int{0, 1, 2, size / 2, size - 1, size, size + 3} {
				if n < 0 {
					continue
				}
				got := firstSorted(slices.Clone(list), n, cmp.Compare[int])
				if !slices.Equal(got, want[:min(n, size)]) {
					t.Fatalf("size %d spread %d n %d: %v, want %v", size, spread, n, got, want[:min(n, size)])
				}
			}
		}
	}
}
