package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/runner"
)

// downNode is a node of the sandbox pool that gets no probe this cycle:
// cordoned or not Ready. Sandboxes may still run on it (a cordon does not
// evict, a NotReady kubelet's pods keep running), so it is a could-not-run
// naming the node, never an omission.
type downNode struct {
	name, reason, detail string
}

// conditionTaintPrefix marks the taints the node lifecycle controller sets
// from a node's state (not-ready, unreachable, unschedulable, pressure):
// they say how a pool node is doing, not which pool it is in, so they do
// not take it out of the pool. Its state is judged from the node itself.
const conditionTaintPrefix = "node.kubernetes.io/"

// sandboxNodes lists the sandbox node pool: the nodes that carry the
// placement's nodeSelector labels and whose NoSchedule and NoExecute taints
// the placement tolerates. It returns the pool nodes to probe and those
// that cannot be probed (cordoned, not Ready). A pool with no node at all
// is a could-not-run: there is nowhere to prove anything.
func (b *Backend) sandboxNodes(ctx context.Context, spec runner.ProbeSpec) ([]string, []downNode, error) {
	pl := spec.Policy.Spec.Placement
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := b.API.ListNodes(lctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(pl.NodeSelector).String()})
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("list nodes: %w", ctx.Err())
		}
		return nil, nil, &runner.CouldNotRun{Target: b.Target(spec), Where: b.where(spec), Reason: runner.ReasonLaunch, Detail: oneLine(fmt.Errorf("list nodes: %w", err))}
	}
	var (
		names, outside []string
		down           []downNode
	)
	for i := range list.Items {
		n := &list.Items[i]
		if why := outsidePool(n, pl); why != "" {
			outside = append(outside, n.Name+" ("+why+")")
			continue
		}
		if d, ok := unavailable(n); ok {
			down = append(down, d)
			continue
		}
		names = append(names, n.Name)
	}
	slices.Sort(names)
	slices.SortFunc(down, func(a, b downNode) int { return strings.Compare(a.name, b.name) })
	if len(outside) > 0 {
		b.log().Info("nodes outside the sandbox pool get no probe", "outside", outside)
	}
	if len(names) == 0 && len(down) == 0 {
		detail := fmt.Sprintf("no node can host sandboxes: none carries the labels {%s}", labels.SelectorFromSet(pl.NodeSelector))
		if len(outside) > 0 {
			detail = fmt.Sprintf("no node can host sandboxes: %s", strings.Join(outside, "; "))
		}
		return nil, nil, &runner.CouldNotRun{Target: b.Target(spec), Where: b.where(spec), Reason: runner.ReasonUnschedulable, Detail: detail}
	}
	return names, down, nil
}

// outsidePool says why a node carrying the pool's labels still cannot take
// a sandbox pod (a taint the placement does not tolerate), "" when it is in
// the pool.
func outsidePool(n *corev1.Node, pl policy.Placement) string {
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectPreferNoSchedule || strings.HasPrefix(t.Key, conditionTaintPrefix) {
			continue
		}
		if !slices.ContainsFunc(pl.Tolerations, func(tol policy.Toleration) bool { return tolerates(tol, t) }) {
			return fmt.Sprintf("taint %s=%s:%s not tolerated", t.Key, t.Value, t.Effect)
		}
	}
	return ""
}

// unavailable says whether a pool node cannot run a probe pod now, and
// why: cordoned, or its kubelet not Ready.
func unavailable(n *corev1.Node) (downNode, bool) {
	if n.Spec.Unschedulable {
		return downNode{name: n.Name, reason: runner.ReasonNodeCordoned,
			detail: fmt.Sprintf("node %s of the sandbox pool is cordoned (spec.unschedulable): no probe pod can start there, and the sandboxes still on it go unproven this cycle", n.Name)}, true
	}
	i := slices.IndexFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == corev1.NodeReady })
	if i < 0 {
		return downNode{name: n.Name, reason: runner.ReasonNodeNotReady,
			detail: fmt.Sprintf("node %s of the sandbox pool reports no Ready condition: no probe pod can start there this cycle", n.Name)}, true
	}
	if c := n.Status.Conditions[i]; c.Status != corev1.ConditionTrue {
		why := strings.TrimSpace(strings.Join([]string{c.Reason, c.Message}, ": "))
		return downNode{name: n.Name, reason: runner.ReasonNodeNotReady,
			detail: fmt.Sprintf("node %s of the sandbox pool is not Ready (%s %s): no probe pod can start there, and the sandboxes still on it go unproven this cycle", n.Name, c.Status, strings.Trim(why, ": "))}, true
	}
	return downNode{}, false
}

// tolerates is the scheduler's rule for one toleration and one taint.
func tolerates(tol policy.Toleration, t corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != string(t.Effect) {
		return false
	}
	if tol.Key == "" {
		// An empty key with Exists tolerates everything.
		return tol.Operator == string(corev1.TolerationOpExists)
	}
	if tol.Key != t.Key {
		return false
	}
	switch tol.Operator {
	case string(corev1.TolerationOpExists):
		return true
	case "", string(corev1.TolerationOpEqual):
		return tol.Value == t.Value
	}
	return false
}
