package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// streamingGC sets the collector for drift -f and returns what restores
// it. Reading files streams: the live heap is the documents in flight, the
// spool's few MB in memory and its index (~20 MB at 100,000 pods), while
// every pod allocates tens of KB that die at once. At GOGC=100 that is a
// collection every ~20 MB allocated, a fifth of drift -f's CPU; a bigger
// heap costs too, in page faults (every page the heap grows into is one:
// a quarter of the CPU at a 96 MiB heap, when it was measured). GOGC=800
// under a 96 MiB soft limit collects when the heap reaches it, rarely
// before. 64 MiB was the fastest of limits 48–96 MiB on generated pods;
// since the first pass stopped keeping block-YAML trees, 96 MiB is as
// fast there (0.27 s at 10,000 pods either way, peak RSS 113 MB, was
// 84) and 10% faster on hand-written files (0.97 s → 0.88 s, 96 → 117
// MB), whose pods allocate five times the bytes: under the 150 MB drift
// -f is held to (docs/fleet.md) whatever the file size.
//
// The limit follows the live heap (heapLimit): files that keep more than
// the spool's index alive (Deployments and Lists read in pass 1, the
// templates they explain) grow it with their size, and under a fixed
// limit every collection freed less, until the collector ran without
// pause (hand-written manifests: 13 s of CPU at 10,000 pods, 65 s at
// 20,000). GOGC or GOMEMLIMIT in the environment win.
func streamingGC() func() {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	limit := debug.SetMemoryLimit(streamLimitFloor)
	percent := debug.SetGCPercent(800)
	t := &gcTracker{}
	t.arm()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.stop = true
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	}
}

// streamLimitFloor is the soft memory limit while the live heap is small.
const streamLimitFloor = 96 << 20

// heapLimit is the soft memory limit for a live heap of live bytes: the
// floor while the live heap is small, else room for half the live heap
// more (and 16 MiB) to be allocated before the next collection, so each
// collection frees at least half as much as survives it and the
// collector's work stays linear in the input, at 1.5 times the live heap.
func heapLimit(live uint64) int64 {
	return max(streamLimitFloor, int64(live+live/2)+16<<20)
}

// gcTracker sets the limit after every collection, from the live heap that
// collection measured. It runs as the finalizer of an object dropped at
// once, which the runtime calls after the collection that freed it, and
// arms itself again, until stop.
type gcTracker struct {
	mu   sync.Mutex
	stop bool
}

func (t *gcTracker) arm() {
	runtime.SetFinalizer(&gcSentinel{t: t}, func(s *gcSentinel) {
		s.t.mu.Lock()
		defer s.t.mu.Unlock()
		if s.t.stop {
			return
		}
		sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			debug.SetMemoryLimit(heapLimit(sample[0].Value.Uint64()))
		}
		s.t.arm()
	})
}

// gcSentinel is the object gcTracker waits on; it must not be tiny (the
// runtime batches tiny objects, and their finalizers may never run).
type gcSentinel struct {
	t *gcTracker
	_ [16]byte
}
