package page

import (
	"sync"
	"time"

	"github.com/sandprobe/sandprobe/report"
)

// DefaultHistory is how many runs `serve` keeps per target: at the default
// schedule (every 30 minutes) the last 12 hours.
const DefaultHistory = 24

// key names one row of the page across runs: a check on a subject at a
// target ("egress.must-fail", "10.99.20.11:443", "local/sp-sandbox").
type key struct{ target, check, subject string }

func keyOf(f report.Finding) key { return key{f.Target, f.Check, f.Subject} }

// verdict is what one run said about one row.
type verdict struct {
	status report.Status
	class  string
}

// snapshot is one finished run, reduced to its verdicts.
type snapshot struct {
	started  time.Time
	result   string
	verdicts map[key]verdict
}

// History keeps the verdicts of the last runs of a long-running process
// (serve), so the page shows a reopened host as a change over time: passed
// for hours, failing since the last run. It is safe for concurrent use: the
// schedule adds while handlers read.
type History struct {
	mu   sync.RWMutex
	max  int
	runs []snapshot // oldest first
}

// NewHistory keeps the last max runs (DefaultHistory when max ≤ 0).
func NewHistory(max int) *History {
	if max <= 0 {
		max = DefaultHistory
	}
	return &History{max: max}
}

// Add records a finished run. A finding repeated under one key (it should
// not be) keeps its worst status.
func (h *History) Add(run report.Run) {
	s := snapshot{started: run.StartedAt, result: run.Result(), verdicts: make(map[key]verdict, len(run.Findings))}
	for _, f := range run.Findings {
		k := keyOf(f)
		if old, ok := s.verdicts[k]; ok && rank(old.status) >= rank(f.Status) {
			continue
		}
		s.verdicts[k] = verdict{status: f.Status, class: f.Class}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.runs = append(h.runs, s)
	if len(h.runs) > h.max {
		h.runs = append(h.runs[:0:0], h.runs[len(h.runs)-h.max:]...)
	}
}

// Len is how many runs are kept.
func (h *History) Len() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.runs)
}

// snapshots copies the kept runs, oldest first, for one render.
func (h *History) snapshots() []snapshot {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return append([]snapshot(nil), h.runs...)
}

// rank orders statuses from best to worst, for "worst" and for changes.
func rank(s report.Status) int {
	switch s {
	case report.Pass:
		return 0
	case report.Skip:
		return 1
	case report.Inconclusive:
		return 2
	case report.Fail:
		return 3
	}
	return 4 // error, and anything unknown
}
