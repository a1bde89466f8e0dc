package kube

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandprobe/sandprobe/runner"
)

// TestScopedCycle: a cycle of a narrow scope (serve --watch) probes
// exactly that part of the fleet: a namespace on every pool node, a node
// in every namespace (even without --per-node: pinned to it), a cordoned
// node of the scope is still a could-not-run naming it, and a node outside
// the pool is nothing to probe at all (no pod, no finding, no error).
func TestScopedCycle(t *testing.T) {
	a := newFixture(t)
	b := a.sibling("b")
	pool := map[string]string{"pool": "scoped"}
	a.node("sc-1", "6.1.0-1", pool)
	a.node("sc-2", "6.1.0-2", pool)
	a.node("sc-3", "6.1.0-3", pool)
	a.setNode("sc-3", func(n *corev1.Node) { n.Spec.Unschedulable = true }, nil)
	a.node("sc-out", "6.1.0-o", map[string]string{"pool": "other"})
	var mu sync.Mutex
	var pods []string // namespace/node of every probe pod created
	script := func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
		node := k.bind(ctx, pod, "sc-1")
		mu.Lock()
		pods = append(pods, pod.Namespace+"/"+node)
		mu.Unlock()
		k.running(ctx, pod)
		k.exit(ctx, pod, 0, "Completed", message(t, probeResult(pod, "4.4.0")))
	}
	a.kubelet(script)
	b.kubelet(script)
	doc := withNamespaces(strings.Replace(gvisorPolicy, "pool: sandbox", "pool: scoped", 1), a.ns, b.ns)
	cases := []struct {
		name           string
		perNode        bool
		scope          runner.Scope
		pods, problems []string
	}{
		{"namespace per node", true, runner.NamespaceScope(a.ns),
			[]string{a.ns + "/sc-1", a.ns + "/sc-2"}, []string{Target(a.ns, "sc-3") + " " + runner.ReasonNodeCordoned}},
		{"node per node", true, runner.NodeScope("sc-2"),
			[]string{a.ns + "/sc-2", b.ns + "/sc-2"}, nil},
		{"node without per-node", false, runner.NodeScope("sc-2"),
			[]string{a.ns + "/sc-2", b.ns + "/sc-2"}, nil},
		{"cordoned node", false, runner.NodeScope("sc-3"),
			nil, []string{Target(a.ns, "sc-3") + " " + runner.ReasonNodeCordoned, Target(b.ns, "sc-3") + " " + runner.ReasonNodeCordoned}},
		{"node outside the pool", true, runner.NodeScope("sc-out"), nil, nil},
		{"namespace and node", false, func() runner.Scope { s := runner.NamespaceScope(b.ns); s.Add(runner.NodeScope("sc-2")); return s }(),
			[]string{a.ns + "/sc-2", b.ns + "/sc-1", b.ns + "/sc-2"}, nil}, // b once where the scheduler puts it, and on sc-2
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mu.Lock()
			pods = nil
			mu.Unlock()
			be := a.backend()
			be.Namespace, be.PerNode = "", c.perNode
			spec := specFor(t, doc)
			spec.Scope = &c.scope
			results, err := be.Run(context.Background(), spec)
			var problems []string
			for _, p := range runner.Problems("kube", err) {
				problems = append(problems, p.Target+" "+p.Reason)
			}
			slices.Sort(problems)
			slices.Sort(c.problems)
			slices.Sort(c.pods)
			if !slices.Equal(problems, c.problems) {
				t.Errorf("problems %q, want %q", problems, c.problems)
			}
			mu.Lock()
			got := slices.Sorted(slices.Values(pods))
			mu.Unlock()
			// Without --per-node a namespace's pod lands where the
			// scheduler (the test's kubelet: sc-1) puts it.
			if !slices.Equal(got, c.pods) {
				t.Errorf("probe pods on %q, want %q", got, c.pods)
			}
			if len(c.pods) == 0 && len(c.problems) == 0 && len(results) != 0 {
				t.Errorf("results %v for a scope with nothing to probe", results)
			}
			for _, f := range []*fixture{a, b} {
				if left := f.leftovers(); len(left) > 0 {
					t.Errorf("left behind in %s: %v", f.ns, left)
				}
			}
		})
	}
}
