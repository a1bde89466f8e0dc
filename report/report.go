// Package report owns sandprobe's result model — Finding, ProbeResult, Run —
// and the writers that turn a Run into JUnit XML, JSON, text and Prometheus
// metrics. Every check, backend and drift rule speaks this model; nothing
// else decides how a result looks on the outside.
package report

import (
	"sort"
	"strings"
	"time"
)

// Status is the outcome of one finding.
type Status string

// Statuses. Error means "could not check" and is never a pass.
const (
	Pass         Status = "pass"
	Fail         Status = "fail"
	Skip         Status = "skip"
	Inconclusive Status = "inconclusive"
	Error        Status = "error"
)

// Exit codes shared by every command.
const (
	ExitOK             = 0
	ExitNonConformant  = 1
	ExitBadInput       = 2
	ExitCouldNotRun    = 3
	ProbeResultSchema  = "sandprobe.dev/probe-result/v1"
	TerminationMsgSize = 4096
)

// Finding is one result line: a check applied to one subject at one target.
type Finding struct {
	Check     string `json:"check"`               // "fs.root-readonly", "egress.must-fail"
	Target    string `json:"target,omitempty"`    // where: "local/sandbox", "node/worker-3", "pod/ns/name"
	Subject   string `json:"subject,omitempty"`   // what inside the check: "CapEff", "example.com:443", "/tmp"
	Namespace string `json:"namespace,omitempty"` // for drift findings on namespaced objects
	Status    Status `json:"status"`
	Expected  string `json:"expected,omitempty"`
	Actual    string `json:"actual,omitempty"`
	Fix       string `json:"fix,omitempty"`
	Evidence  string `json:"evidence,omitempty"`
	// Class is the verdict class of a network attempt ("timeout", "answered", …).
	Class   string  `json:"class,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
	// Attempt is the evidence of the network attempt behind an egress
	// finding: when it ran, how long it waited, what stopped it.
	Attempt *Attempt `json:"attempt,omitempty"`
	// File and Line say where the object (or the field) to fix is written,
	// for drift findings on objects read from files (`drift -f`): what
	// SARIF annotates.
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
}

// Name is the finding's display name: the check and, if any, its subject.
func (f Finding) Name() string {
	if f.Subject == "" {
		return f.Check
	}
	return f.Check + " " + f.Subject
}

// RuntimeEvidence is what the probe could see of the isolation runtime it ran under.
type RuntimeEvidence struct {
	Kernel      string   `json:"kernel,omitempty"`      // uname release
	ProcVersion string   `json:"procVersion,omitempty"` // /proc/version
	Kind        string   `json:"kind,omitempty"`        // gvisor | vm | host
	Hypervisor  bool     `json:"hypervisor,omitempty"`  // the CPU's hypervisor flag
	DMI         string   `json:"dmi,omitempty"`         // sys_vendor / product_name
	Markers     []string `json:"markers,omitempty"`     // what made the kind
}

// ProbeResult is what `sandprobe probe` prints: one versioned JSON document.
type ProbeResult struct {
	Schema    string           `json:"schema"`
	Target    string           `json:"target,omitempty"` // set by the runner, not the probe
	Nonce     string           `json:"nonce"`
	Policy    string           `json:"policy"`
	Version   string           `json:"version,omitempty"`
	Hostname  string           `json:"hostname,omitempty"`
	StartedAt time.Time        `json:"startedAt"`
	Seconds   float64          `json:"seconds"`
	Runtime   *RuntimeEvidence `json:"runtime,omitempty"`
	Findings  []Finding        `json:"findings"`
	// Compact marks the shortened form written to a termination message;
	// OmittedPasses counts passing findings left out of it.
	Compact       bool `json:"compact,omitempty"`
	OmittedPasses int  `json:"omittedPasses,omitempty"`
}

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

// Counts tallies findings by status.
type Counts struct {
	Pass, Fail, Skip, Inconclusive, Error int
}

// Total is the number of findings.
func (c Counts) Total() int { return c.Pass + c.Fail + c.Skip + c.Inconclusive + c.Error }

// Count tallies a set of findings.
func Count(fs []Finding) Counts {
	var c Counts
	for i := range fs {
		c.add(fs[i].Status)
	}
	return c
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

func exitCode(c Counts) int {
	switch {
	case c.Error > 0 || c.Total() == 0:
		return ExitCouldNotRun
	case c.Fail > 0 || c.Inconclusive > 0:
		return ExitNonConformant
	}
	return ExitOK
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

// Targets lists the distinct targets in order of first appearance.
func Targets(fs []Finding) []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range fs {
		if !seen[f.Target] {
			seen[f.Target] = true
			out = append(out, f.Target)
		}
	}
	return out
}

// SortFindings orders findings by target, then check, then subject, keeping
// the original order of equal ones.
func SortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if a.Target != b.Target {
			return a.Target < b.Target
		}
		if a.Check != b.Check {
			return a.Check < b.Check
		}
		return a.Subject < b.Subject
	})
}

// Area is the first dotted component of a check ID ("egress" for "egress.must-fail").
func Area(check string) string {
	a, _, _ := strings.Cut(check, ".")
	return a
}
