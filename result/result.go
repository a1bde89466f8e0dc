// Package result is sandprobe's result model — Status, Finding, Attempt,
// ProbeResult and the termination-message form the probe leaves behind —
// with the pure helpers that read it. It imports the standard library only:
// the probe (probes/, cmd/sandprobe-probe) runs inside every sandbox and
// links this package, not the writers (report/: JUnit, SARIF, Prometheus),
// which pull in their libraries. report re-exports every name here.
package result

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
	// Severity is the check's or drift rule's, from its catalogue row
	// (filled by whoever reports the finding, not by the probe).
	Severity Severity `json:"severity,omitempty"`
	Expected string   `json:"expected,omitempty"`
	Actual   string   `json:"actual,omitempty"`
	Fix      string   `json:"fix,omitempty"`
	Evidence string   `json:"evidence,omitempty"`
	// Class is the verdict class of a network attempt ("timeout", "answered", …).
	Class   string  `json:"class,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
	// Attempt is the evidence of the network attempt behind an egress
	// finding: when it ran, how long it waited, what stopped it.
	Attempt *Attempt `json:"attempt,omitempty"`
	// Control is the class a control vantage saw for the same destination
	// (a place no sandbox policy governs: a pod in the runner's namespace,
	// a network namespace on the lab's side of the link); "" when none
	// dialled it.
	Control string `json:"control,omitempty"`
	// Deny says whether a blocked destination's deny is proven (the control
	// got an answer, or the proxy refused it itself) or unproven (the
	// target refuses or ignores everyone, or no control could tell): set
	// on the deny verdicts of egress.must-fail, egress.metadata and
	// egress.proxy-bypass. An unproven deny is never a pass.
	Deny string `json:"deny,omitempty"`
	// Role is the check's role, from its catalogue row: what the runner,
	// the metrics and the page make of the finding. Not in any report (the
	// check says it); a probe's result declares it in Roles.
	Role Role `json:"-"`
	// Judge is how the runner judges the check's denies, from its
	// catalogue row; like Role, in no report, declared in Judges.
	Judge Judge `json:"-"`
	// Where is where the probe stood (the Kubernetes backend's typed
	// location; zero for other backends): Target is its String(). Not in
	// any report but as Target.
	Where Location `json:"-"`
	// File and Line say where the object (or the field) to fix is written,
	// for drift findings on objects read from files (`drift -f`): what
	// SARIF annotates.
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	// Affects lists the sandboxes a finding about a shared object (an
	// egress policy that selects many pods) applies to, as targets
	// ("pod/NS/NAME"): the object is reported once, with them, not once
	// per sandbox. At most MaxAffects are listed; Evidence gives the count.
	Affects []string `json:"affects,omitempty"`
}

// MaxAffects bounds Finding.Affects: past it the evidence counts the rest.
const MaxAffects = 1000

// Values of Finding.Deny.
const (
	DenyProven   = "proven"
	DenyUnproven = "unproven"
)

// Name is the finding's display name: the check and, if any, its subject.
func (f Finding) Name() string {
	if f.Subject == "" {
		return f.Check
	}
	return f.Check + " " + f.Subject
}

// ExpectedActual is the one-line "expected X, actual Y" of a finding.
func ExpectedActual(f Finding) string {
	switch {
	case f.Expected != "" && f.Actual != "":
		return "expected " + f.Expected + ", actual " + f.Actual
	case f.Actual != "":
		return f.Actual
	}
	return string(f.Status)
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
	Schema string `json:"schema"`
	Target string `json:"target,omitempty"` // set by the runner, not the probe
	// Where is the typed location behind Target (the Kubernetes
	// backend's; zero for others), set by the runner.
	Where     Location         `json:"-"`
	Nonce     string           `json:"nonce"`
	Policy    string           `json:"policy"`
	Version   string           `json:"version,omitempty"`
	Hostname  string           `json:"hostname,omitempty"`
	StartedAt time.Time        `json:"startedAt"`
	Seconds   float64          `json:"seconds"`
	Runtime   *RuntimeEvidence `json:"runtime,omitempty"`
	Findings  []Finding        `json:"findings"`
	// Vantage is "control" for the result of a control vantage (what each
	// destination answered outside every sandbox policy): its findings are
	// observations merged into the probes' deny verdicts, not verdicts.
	Vantage string `json:"vantage,omitempty"`
	// Compact marks the shortened form written to a termination message;
	// OmittedPasses counts passing findings left out of it.
	Compact       bool `json:"compact,omitempty"`
	OmittedPasses int  `json:"omittedPasses,omitempty"`
	// Roles declares the role of each check of Findings that has one (its
	// catalogue row's): the runner stamps them on the findings
	// (StampRoles) and drops the declaration, so no report shows it.
	Roles map[string]Role `json:"roles,omitempty"`
	// Judges declares the judge of each check of Findings that has one
	// (its catalogue row's), stamped and dropped with Roles.
	Judges map[string]Judge `json:"judges,omitempty"`
}

// Counts tallies findings by status.
type Counts struct {
	Pass, Fail, Skip, Inconclusive, Error int
}

// Total is the number of findings.
func (c Counts) Total() int { return c.Pass + c.Fail + c.Skip + c.Inconclusive + c.Error }

// Add counts one finding of status s; an unknown status counts as an
// error, never a pass.
func (c *Counts) Add(s Status) {
	switch s {
	case Pass:
		c.Pass++
	case Fail:
		c.Fail++
	case Skip:
		c.Skip++
	case Inconclusive:
		c.Inconclusive++
	default:
		c.Error++
	}
}

// Count tallies a set of findings.
func Count(fs []Finding) Counts {
	var c Counts
	for i := range fs {
		c.Add(fs[i].Status)
	}
	return c
}

// ExitCode is 3 when anything could not be checked, 1 when anything failed
// or stayed inconclusive, 0 otherwise. No findings at all proves nothing
// and is treated as could-not-run.
func (c Counts) ExitCode() int {
	switch {
	case c.Error > 0 || c.Total() == 0:
		return ExitCouldNotRun
	case c.Fail > 0 || c.Inconclusive > 0:
		return ExitNonConformant
	}
	return ExitOK
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
