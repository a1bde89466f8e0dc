package runner

import (
	"maps"
	"slices"
	"strings"

	"github.com/sandprobe/sandprobe/report"
)

// Scope is what one cycle probes: everything, or the probe locations of
// some sandbox namespaces (on every node) and of some nodes (in every
// sandbox namespace). serve --watch starts cycles of a narrow scope when a
// change can only have touched part of the fleet: a NetworkPolicy of one
// namespace, the CNI agent of one node. The zero Scope probes nothing.
type Scope struct {
	Full       bool
	Namespaces map[string]bool
	Nodes      map[string]bool
}

// FullScope is every namespace on every node: a scheduled cycle.
func FullScope() Scope { return Scope{Full: true} }

// NamespaceScope is the probe locations of these sandbox namespaces.
func NamespaceScope(ns ...string) Scope {
	return Scope{Namespaces: setOf(ns)}
}

// NodeScope is the probe locations on these nodes.
func NodeScope(nodes ...string) Scope {
	return Scope{Nodes: setOf(nodes)}
}

func setOf(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// Empty reports whether the scope probes nothing.
func (s Scope) Empty() bool { return !s.Full && len(s.Namespaces) == 0 && len(s.Nodes) == 0 }

// Add widens s to cover o too: a storm of changes costs one cycle over the
// union of what they touched.
func (s *Scope) Add(o Scope) {
	if s.Full || o.Full {
		*s = FullScope()
		return
	}
	add := func(dst *map[string]bool, src map[string]bool) {
		if len(src) == 0 {
			return
		}
		if *dst == nil {
			*dst = map[string]bool{}
		}
		maps.Copy(*dst, src)
	}
	add(&s.Namespaces, o.Namespaces)
	add(&s.Nodes, o.Nodes)
}

// Covers reports whether the scope probes the location of namespace ns on
// node ("" when the probe never got a node: it belongs to its namespace).
func (s Scope) Covers(ns, node string) bool {
	return s.Full || s.Namespaces[ns] || (node != "" && s.Nodes[node])
}

// Kinds names what the scope covers for sandprobe_watch_cycles_total:
// "full", or "namespaces" and/or "nodes" (a cycle over both counts under
// each).
func (s Scope) Kinds() []string {
	if s.Full {
		return []string{"full"}
	}
	var k []string
	if len(s.Namespaces) > 0 {
		k = append(k, "namespaces")
	}
	if len(s.Nodes) > 0 {
		k = append(k, "nodes")
	}
	return k
}

// String is the scope for logs: "full", "namespaces=a,b nodes=n1".
func (s Scope) String() string {
	if s.Full {
		return "full"
	}
	var parts []string
	if len(s.Namespaces) > 0 {
		parts = append(parts, "namespaces="+strings.Join(slices.Sorted(maps.Keys(s.Namespaces)), ","))
	}
	if len(s.Nodes) > 0 {
		parts = append(parts, "nodes="+strings.Join(slices.Sorted(maps.Keys(s.Nodes)), ","))
	}
	if len(parts) == 0 {
		return "empty"
	}
	return strings.Join(parts, " ")
}

// Drift reports whether a cycle of this scope re-runs drift: a full one,
// and one for namespaces (a policy object changed, and policies are what
// drift compares). A cycle for nodes only (a CNI agent restarted) changes
// nothing drift reads, so it keeps the last drift result.
func (s Scope) Drift() bool { return s.Full || len(s.Namespaces) > 0 }

// Merge is what the fleet looks like after a cycle of scope: targeted's
// results for every probe location it covered, and for every other one
// the results of last (an alert must not resolve because a narrow cycle
// did not look at that node). What belongs to no location (the control
// vantage, a cluster that did not answer, a crash) is the targeted run's.
// Drift findings are the targeted run's when it ran drift, else last's. A
// full scope that ran drift is targeted itself.
func Merge(last, targeted report.Run, scope Scope) report.Run {
	_, drifted := targeted.Phases["drift"]
	if scope.Full && drifted {
		return targeted
	}
	keep := func(where report.Location, check string) bool {
		if isDrift(check) {
			return !drifted
		}
		return where.Placed() && !scope.Covers(where.Namespace, where.Node)
	}
	out := targeted
	out.Findings = slices.Clone(targeted.Findings)
	for _, f := range last.Findings {
		if keep(f.Where, f.Check) {
			out.Findings = append(out.Findings, f)
		}
	}
	report.SortFindings(out.Findings)
	out.Probes = slices.Clone(targeted.Probes)
	for _, p := range last.Probes {
		if p.Vantage == "" && keep(p.Where, "") {
			out.Probes = append(out.Probes, p)
		}
	}
	slices.SortFunc(out.Probes, func(a, b report.ProbeResult) int { return strings.Compare(a.Target, b.Target) })
	notes := targeted.Notes
	if !drifted {
		out.Scanned = last.Scanned
		notes = append(slices.Clone(notes), last.Notes...)
		if secs, ok := last.Phases["drift"]; ok {
			out.Phases = maps.Clone(targeted.Phases)
			if out.Phases == nil {
				out.Phases = map[string]float64{}
			}
			out.Phases["drift"] = secs
		}
	}
	out.Notes = nil
	seen := map[string]bool{}
	for _, n := range notes {
		if !seen[n] && !strings.HasPrefix(n, mergeNote) && n != driftKeptNote {
			seen[n] = true
			out.Notes = append(out.Notes, n)
		}
	}
	if !scope.Full {
		out.Notes = append(out.Notes, mergeNote+scope.String()+" after a change: every other probe location shows the last cycle that probed it")
	}
	if !drifted {
		out.Notes = append(out.Notes, driftKeptNote)
	}
	return out
}

// mergeNote starts the note a merged run carries; driftKeptNote is the
// note of one whose drift findings are an earlier cycle's.
const (
	mergeNote     = "a targeted cycle for "
	driftKeptNote = "drift: the findings of the last cycle that ran it (this one did not)"
)

func isDrift(check string) bool { return strings.HasPrefix(check, "drift.") }

// WithDrift is run with its drift findings, count and phase replaced by
// those of drift, a drift phase run on its own after run was published
// (serve --watch shows a targeted cycle's probe verdict first). A drift
// run without a drift phase (the backend has none configured) changes
// nothing.
func WithDrift(run, drift report.Run) report.Run {
	if _, ok := drift.Phases["drift"]; !ok {
		return run
	}
	out := run
	out.Findings = slices.DeleteFunc(slices.Clone(run.Findings), func(f report.Finding) bool { return isDrift(f.Check) })
	out.Findings = append(out.Findings, drift.Findings...)
	report.SortFindings(out.Findings)
	out.Scanned = drift.Scanned
	out.Phases = maps.Clone(run.Phases)
	if out.Phases == nil {
		out.Phases = map[string]float64{}
	}
	out.Phases["drift"] = drift.Phases["drift"]
	out.Seconds += drift.Phases["drift"]
	out.Notes = slices.DeleteFunc(slices.Clone(run.Notes), func(n string) bool { return n == driftKeptNote })
	for _, n := range drift.Notes {
		if !slices.Contains(out.Notes, n) {
			out.Notes = append(out.Notes, n)
		}
	}
	return out
}
