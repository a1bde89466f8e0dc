// Package report owns the Run — one cycle's findings, as reported — and the
// writers that turn it into JUnit XML, JSON, SARIF, text and Prometheus
// metrics. Every check, backend and drift rule speaks the result model
// (package result, re-exported here: report.Finding is result.Finding);
// nothing else decides how a result looks on the outside.
package report

import (
	"time"
)

// Run is one cycle: probes and drift, as reported.
type Run struct {
	Policy    string             `json:"policy"`
	Version   string             `json:"version"`
	Backend   string             `json:"backend,omitempty"`
	StartedAt time.Time          `json:"startedAt"`
	Seconds   float64            `json:"seconds"`
	Phases    map[string]float64 `json:"phases,omitempty"` // seconds per phase: probe, drift
	Scanned   int                `json:"sandboxesScanned,omitempty"`
	// DeclaredNamespaces is how many namespaces the policy says sandboxes
	// live in: with a drift phase that scanned none, something is wrong.
	DeclaredNamespaces int       `json:"declaredNamespaces,omitempty"`
	Notes              []string  `json:"notes,omitempty"`
	Findings           []Finding `json:"findings"`
	// Probes are the raw probe results, kept for the JSON report.
	Probes []ProbeResult `json:"probes,omitempty"`
	// Spooled, when set, holds the findings instead of Findings (a run
	// over more objects than fit in memory as structs). Writers read
	// either through Set.
	Spooled *Spool `json:"-"`
}

// Counts tallies the run's findings.
func (r Run) Counts() Counts {
	if r.Spooled != nil {
		return r.Spooled.Counts()
	}
	return Count(r.Findings)
}

// ExitCode is 3 when anything could not be checked, 1 when anything failed
// or stayed inconclusive, 0 otherwise. A run with no findings at all proves
// nothing and is treated as could-not-run.
func (r Run) ExitCode() int { return exitCode(r.Counts()) }

func exitCode(c Counts) int { return c.ExitCode() }

// Result names the run's outcome for metrics and logs.
func (r Run) Result() string {
	switch r.ExitCode() {
	case ExitOK:
		return "pass"
	case ExitNonConformant:
		return "fail"
	}
	return "error"
}
