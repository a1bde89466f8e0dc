package kube

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// The planner's rules, one table each: where the probe pods stand
// (placements), which pool nodes are could-not-runs (nodes down), which
// strays are probed and which only named (strays), and what the control
// adds (control). No API server: the planner does no I/O.

// strayTable stands in for survey.strays: per namespace its strays in
// order, at most max of them probed, the rest returned apart.
func strayTable(byNS map[string][]string) func(string, int) ([]*stray, []livePod) {
	return func(ns string, max int) ([]*stray, []livePod) {
		var probed []*stray
		var over []livePod
		for _, spec := range byNS[ns] {
			name, node, _ := strings.Cut(spec, "@")
			p := livePod{name: name, node: node, runtimeClass: "runc"}
			if len(probed) >= max {
				over = append(over, p)
				continue
			}
			probed = append(probed, &stray{pod: p})
		}
		return probed, over
	}
}

// placed is a plan's placements as "ns/node[/as/pod] class" lines.
func placed(p runPlan) []string {
	var out []string
	for _, pl := range p.placements {
		out = append(out, pl.target(pl.node)+" "+pl.runtimeClass)
	}
	return out
}

// downed is a plan's could-not-runs as "target reason" lines.
func downed(p runPlan) []string {
	var out []string
	for _, err := range p.down {
		var c *runner.CouldNotRun
		if !errors.As(err, &c) {
			out = append(out, "not a could-not-run: "+err.Error())
			continue
		}
		out = append(out, c.Target+" "+c.Reason)
	}
	return out
}

func scopeOf(namespaces, nodes []string) *runner.Scope {
	s := runner.NamespaceScope(namespaces...)
	s.Add(runner.NodeScope(nodes...))
	return &s
}

func gvisorFor(string) string { return "gvisor" }

var (
	twoUp   = []string{"n1", "n2"}
	oneDown = []downNode{{name: "n3", reason: runner.ReasonNodeCordoned, detail: "cordoned"}}
)

func TestPlanPlacements(t *testing.T) {
	cases := []struct {
		name string
		in   planInput
		want []string
	}{
		{"one pod per namespace where the scheduler puts it",
			planInput{namespaces: []string{"a", "b"}, pool: twoUp},
			[]string{"namespace/a gvisor", "namespace/b gvisor"}},
		{"per node: each pool node in each namespace",
			planInput{namespaces: []string{"a", "b"}, perNode: true, pool: twoUp},
			[]string{"namespace/a/node/n1 gvisor", "namespace/a/node/n2 gvisor", "namespace/b/node/n1 gvisor", "namespace/b/node/n2 gvisor"}},
		{"per node with an empty pool places nothing",
			planInput{namespaces: []string{"a"}, perNode: true},
			nil},
		{"full scope is the usual plan",
			planInput{namespaces: []string{"a"}, perNode: true, pool: twoUp, scope: &runner.Scope{Full: true}},
			[]string{"namespace/a/node/n1 gvisor", "namespace/a/node/n2 gvisor"}},
		{"namespace scope: its namespace on every node, the others nowhere",
			planInput{namespaces: []string{"a", "b"}, perNode: true, pool: twoUp, scope: scopeOf([]string{"a"}, nil)},
			[]string{"namespace/a/node/n1 gvisor", "namespace/a/node/n2 gvisor"}},
		{"node scope per node: every namespace on that node only",
			planInput{namespaces: []string{"a", "b"}, perNode: true, pool: twoUp, scope: scopeOf(nil, []string{"n2"})},
			[]string{"namespace/a/node/n2 gvisor", "namespace/b/node/n2 gvisor"}},
		{"node scope without per node: pinned to the node",
			planInput{namespaces: []string{"a", "b"}, pool: twoUp, scope: scopeOf(nil, []string{"n2"})},
			[]string{"namespace/a/node/n2 gvisor", "namespace/b/node/n2 gvisor"}},
		{"namespace and node scope without per node: scheduler's pick and the node",
			planInput{namespaces: []string{"a", "b"}, pool: twoUp, scope: scopeOf([]string{"b"}, []string{"n2"})},
			[]string{"namespace/a/node/n2 gvisor", "namespace/b gvisor", "namespace/b/node/n2 gvisor"}},
		{"node outside the pool: nothing",
			planInput{namespaces: []string{"a"}, perNode: true, pool: twoUp, scope: scopeOf(nil, []string{"elsewhere"})},
			nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.in.classOf = gvisorFor
			if got := placed(c.in.plan()); !slices.Equal(got, c.want) {
				t.Errorf("placements:\n got %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestPlanNodesDown(t *testing.T) {
	cases := []struct {
		name      string
		in        planInput
		want      []string
		nodesDown int
	}{
		{"not per node: the scheduler avoids it, nothing named",
			planInput{namespaces: []string{"a"}, pool: twoUp, poolDown: oneDown}, nil, 0},
		{"per node: named in every namespace",
			planInput{namespaces: []string{"a", "b"}, perNode: true, pool: twoUp, poolDown: oneDown},
			[]string{"namespace/a/node/n3 " + runner.ReasonNodeCordoned, "namespace/b/node/n3 " + runner.ReasonNodeCordoned}, 1},
		{"node scope naming it: named even without per node",
			planInput{namespaces: []string{"a", "b"}, pool: twoUp, poolDown: oneDown, scope: scopeOf(nil, []string{"n3"})},
			[]string{"namespace/a/node/n3 " + runner.ReasonNodeCordoned, "namespace/b/node/n3 " + runner.ReasonNodeCordoned}, 0},
		{"node scope not naming it: not named",
			planInput{namespaces: []string{"a"}, perNode: true, pool: twoUp, poolDown: oneDown, scope: scopeOf(nil, []string{"n1"})},
			nil, 1},
		{"namespace scope per node: named in that namespace only",
			planInput{namespaces: []string{"a", "b"}, perNode: true, pool: twoUp, poolDown: oneDown, scope: scopeOf([]string{"a"}, nil)},
			[]string{"namespace/a/node/n3 " + runner.ReasonNodeCordoned}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.in.classOf = gvisorFor
			p := c.in.plan()
			if got := downed(p); !slices.Equal(got, c.want) {
				t.Errorf("could-not-runs:\n got %q\nwant %q", got, c.want)
			}
			if p.nodesDown != c.nodesDown {
				t.Errorf("nodesDown = %d, want %d", p.nodesDown, c.nodesDown)
			}
		})
	}
}

func TestPlanStrays(t *testing.T) {
	strays := strayTable(map[string][]string{
		"a": {"sa1@n1", "sa2@n2", "sa3@n1"},
		"b": {"sb1@n2", "sb2@n1"},
	})
	cases := []struct {
		name     string
		in       planInput
		probed   []string
		unprobed map[string]string // namespace: text in its finding
	}{
		{"each stray on its node with its class",
			planInput{namespaces: []string{"a", "b"}, strays: strays, maxStrays: 8},
			[]string{"namespace/a/node/n1/as/sa1 runc", "namespace/a/node/n2/as/sa2 runc", "namespace/a/node/n1/as/sa3 runc",
				"namespace/b/node/n2/as/sb1 runc", "namespace/b/node/n1/as/sb2 runc"}, nil},
		{"the bound is the run's, across namespaces; the rest are named with it",
			planInput{namespaces: []string{"a", "b"}, strays: strays, maxStrays: 4},
			[]string{"namespace/a/node/n1/as/sa1 runc", "namespace/a/node/n2/as/sa2 runc", "namespace/a/node/n1/as/sa3 runc",
				"namespace/b/node/n2/as/sb1 runc"},
			map[string]string{"b": "1 more such pods were not probed (at most 4 stray probes per run): sb2"}},
		{"a bound of none left names them all",
			planInput{namespaces: []string{"a"}, strays: strays, maxStrays: 0},
			nil, map[string]string{"a": "3 more such pods"}},
		{"negative bound: no stray probes, none named",
			planInput{namespaces: []string{"a"}, strays: strays, maxStrays: -1}, nil, nil},
		{"no strays planned (survey failed, no network checks)",
			planInput{namespaces: []string{"a"}, maxStrays: 8}, nil, nil},
		{"narrow scope: only the strays it covers",
			planInput{namespaces: []string{"a", "b"}, strays: strays, maxStrays: 8, pool: twoUp, scope: scopeOf(nil, []string{"n2"})},
			[]string{"namespace/a/node/n2 gvisor", "namespace/a/node/n2/as/sa2 runc", "namespace/b/node/n2 gvisor", "namespace/b/node/n2/as/sb1 runc"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.in.classOf = gvisorFor
			p := c.in.plan()
			got := slices.DeleteFunc(placed(p), func(s string) bool { return c.in.scope == nil && !strings.Contains(s, "/as/") })
			if !slices.Equal(got, c.probed) {
				t.Errorf("placements:\n got %q\nwant %q", got, c.probed)
			}
			if len(p.unprobed) != len(c.unprobed) {
				t.Errorf("unprobed in %d namespaces, want %d: %v", len(p.unprobed), len(c.unprobed), p.unprobed)
			}
			for ns, text := range c.unprobed {
				f, ok := p.unprobed[ns]
				if !ok || f.Check != CheckStrays || !strings.Contains(f.Actual, text) {
					t.Errorf("namespace %s: want a %s finding saying %q, got %+v", ns, CheckStrays, text, f)
				}
			}
		})
	}
}

func TestPlanControl(t *testing.T) {
	cases := []struct {
		name       string
		namespaces []string
		control    bool
		want       []string
	}{
		{"the control's namespace is surveyed too", []string{"a"}, true, []string{"a", "sandprobe-system"}},
		{"once when it is a probe namespace", []string{"a", "sandprobe-system"}, true, []string{"a", "sandprobe-system"}},
		{"not without a control", []string{"a"}, false, []string{"a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := surveyed(c.namespaces, c.control, RunnerNamespace); !slices.Equal(got, c.want) {
				t.Errorf("surveyed %q, want %q", got, c.want)
			}
		})
	}
	// A narrow cycle with nothing of its scope in the pool runs no pod and
	// no control; a narrow cycle with a node down still runs (it names it).
	outside := planInput{namespaces: []string{"a"}, perNode: true, pool: twoUp, scope: scopeOf(nil, []string{"elsewhere"}), classOf: gvisorFor}
	if p := outside.plan(); !p.nothingInScope(outside.scope) || p.outsidePool != 1 {
		t.Errorf("a scope outside the pool: nothingInScope=%v outsidePool=%d, want true 1", p.nothingInScope(outside.scope), p.outsidePool)
	}
	down := planInput{namespaces: []string{"a"}, pool: twoUp, poolDown: oneDown, scope: scopeOf(nil, []string{"n3"}), classOf: gvisorFor}
	if p := down.plan(); p.nothingInScope(down.scope) {
		t.Error("a scope whose node is down has nothing to probe; want its could-not-run")
	}
	full := planInput{namespaces: []string{"a"}, classOf: gvisorFor}
	if p := full.plan(); p.nothingInScope(nil) {
		t.Error("a full cycle is never nothing in scope")
	}
}

func TestPlanPoolAndDeadline(t *testing.T) {
	pools := []struct {
		perNode bool
		scope   *runner.Scope
		want    bool
	}{
		{false, nil, false},
		{true, nil, true},
		{false, &runner.Scope{Full: true, Nodes: map[string]bool{"n1": true}}, false},
		{false, scopeOf([]string{"a"}, nil), false},
		{false, scopeOf(nil, []string{"n1"}), true},
	}
	for _, c := range pools {
		if got := needsPool(c.perNode, c.scope); got != c.want {
			t.Errorf("needsPool(%v, %v) = %v, want %v", c.perNode, c.scope, got, c.want)
		}
	}
	p := &policy.Policy{}
	deadlines := []struct {
		spec, policy, want time.Duration
	}{
		{0, 0, 2 * time.Minute},
		{0, 30 * time.Second, 30 * time.Second},
		{time.Minute, 30 * time.Second, time.Minute},
	}
	for _, c := range deadlines {
		p.Spec.Probe.Deadline.Duration = c.policy
		if got := podDeadline(runner.ProbeSpec{Policy: p, Deadline: c.spec}); got != c.want {
			t.Errorf("podDeadline(spec %s, policy %s) = %s, want %s", c.spec, c.policy, got, c.want)
		}
	}
}

// TestPlacedAt: a DNS-only follow-up stands where its first probe stood:
// the namespace, the stray it stood in for, the node it was pinned to (any
// node when the scheduler picked); never the control's place.
func TestPlacedAt(t *testing.T) {
	s := &stray{pod: livePod{name: "web-1"}}
	p := runPlan{placements: []placement{
		{ns: "ctl", control: true},
		{ns: "a"},
		{ns: "b", node: "n1"}, {ns: "b", node: "n2"},
		{ns: "a", stray: s},
	}}
	for _, c := range []struct {
		where report.Location
		want  int // index in p.placements, -1 for none
	}{
		{report.Location{Namespace: "a", Node: "n7"}, 1},
		{report.Location{Namespace: "b", Node: "n2"}, 3},
		{report.Location{Namespace: "b", Node: "n3"}, -1},
		{report.Location{Namespace: "a", Node: "n7", Stray: "web-1"}, 4},
		{report.Location{Namespace: "ctl", Control: true}, -1},
	} {
		pl, ok := placedAt(p, c.where)
		got := slices.IndexFunc(p.placements, func(q placement) bool {
			return ok && q.ns == pl.ns && q.node == pl.node && q.stray == pl.stray && q.control == pl.control
		})
		if got != c.want {
			t.Errorf("%+v: placement %d, want %d", c.where, got, c.want)
		}
	}
}

// TestControlPlacements: a control beside each node a probe is pinned to,
// one unpinned control for probes the scheduler places, one control when
// the plan has no probe pinned at all.
func TestControlPlacements(t *testing.T) {
	for _, c := range []struct {
		name string
		pls  []placement
		want []string // the controls' nodes, "" for the unpinned one
	}{
		{"no probe pinned", []placement{{ns: "a"}, {ns: "b"}}, []string{""}},
		{"per node", []placement{{ns: "a", node: "n1"}, {ns: "b", node: "n1"}, {ns: "a", node: "n2"}}, []string{"n1", "n2"}},
		{"mixed", []placement{{ns: "a", node: "n2"}, {ns: "b"}, {ns: "a", stray: &stray{}, node: "n3"}}, []string{"n2", "n3", ""}},
		{"empty plan", nil, []string{""}},
	} {
		var got []string
		for _, pl := range controlPlacements("ctl", runPlan{placements: c.pls}) {
			if !pl.control || pl.ns != "ctl" {
				t.Errorf("%s: %+v is not a control in ctl", c.name, pl)
			}
			got = append(got, pl.node)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: controls on %q, want %q", c.name, got, c.want)
		}
	}
}

// TestControlOf: a pinned probe is judged against its own node's control —
// even a failed one — never against another node's answers; a probe the
// scheduler placed against the unpinned control.
func TestControlOf(t *testing.T) {
	n1, n2, free := &runner.Control{Vantage: "n1"}, &runner.Control{Vantage: "n2"}, &runner.Control{Vantage: "free"}
	failed := &runner.Control{Vantage: "n3", Err: errors.New("unschedulable")}
	cs := judgedControls{
		{pl: placement{node: "n1", control: true}, c: n1},
		{pl: placement{node: "n2", control: true}, c: n2},
		{pl: placement{node: "n3", control: true}, c: failed},
		{pl: placement{control: true}, c: free},
	}
	for _, c := range []struct {
		node string
		want *runner.Control
	}{{"n1", n1}, {"n2", n2}, {"n3", failed}, {"n9", free}, {"n4", free}} {
		if got := cs.of(report.Location{Namespace: "a", Node: c.node}); got != c.want {
			t.Errorf("a probe on %s is judged against %v, want %v", c.node, got.Vantage, c.want.Vantage)
		}
	}
	if got := (judgedControls{}).of(report.Location{Node: "n1"}); got != nil {
		t.Errorf("no control: %v", got)
	}
}

// TestControlPodPinned: a control beside a pinned probe goes to that node
// through the scheduler, tolerating what the policy's probes tolerate (a
// tainted sandbox pool), under a name of its own per node; the unpinned
// control carries neither.
func TestControlPodPinned(t *testing.T) {
	b := &Backend{}
	r := &run{id: "run0000001", spec: specFor(t, gvisorPolicy), deadline: time.Minute}
	n1 := b.controlPod(r, placement{ns: "ctl", control: true, node: "n1"})
	n2 := b.controlPod(r, placement{ns: "ctl", control: true, node: "n2"})
	free := b.controlPod(r, placement{ns: "ctl", control: true})
	if n1.Name == n2.Name || n1.Name == free.Name || len(n1.Name) > 63 {
		t.Errorf("names %q, %q, %q: want three different pod names", n1.Name, n2.Name, free.Name)
	}
	aff := n1.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
		!slices.Equal(aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values, []string{"n1"}) {
		t.Errorf("the n1 control is not pinned to n1: %+v", aff)
	}
	if len(n1.Spec.Tolerations) != 1 || n1.Spec.Tolerations[0].Key != "dedicated" || n1.Spec.Tolerations[0].Value != "sandbox" {
		t.Errorf("the n1 control tolerates %+v, want the policy's dedicated=sandbox", n1.Spec.Tolerations)
	}
	if n1.Spec.NodeSelector != nil || n1.Spec.RuntimeClassName != nil {
		t.Errorf("the control took the sandbox's node selector or runtime class: %v %v", n1.Spec.NodeSelector, n1.Spec.RuntimeClassName)
	}
	if free.Spec.Affinity != nil || free.Spec.Tolerations != nil {
		t.Errorf("the unpinned control is pinned: %+v %+v", free.Spec.Affinity, free.Spec.Tolerations)
	}
}
