// Package catalogue lists every check sandprobe can report, whoever makes
// it — the probe's checks (probes.Catalogue), the drift rules
// (drift.Rules), admission's would-refuse, the egress record's, the package
// cache's and the runner's own — each once, with the severity its row
// declares. `sandprobe checks`, the reports' severities and the alert
// rules' test read it; the rows stay where their checks live.
package catalogue

import (
	"sync"

	"github.com/sandprobe/sandprobe/admission"
	"github.com/sandprobe/sandprobe/audit"
	"github.com/sandprobe/sandprobe/cache"
	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/kube"
)

// Sources of checks, as `sandprobe checks -o json` names them (its area).
const (
	SourceProbe        = "probe"
	SourceDrift        = "drift"
	SourceAdmission    = "admission"
	SourceEgressRecord = "egress-record"
	SourceCache        = "cache"
	SourceRunner       = "runner"
)

// Entry is one check.
type Entry struct {
	ID       string
	Source   string // one of the Source constants
	Severity report.Severity
	Role     report.Role // the probe's egress checks' (probes.Check.Role)
	Proves   string
	Fix      string
	Network  bool // the probe's checks that send traffic
}

// All lists every check: the probe's in catalogue order, then the drift
// rules, admission, the egress record's, the cache's and the runner's.
func All() []Entry {
	var out []Entry
	for _, c := range probes.Catalogue() {
		out = append(out, Entry{c.ID, SourceProbe, c.Severity, c.Role, c.Proves, c.Fix, c.Network})
	}
	for _, r := range drift.Rules() {
		out = append(out, Entry{r.ID, SourceDrift, r.Severity, "", r.Proves, r.Fix, false})
	}
	out = append(out, Entry{admission.CheckWouldRefuse, SourceAdmission, admission.Severity, "", admission.Proves, admission.Fix, false})
	for _, c := range audit.Checks() {
		out = append(out, Entry{c.ID, SourceEgressRecord, c.Severity, "", c.Proves, c.Fix, false})
	}
	for _, c := range cache.Checks() {
		out = append(out, Entry{c.ID, SourceCache, c.Severity, "", c.Proves, c.Fix, false})
	}
	for _, c := range append(runner.Checks(), kube.Checks()...) {
		out = append(out, Entry{c.ID, SourceRunner, c.Severity, "", c.Proves, "", false})
	}
	out = append(out, Entry{drift.RunCheck, SourceRunner, drift.RunSeverity, "", "the drift phase listed and read every object it was to judge (an error names what it could not)", "", false})
	return out
}

var entries = sync.OnceValue(func() map[string]Entry {
	m := map[string]Entry{}
	for _, e := range All() {
		m[e.ID] = e
	}
	return m
})

// Severity is a check's severity; "" for an ID no row declares.
func Severity(id string) report.Severity { return entries()[id].Severity }

// Role is a check's role; "" for an ID no row gives one.
func Role(id string) report.Role { return entries()[id].Role }

// Fill gives every finding without a severity or a role its check's (a
// run read back from a file carries no roles: no report shows them).
func Fill(fs []report.Finding) {
	for i := range fs {
		if fs[i].Severity == "" {
			fs[i].Severity = Severity(fs[i].Check)
		}
		if fs[i].Role == "" {
			fs[i].Role = Role(fs[i].Check)
		}
	}
}
