package drift

import (
	"strings"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// Rule is one entry of the drift catalogue.
type Rule struct {
	ID     string // "drift.pod.privileged"
	Proves string // what a clean result proves
	// Severity is how bad a failure is; every finding of the rule carries
	// it (docs/drift.md#severity says how they were chosen).
	Severity report.Severity
	Fix      string // the usual fix; each finding carries its exact one
}

// Kind is the object kind a rule applies to ("pod" for "drift.pod.privileged").
func (r Rule) Kind() string {
	_, rest, _ := strings.Cut(r.ID, ".")
	k, _, _ := strings.Cut(rest, ".")
	return k
}

// row is what every rule row has, whatever it checks: its catalogue entry
// and whether a policy asks for it.
type row struct {
	Rule
	// applies says whether the policy asks for the rule; nil means always.
	// A rule the policy does not ask for is not run, and a clean run gets no
	// passing summary line for it either.
	applies func(*policy.Spec) bool
}

func (r row) appliesTo(s *policy.Spec) bool { return r.applies == nil || r.applies(s) }

// applying are the rows of a table the policy asks for.
func applying[R interface{ appliesTo(*policy.Spec) bool }](rows []R, s *policy.Spec) []*R {
	var out []*R
	for i := range rows {
		if rows[i].appliesTo(s) {
			out = append(out, &rows[i])
		}
	}
	return out
}

// catalogue is every rule, in the order `sandprobe checks`, docs/drift.md
// and SARIF list them: the rows of the pod, egress, scan and Docker tables.
var catalogue = func() []row {
	var out []row
	for i := range podRules {
		out = append(out, podRules[i].row)
	}
	out = append(out, egressRules...)
	out = append(out, claimRules...)
	out = append(out, scanRules...)
	for i := range dockerRules {
		out = append(out, dockerRules[i].row)
	}
	return out
}()

// severities is each rule's severity by ID, for the findings the rows and
// the collector make: they carry it into every report.
var severities = func() map[string]report.Severity {
	out := make(map[string]report.Severity, len(catalogue)+1)
	for i := range catalogue {
		out[catalogue[i].ID] = catalogue[i].Severity
	}
	out[RunCheck] = RunSeverity
	return out
}()

// RunCheck is the finding of a drift that could not list or read what it
// should judge (an error, never a pass); RunSeverity is its severity.
const (
	RunCheck    = "drift.run"
	RunSeverity = medium
)

// Rules is the drift catalogue, built from the rule rows: `sandprobe
// drift`, `sandprobe checks`, the docs and the run summary all read it.
func Rules() []Rule {
	out := make([]Rule, len(catalogue))
	for i := range catalogue {
		out[i] = catalogue[i].Rule
	}
	return out
}

// Severities of the rows, named for the tables.
const (
	critical = report.Critical
	high     = report.High
	medium   = report.Medium
	low      = report.Low
)
