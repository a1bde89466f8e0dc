// Package report owns the Run — one cycle's findings, as reported — and the
// writers that turn it into JUnit XML, JSON, SARIF, text and Prometheus
// metrics. Every check, backend and drift rule speaks the result model
// (package result, re-exported here: report.Finding is result.Finding);
// nothing else decides how a result looks on the outside.
package report

import (
	"cmp"
	"slices"
	"time"
)

// ReportSchema names the JSON report's version: a reader checks it before
// it trusts the fields (a new major version may rename them).
const ReportSchema = "sandprobe.dev/report/v1"

// Run is one cycle: probes and drift, as reported.
type Run struct {
	// Schema and Summary are set by the JSON writer (report.JSON), from
	// the findings: a reader gets the verdict without tallying them.
	Schema  string   `json:"schema,omitempty"`
	Summary *Summary `json:"summary,omitempty"`
	Policy  string   `json:"policy"`
	Version string   `json:"version"`
	// Commit and BuildDate identify the build that made the report
	// (internal/version); empty in an unstamped build.
	Commit    string             `json:"commit,omitempty"`
	BuildDate string             `json:"buildDate,omitempty"`
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
	// EgressUsage is what the egress record said of the allowances, when
	// the run read one (--egress-log).
	EgressUsage *EgressUsage `json:"egressUsage,omitempty"`
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

// CouldCheck reports whether the run reached verdicts about the sandboxes:
// exit 0 or 1; or exit 3 where every could-not-run is a node of the sandbox
// pool that got no probe (NodeUnprobed) and other nodes were probed. Such
// a run is still exit 3 — a node nobody checked is never a pass, and a CI
// gate or a Job must not go green on it — but it is not "nothing is known":
// sandprobe_up stays 1 and sandprobe_node_unprobed names the nodes.
func (r Run) CouldCheck() bool {
	switch r.ExitCode() {
	case ExitOK, ExitNonConformant:
		return true
	}
	onlyNodes, verdicts := true, false
	r.Set().Each(func(f *Finding) error {
		switch {
		case f.Status == Error:
			onlyNodes = onlyNodes && NodeUnprobed(*f)
		case f.Status != Skip && f.Where.OnPoolNode():
			verdicts = true
		}
		return nil
	}) // a spool that cannot be read leaves what was read: the writers report the error
	return onlyNodes && verdicts
}

// Succeeded reports whether the run is a success for the staleness alert
// (sandprobe_last_success_timestamp_seconds): it could check, and nothing
// it checked failed or stayed inconclusive — exit 0, or exit 3 where only
// nodes of the pool went unprobed (a cordoned node must not page the whole
// fleet as stale). A run that exits 1 found something wrong: no success.
func (r Run) Succeeded() bool {
	c := r.Counts()
	return c.Fail == 0 && c.Inconclusive == 0 && r.CouldCheck()
}

// Unprobed is a node of the sandbox pool that got no verdict in one
// sandbox namespace, and why (the runner's reason).
type Unprobed struct{ Node, Namespace, Reason string }

// Unprobed lists the run's unprobed nodes (NodeUnprobed), sorted.
func (r Run) Unprobed() []Unprobed {
	var out []Unprobed
	if r.Set().Counts().Error == 0 {
		return nil // an unprobed node is a could-not-run finding
	}
	r.Set().Each(func(f *Finding) error {
		if NodeUnprobed(*f) {
			out = append(out, Unprobed{Node: NodeLabel(*f), Namespace: unprobedNamespace(*f), Reason: f.Subject})
		}
		return nil
	})
	slices.SortFunc(out, func(a, b Unprobed) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Reason, b.Reason))
	})
	return slices.Compact(out)
}

// Summary is the JSON report's verdict: the counts by status, the findings
// that did not pass by severity, the verdict and the exit code the run
// exits with (0 conformant, 1 not conformant, 3 could not check).
type Summary struct {
	Findings     int            `json:"findings"`
	Pass         int            `json:"pass"`
	Fail         int            `json:"fail"`
	Inconclusive int            `json:"inconclusive"`
	Error        int            `json:"error"`
	Skip         int            `json:"skip"`
	BySeverity   map[string]int `json:"notPassingBySeverity,omitempty"`
	Verdict      string         `json:"verdict"`
	ExitCode     int            `json:"exitCode"`
	Unprobed     int            `json:"unprobedNodes,omitempty"`
}

// Verdicts of a Summary.
const (
	VerdictConformant    = "conformant"
	VerdictNotConformant = "not-conformant"
	VerdictCouldNotCheck = "could-not-check"
)

// Summarize tallies the run for its JSON report.
func (r Run) Summarize() *Summary {
	set := r.Set()
	c := set.Counts()
	s := &Summary{Findings: c.Total(), Pass: c.Pass, Fail: c.Fail, Inconclusive: c.Inconclusive, Error: c.Error, Skip: c.Skip, ExitCode: exitCode(c)}
	s.Verdict = map[int]string{ExitOK: VerdictConformant, ExitNonConformant: VerdictNotConformant}[s.ExitCode]
	if s.Verdict == "" {
		s.Verdict = VerdictCouldNotCheck
	}
	set.Each(func(f *Finding) error {
		if f.Status != Pass && f.Status != Skip && f.Severity != "" {
			if s.BySeverity == nil {
				s.BySeverity = map[string]int{}
			}
			s.BySeverity[string(f.Severity)]++
		}
		return nil
	}) // a spool read error: the writer reports it
	nodes := map[string]bool{}
	for _, u := range r.Unprobed() {
		nodes[u.Node] = true
	}
	s.Unprobed = len(nodes)
	return s
}

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
