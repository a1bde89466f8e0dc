// Package drift compares live sandboxes with the declared policy from the
// outside: Kubernetes pods (containers, init and ephemeral containers), agent
// Sandbox objects, the NetworkPolicies and Cilium policies that select them,
// and Docker containers. Every difference becomes a finding that names the
// object, the rule, what was expected, what was found and the exact field or
// flag that fixes it.
//
// The rules are pure functions of one object plus the policy indexes built
// before it (the NetworkPolicy union needs every policy first), so objects
// can be streamed through an Engine page by page and memory stays flat
// however many pods a cluster runs. Where the objects come from — a live
// cluster (kube.go), a Docker engine (dockerlive.go) or files (files.go) —
// is kept apart from the rules.
package drift

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// The scan rules judge a run, not an object: they fail when a live source
// held no sandbox at all, or lacks a declared namespace.
const (
	ScanSandboxesFound  = "drift.scan.sandboxes-found"
	ScanNamespaceExists = "drift.scan.namespace-exists"
)

var scanRules = []row{
	{Rule{ScanSandboxesFound, "the selector and namespaces matched at least one live sandbox, so the other rules judged something", high,
		"fix the selector, the namespaces or the context so the sandboxes are found (or remove the policy)"}, nil},
	{Rule{ScanNamespaceExists, "every namespace the policy declares exists", medium,
		"create the namespace, or remove it from spec.namespaces"}, func(s *policy.Spec) bool { return len(s.Namespaces) > 0 }},
}

// Target names for findings.
func containerTarget(name string) string { return "container/" + name }

// SummaryTarget is the target of the passing summary findings: one per rule
// that found no drift, so JUnit stays one suite however many objects pass.
const SummaryTarget = "drift"

// Collector gathers the findings of one drift run. Only drifted objects
// contribute findings; clean objects only count, which keeps a report of
// ten thousand conformant pods as small as one of ten.
type Collector struct {
	Findings []report.Finding
	Notes    []string
	// Scanned counts sandboxes (pods, Sandbox objects, containers) checked.
	Scanned int
	// Drifted counts objects with at least one failing finding.
	Drifted int

	// spool, when set, takes the findings instead of Findings.
	spool *report.Spool
	// locate, when set, gives findings their file and line as they are
	// added (FileScan).
	locate func([]report.Finding)

	failed  map[string]int  // rule → failing findings
	skipped map[string]int  // rule → objects it could not judge
	checked map[string]bool // kinds that were checked at all: pod, netpol, cilium, docker
	noted   map[string]bool
	// unjudged are rules of a checked kind this run could not judge, with
	// why: their summary line is a skip saying so, never a pass.
	unjudged map[string]string
	// shared are the egress policies' findings, folded one per policy
	// object until the scan ends (shared.go).
	shared      map[string]*sharedFinding
	sharedOrder []string
}

// NewCollector returns an empty collector.
func NewCollector() *Collector {
	return &Collector{failed: map[string]int{}, skipped: map[string]int{}, checked: map[string]bool{}, noted: map[string]bool{}}
}

// NewSpoolingCollector returns an empty collector whose findings go to sp
// instead of Findings: a drift over a hundred thousand pods.
func NewSpoolingCollector(sp *report.Spool) *Collector {
	c := NewCollector()
	c.spool = sp
	return c
}

// emit records findings in order, in Findings or the spool.
func (c *Collector) emit(fs ...report.Finding) {
	for i := range fs {
		if fs[i].Severity == "" {
			fs[i].Severity = severities[fs[i].Check]
		}
	}
	if c.spool != nil {
		c.spool.Add(fs...)
		return
	}
	c.Findings = append(c.Findings, fs...)
}

// Add records findings for one object; it counts the object as scanned.
func (c *Collector) Add(fs []report.Finding) {
	c.Scanned++
	drifted := false
	for _, f := range fs {
		switch f.Status {
		case report.Fail:
			c.failed[f.Check]++
			drifted = true
		case report.Skip, report.Inconclusive:
			c.skipped[f.Check]++
		}
	}
	if drifted {
		c.Drifted++
	}
	if c.locate != nil {
		c.locate(fs)
	}
	c.emit(c.foldShared(fs)...)
}

// addLocated is Add for findings already located (FileScan's pods).
func (c *Collector) addLocated(fs []report.Finding) {
	locate := c.locate
	c.locate = nil
	c.Add(fs)
	c.locate = locate
}

// notJudged marks a rule of a checked kind as not judged in this run.
func (c *Collector) notJudged(rule, why string) {
	if c.unjudged == nil {
		c.unjudged = map[string]string{}
	}
	c.unjudged[rule] = why
}

// Checked marks a kind of rules as applied in this run ("pod", "netpol", …).
func (c *Collector) Checked(kind string) { c.checked[kind] = true }

// Note adds a note once, however often it is reported.
func (c *Collector) Note(format string, args ...any) {
	n := fmt.Sprintf(format, args...)
	if c.noted[n] {
		return
	}
	c.noted[n] = true
	c.Notes = append(c.Notes, n)
}

// AddError records that something could not be checked: an error finding,
// never a pass.
func (c *Collector) AddError(target, what string, err error) {
	c.emit(report.Finding{
		Check: RunCheck, Target: target, Subject: what, Status: report.Error,
		Expected: "the objects listed", Actual: err.Error(),
		Fix: "check connectivity and permissions (list/watch on the objects) and rerun",
	})
}

// RequireFound fails drift.scan.sandboxes-found when a live source (a
// cluster, a Docker engine) held no sandbox since before (col.Scanned then):
// every rule would have had nothing to judge, and silence is no pass.
func (c *Collector) RequireFound(p *policy.Policy, source string, before int) {
	c.Checked("scan")
	if c.Scanned > before {
		return
	}
	where := selectorText(p.Spec.Selector.MatchLabels)
	exp := "at least one sandbox: a pod, workload or Sandbox with labels " + where
	if len(p.Spec.Namespaces) > 0 {
		exp += ", or anything in namespaces " + strings.Join(p.Spec.Namespaces, ", ")
	}
	c.emit(report.Finding{
		Check: ScanSandboxesFound, Target: SummaryTarget, Subject: source, Status: report.Fail,
		Expected: exp, Actual: "no sandbox found in " + source + ": every other rule had nothing to judge",
		Fix:      "check the selector (a renamed or misspelt label), spec.namespaces and the kubeconfig context or engine; until sandboxes are found the run is not conformant",
		Evidence: "the selector stopped matching, the label was renamed, or this is the wrong cluster: none of them fails loudly on its own",
	})
	c.failed[ScanSandboxesFound]++
}

// MissingNamespace fails drift.scan.namespace-exists for a declared
// namespace the cluster does not have.
func (c *Collector) MissingNamespace(p *policy.Policy, ns, source string) {
	c.Checked("scan")
	idx := slices.Index(p.Spec.Namespaces, ns)
	c.emit(report.Finding{
		Check: ScanNamespaceExists, Target: "namespace/" + ns, Namespace: ns, Subject: fmt.Sprintf("spec.namespaces[%d]", idx), Status: report.Fail,
		Expected: "namespace " + ns + " exists", Actual: "not found in " + source,
		Fix:      "create namespace " + ns + " (where the sandboxes should run), or remove it from spec.namespaces",
		Evidence: "a sandbox namespace that does not exist holds no sandbox to check, and nothing the policy says about it is true anywhere",
	})
	c.failed[ScanNamespaceExists]++
}

// Summary appends one passing finding per applicable rule that found no
// drift, so a clean run still says what it proved.
func (c *Collector) Summary(p *policy.Policy) {
	c.flushShared()
	var out []report.Finding
	for i := range catalogue {
		r := &catalogue[i]
		if !c.checked[r.Kind()] || c.failed[r.ID] > 0 || !r.appliesTo(&p.Spec) {
			continue
		}
		f := report.Finding{
			Check: r.ID, Target: SummaryTarget, Status: report.Pass,
			Actual:   fmt.Sprintf("no drift in %d sandboxes", c.Scanned),
			Evidence: r.Proves,
		}
		switch r.ID {
		case ScanSandboxesFound:
			f.Actual = fmt.Sprintf("%d sandboxes found", c.Scanned)
			out = append(out, f)
			continue
		case ScanNamespaceExists:
			f.Actual = fmt.Sprintf("the %d declared namespaces exist", len(p.Spec.Namespaces))
			out = append(out, f)
			continue
		}
		switch {
		case c.unjudged[r.ID] != "":
			f.Status, f.Actual = report.Skip, c.unjudged[r.ID]
		case c.Scanned == 0:
			// Nothing was there to prove anything about: say so, not "pass".
			f.Status, f.Actual = report.Skip, "no sandbox found"
		case c.skipped[r.ID] > 0:
			// Some objects could not be judged: no pass for the rule.
			f.Status, f.Actual = report.Skip, fmt.Sprintf("not judged for %d of %d sandboxes (see their findings)", c.skipped[r.ID], c.Scanned)
		}
		out = append(out, f)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Check < out[j].Check })
	c.emit(out...)
}

// SelectorText says what a sandbox of the policy carries, for "none found"
// messages: its labels and, when it names them, its namespaces
// ("sandbox=true and nothing in namespaces agents").
func SelectorText(p *policy.Policy) string {
	var pairs []string
	for k, v := range p.Spec.Selector.MatchLabels {
		pairs = append(pairs, k+"="+v)
	}
	sort.Strings(pairs)
	s := strings.Join(pairs, ",")
	if len(p.Spec.Namespaces) > 0 {
		s += " and nothing in namespaces " + strings.Join(p.Spec.Namespaces, ", ")
	}
	return s
}
