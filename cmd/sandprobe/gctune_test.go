package main

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestHeapLimit(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int64
	}{
		{0, streamLimitFloor},
		{20 << 20, streamLimitFloor}, // genpods at 100,000: the spool's index
		{32 << 20, streamLimitFloor}, // where the floor still leaves room
		{100 << 20, 166 << 20},       // Deployments kept from pass 1
		{400 << 20, 616 << 20},       // and four times as many
	} {
		if got := heapLimit(c.live); got != c.want {
			t.Errorf("heapLimit(%d MiB) = %d MiB, want %d MiB", c.live>>20, got>>20, c.want>>20)
		}
	}
}

// TestStreamingGCFollowsLiveHeap: with 128 MiB kept alive (a file whose
// workloads outgrow the floor), the limit set after the next collections
// leaves room above the live heap, where a fixed 64 MiB limit would have
// the collector run without pause; restoring puts back what was there.
func TestStreamingGCFollowsLiveHeap(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetMemoryLimit(-1)
	restore := streamingGC()
	if got := debug.SetMemoryLimit(-1); got != streamLimitFloor {
		t.Fatalf("limit at start: %d MiB, want %d MiB", got>>20, streamLimitFloor>>20)
	}
	kept := make([][]byte, 128)
	for i := range kept {
		kept[i] = make([]byte, 1<<20)
		kept[i][0] = 1
	}
	deadline := time.Now().Add(10 * time.Second)
	for debug.SetMemoryLimit(-1) <= 128<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("limit %d MiB after collections with 128 MiB live, want more than 128 MiB", debug.SetMemoryLimit(-1)>>20)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // the finalizer runs after the collection
	}
	runtime.KeepAlive(kept)
	restore()
	runtime.GC()
	time.Sleep(20 * time.Millisecond)
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("limit after restore: %d, want %d", got, before)
	}
}
