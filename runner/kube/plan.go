package kube

import (
	"slices"
	"time"

	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// The planner decides, from what the executor has read (the sandbox node
// pool, the survey's strays, the runtime class of each namespace), where
// every probe pod of a run stands, which pool nodes are a could-not-run
// instead, which strays are named rather than probed, and whether the run
// dials from a control vantage. It does no I/O, so each rule has a table
// test (plan_test.go); Run (run.go) acts on its answer.

// planInput is everything the planner reads.
type planInput struct {
	namespaces []string
	// perNode puts one pod on each pool node (Backend.PerNode).
	perNode bool
	// scope is the cycle's scope (nil or Full: everything).
	scope *runner.Scope
	// pool and poolDown are the sandbox node pool (sandboxNodes), listed
	// only when needsPool says so.
	pool     []string
	poolDown []downNode
	// classOf is the runtime class of a namespace's probe.
	classOf func(ns string) string
	// strays plans a namespace's stray probes, at most max of them, and
	// returns those past max apart (survey.strays); nil when the run
	// probes no strays (the survey failed, no network checks, MaxStrays
	// negative).
	strays func(ns string, max int) ([]*stray, []livePod)
	// maxStrays bounds the stray probes of the run as a whole.
	maxStrays int
}

// runPlan is the planner's answer.
type runPlan struct {
	placements []placement
	// down are the could-not-runs of pool nodes that get no probe.
	down []error
	// nodesDown counts the pool nodes down for the whole run (per node).
	nodesDown int
	// unprobed names, per namespace, the strays past the bound.
	unprobed map[string]report.Finding
	// outsidePool counts the nodes of a narrow scope that are not in the
	// sandbox pool (they get no probe; the executor logs it).
	outsidePool int
}

// podDeadline is how long one probe pod may take: the spec's, then the
// policy's spec.probe.deadline, then two minutes.
func podDeadline(spec runner.ProbeSpec) time.Duration {
	if spec.Deadline > 0 {
		return spec.Deadline
	}
	if d := spec.Policy.Spec.Probe.Deadline.Duration; d > 0 {
		return d
	}
	return 2 * time.Minute
}

// narrowScope is the cycle's scope when it is not the whole fleet.
func narrowScope(scope *runner.Scope) *runner.Scope {
	if scope == nil || scope.Full {
		return nil
	}
	return scope
}

// needsPool says whether the plan needs the sandbox node pool listed: one
// pod per node, or a scope that names nodes.
func needsPool(perNode bool, scope *runner.Scope) bool {
	narrow := narrowScope(scope)
	return perNode || (narrow != nil && len(narrow.Nodes) > 0)
}

// surveyed are the namespaces whose egress policies the survey reads: the
// probe namespaces and, when the run has a control, the control's (for
// its summary).
func surveyed(namespaces []string, control bool, controlNS string) []string {
	if control && !slices.Contains(namespaces, controlNS) {
		return append(slices.Clone(namespaces), controlNS)
	}
	return namespaces
}

// nodeSet is where a namespace's probe pods go: "" is where the scheduler
// puts it; down are pool nodes that get a could-not-run instead.
type nodeSet struct {
	nodes []string
	down  []downNode
}

// nodeSets are the node sets of a run: the usual one (one pod where the
// scheduler puts it, or each pool node with perNode), and for a narrow
// scope the scope's pool nodes.
func (in planInput) nodeSets() (usual, scoped nodeSet, outside int) {
	usual = nodeSet{nodes: []string{""}}
	if in.perNode {
		usual = nodeSet{nodes: in.pool, down: in.poolDown}
	}
	narrow := narrowScope(in.scope)
	if narrow == nil {
		return usual, nodeSet{}, 0
	}
	scoped.nodes = slices.DeleteFunc(slices.Clone(in.pool), func(n string) bool { return !narrow.Nodes[n] })
	scoped.down = slices.DeleteFunc(slices.Clone(in.poolDown), func(d downNode) bool { return !narrow.Nodes[d.name] })
	outside = max(len(narrow.Nodes)-len(scoped.nodes)-len(scoped.down), 0)
	return usual, scoped, outside
}

// nodesFor is the node set of namespace ns. A cycle of a narrow scope
// (serve --watch) probes its namespaces on every node as usual, every
// other namespace only on the scope's nodes; without perNode a scope
// namespace gets one pod where the scheduler puts it plus the scope's nodes.
func (in planInput) nodesFor(ns string, usual, scoped nodeSet) nodeSet {
	narrow := narrowScope(in.scope)
	switch {
	case narrow != nil && !narrow.Namespaces[ns]:
		return scoped
	case narrow != nil && !in.perNode:
		return nodeSet{nodes: append(slices.Clone(usual.nodes), scoped.nodes...), down: scoped.down}
	}
	return usual
}

// plan places every probe pod of the run.
func (in planInput) plan() runPlan {
	usual, scoped, outside := in.nodeSets()
	p := runPlan{unprobed: map[string]report.Finding{}, outsidePool: outside}
	if in.perNode {
		p.nodesDown = len(in.poolDown)
	}
	budget := in.maxStrays
	for _, ns := range in.namespaces {
		set := in.nodesFor(ns, usual, scoped)
		for _, d := range set.down {
			p.down = append(p.down, &runner.CouldNotRun{Target: Target(ns, d.name), Where: report.Location{Namespace: ns, Node: d.name}, Reason: d.reason, Detail: d.detail})
		}
		class := in.classOf(ns)
		for _, node := range set.nodes {
			p.placements = append(p.placements, placement{ns: ns, node: node, runtimeClass: class})
		}
		if in.strays == nil || budget < 0 {
			continue
		}
		strays, over := in.strays(ns, budget)
		if narrow := narrowScope(in.scope); narrow != nil {
			strays = slices.DeleteFunc(strays, func(st *stray) bool { return !narrow.Covers(ns, st.pod.node) })
		}
		budget -= len(strays)
		for _, st := range strays {
			p.placements = append(p.placements, placement{ns: ns, node: st.pod.node, runtimeClass: st.pod.runtimeClass, stray: st})
		}
		if len(over) > 0 {
			p.unprobed[ns] = unprobedStrays(ns, over, in.maxStrays)
		}
	}
	return p
}

// nothingInScope says whether a narrow cycle has nothing to probe (a CNI
// agent restarted on a node outside the pool): no pod, no could-not-run,
// and the merge keeps the rest.
func (p runPlan) nothingInScope(scope *runner.Scope) bool {
	return narrowScope(scope) != nil && len(p.placements) == 0 && len(p.down) == 0
}
