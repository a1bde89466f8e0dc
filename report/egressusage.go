package report

import "time"

// EgressUsage is what the egress record (proxy logs, flow exports) says of
// the policy's allowances: each one's use, the attempts the proxy denied,
// and what the declared policy would block that sandboxes reached (the
// egress audit stage). `sandprobe egress-usage` computes it; a run given
// --egress-log carries it for the page and the metrics. Lists are bounded
// (Folded and the *Total fields say what was left out).
type EgressUsage struct {
	Sources []UsageSource `json:"sources"`
	// From and To are the earliest and latest record read: the window the
	// verdicts speak of.
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
	// UnusedDays is how long an allowance may go unused before it is a
	// finding.
	UnusedDays int              `json:"unusedDays"`
	Allowances []AllowanceUsage `json:"allowances"`
	Denied     []DestinationUse `json:"denied,omitempty"`
	WouldBlock []DestinationUse `json:"wouldBlock,omitempty"`
	// DeniedTotal and WouldBlockTotal count every (sandbox, destination)
	// pair, listed or not.
	DeniedTotal     int `json:"deniedTotal"`
	WouldBlockTotal int `json:"wouldBlockTotal"`
	// ProbeRecords are the probe's own attempts (marked with its
	// User-Agent or proxy user), left out of every count above.
	ProbeRecords int64 `json:"probeRecords"`
	// Unmarked says the record keeps neither User-Agent nor proxy user, so
	// the probe's own attempts (at most one per allowance per run) could
	// not be told apart and are counted.
	Unmarked bool `json:"unmarked,omitempty"`
	// Folded counts records past the bound on distinct destinations, which
	// were counted together and matched to no allowance.
	Folded int64 `json:"folded,omitempty"`
}

// UsageSource is one log or flow file read.
type UsageSource struct {
	Name    string    `json:"name"`
	Format  string    `json:"format"`
	Lines   int64     `json:"lines"`
	Records int64     `json:"records"`
	Skipped int64     `json:"skipped"`
	From    time.Time `json:"from,omitzero"`
	To      time.Time `json:"to,omitzero"`
	// Error is why the source could not be read; its records are missing.
	Error string `json:"error,omitempty"`
}

// AllowanceUsage is one allowance of the policy, as the record used it.
type AllowanceUsage struct {
	Index  int    `json:"index"` // spec.egress.allow[Index]
	Host   string `json:"host"`
	Port   int    `json:"port"`
	Reason string `json:"reason"`
	// Requests the proxy let through to destinations this allowance covers
	// (the first allowance that covers a destination gets it).
	Requests int64 `json:"requests"`
	// BytesOut and BytesIn are -1 when no record of the format says.
	BytesOut int64     `json:"bytesOut"`
	BytesIn  int64     `json:"bytesIn"`
	LastUse  time.Time `json:"lastUse,omitzero"`
	// Sandboxes that used it (at most a few are named), and how many.
	Sandboxes    []string `json:"sandboxes,omitempty"`
	SandboxCount int      `json:"sandboxCount"`
	// Denied are attempts to it the proxy refused: the proxy's allow-list
	// and the policy disagree.
	Denied int64 `json:"denied,omitempty"`
	// Verdict is the allowance's finding: pass (used), fail (unused for
	// UnusedDays, or a risky wildcard), inconclusive (unused, but the
	// record covers fewer days).
	Verdict Status `json:"verdict"`
	Note    string `json:"note,omitempty"`
	// Risk names a wildcard over user content or a multi-tenant suffix.
	Risk string `json:"risk,omitempty"`
}

// DestinationUse is one destination one sandbox tried.
type DestinationUse struct {
	Sandbox string    `json:"sandbox"`
	Host    string    `json:"host"`
	Port    int       `json:"port"`
	Count   int64     `json:"count"`
	First   time.Time `json:"first,omitzero"`
	Last    time.Time `json:"last,omitzero"`
}
