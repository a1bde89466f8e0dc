package findingset

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/sandprobe/sandprobe/result"
)

// findings makes n findings over a few targets, interleaved (a target's
// findings in several runs) or grouped (each target's in one run), with
// strings of every length up to a few KB, so records straddle any window
// and batch.
func findings(n int, grouped bool) []result.Finding {
	targets := []string{"", "pod/a", "pod/b", "container/c", "pod/d"}
	var fs []result.Finding
	for i := range n {
		t := targets[i%len(targets)]
		if grouped {
			t = targets[i*len(targets)/max(n, 1)]
		}
		f := result.Finding{Check: fmt.Sprintf("drift.pod.r%d", i%7), Target: t, Status: []result.Status{result.Pass, result.Fail, result.Inconclusive, result.Error}[i%4],
			Subject: fmt.Sprint("spec.containers[", i, "]"), Actual: string(make([]byte, (i*37)%3000)), Seconds: float64(i) / 8, Line: i}
		if i%11 == 0 {
			f.Attempt = &result.Attempt{Attempted: true, Started: float64(i), Errno: "ETIMEDOUT"}
		}
		if i%13 == 0 {
			f.Affects = []string{"pod/x", fmt.Sprint("pod/y", i)}
		}
		fs = append(fs, f)
	}
	return fs
}

func spoolOf(t *testing.T, fs []result.Finding, memMax int) *Spool {
	t.Helper()
	sp := NewSpool(t.TempDir(), memMax)
	t.Cleanup(func() { sp.Close() })
	sp.Add(fs...)
	if err := sp.Err(); err != nil {
		t.Fatal(err)
	}
	return sp
}

// everyGroup is each group's findings read with EachIn.
func everyGroup(t *testing.T, set Set) [][]result.Finding {
	t.Helper()
	var out [][]result.Finding
	for g := range set.Groups() {
		var in []result.Finding
		if err := set.EachIn(g, func(f *result.Finding) error { in = append(in, *f); return nil }); err != nil {
			t.Fatal(err)
		}
		out = append(out, in)
	}
	return out
}

// batched is every finding read through Batches, checking the numbering.
func batched(t *testing.T, set Set) []result.Finding {
	t.Helper()
	var out []result.Finding
	err := set.Batches(func(b Batch) error {
		if b.First != len(out) {
			t.Fatalf("batch starts at %d, want %d", b.First, len(out))
		}
		fs, err := b.Findings()
		if err != nil {
			return err
		}
		if len(fs) != b.N {
			t.Fatalf("batch of %d findings says %d", len(fs), b.N)
		}
		out = append(out, fs...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSpoolWindows: reading a spilled spool a window at a time gives every
// finding back, whatever the window: records cut by its end, records
// longer than the window, the last record ending the file.
func TestSpoolWindows(t *testing.T) {
	fs := findings(3000, false)
	want := everyGroup(t, Slice(fs))
	defer func(w int) { spoolWindow = w }(spoolWindow)
	for _, w := range []int{1, 7, 100, 4096, 1 << 20} {
		spoolWindow = w
		sp := spoolOf(t, fs, -1)
		got, err := sp.Slice()
		if err != nil {
			t.Fatalf("window %d: %v", w, err)
		}
		if !reflect.DeepEqual(got, fs) {
			t.Fatalf("window %d: Each gave other findings", w)
		}
		if !reflect.DeepEqual(everyGroup(t, sp), want) {
			t.Fatalf("window %d: EachIn gave other findings", w)
		}
	}
}

// TestSetsAgree: a slice and a spool (in memory, spilled, spilling part
// way) of the same findings are the same Set: groups, tallies, width,
// every finding in order whole, by group and in batches.
func TestSetsAgree(t *testing.T) {
	for _, grouped := range []bool{false, true} {
		for _, n := range []int{0, 1, 255, 256, 257, 513, 3000} {
			fs := findings(n, grouped)
			slice := Slice(fs)
			for name, sp := range map[string]*Spool{"memory": spoolOf(t, fs, 1<<30), "file": spoolOf(t, fs, -1), "spills": spoolOf(t, fs, 200<<10)} {
				where := fmt.Sprintf("n=%d grouped=%v %s", n, grouped, name)
				if sp.Len() != slice.Len() || sp.NameWidth() != slice.NameWidth() || sp.Counts() != slice.Counts() || !reflect.DeepEqual(sp.Groups(), slice.Groups()) {
					t.Fatalf("%s: spool says %d findings, width %d, %+v, groups %+v; slice %d, %d, %+v, %+v", where,
						sp.Len(), sp.NameWidth(), sp.Counts(), sp.Groups(), slice.Len(), slice.NameWidth(), slice.Counts(), slice.Groups())
				}
				if got := batched(t, sp); !reflect.DeepEqual(got, fs) && n > 0 {
					t.Fatalf("%s: Batches gave other findings", where)
				}
				if !reflect.DeepEqual(everyGroup(t, sp), everyGroup(t, slice)) {
					t.Fatalf("%s: EachIn gave other findings", where)
				}
				if grouped != sp.GroupRuns() && n > len(findings(0, false))+5 {
					t.Fatalf("%s: GroupRuns %v", where, sp.GroupRuns())
				}
				if sp.GroupRuns() && len(sp.Groups()) > 0 {
					b, err := sp.GroupBatch(0, len(sp.Groups()))
					if err != nil {
						t.Fatal(err)
					}
					got, err := b.Findings()
					if err != nil || !reflect.DeepEqual(got, fs) {
						t.Fatalf("%s: GroupBatch of every group gave other findings (%v)", where, err)
					}
					total := 0
					for g := range sp.Groups() {
						total += sp.GroupLen(g)
					}
					if total != n {
						t.Fatalf("%s: GroupLen sums to %d, want %d", where, total, n)
					}
				}
			}
			if got := batched(t, slice); !reflect.DeepEqual(got, fs) && n > 0 {
				t.Fatalf("n=%d: the slice's Batches gave other findings", n)
			}
		}
	}
}
