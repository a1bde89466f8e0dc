package kube

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// tracker folds the states of a run's pods into one progress line: the
// pod's own state when there is one, counts per state for a fan-out.
type tracker struct {
	mu     sync.Mutex
	emit   func(string)
	now    func() time.Time
	start  time.Time
	states map[string]string // pod → "pending: waiting for a node", "running", …
}

func newTracker(emit func(string), now func() time.Time) *tracker {
	return &tracker{emit: emit, now: now, start: now(), states: map[string]string{}}
}

// set records a pod's state ("" when the pod is done) and shows the line.
func (t *tracker) set(pod, state string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if state == "" {
		delete(t.states, pod)
	} else {
		t.states[pod] = state
	}
	t.show()
}

func (t *tracker) show() {
	elapsed := t.now().Sub(t.start).Round(time.Second)
	switch len(t.states) {
	case 0:
		return
	case 1:
		for pod, st := range t.states {
			t.emit(fmt.Sprintf("probe pod %s: %s (%s)", pod, st, elapsed))
		}
		return
	}
	counts := map[string]int{}
	for _, st := range t.states {
		word, _, _ := strings.Cut(st, ":")
		counts[word]++
	}
	var parts []string
	for _, w := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d %s", counts[w], w))
	}
	t.emit(fmt.Sprintf("%d probe pods: %s (%s)", len(t.states), strings.Join(parts, ", "), elapsed))
}
