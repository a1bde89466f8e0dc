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

// sandboxNodes lists the nodes a sandbox can land on: they carry the
// placement's nodeSelector labels, are not cordoned, and every NoSchedule
// or NoExecute taint is tolerated by the placement. No such node is a
// could-not-run: there is nowhere to prove anything.
func (b *Backend) sandboxNodes(ctx context.Context, spec runner.ProbeSpec) ([]string, error) {
	pl := spec.Policy.Spec.Placement
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := b.API.ListNodes(lctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(pl.NodeSelector).String()})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("list nodes: %w", ctx.Err())
		}
		return nil, &runner.CouldNotRun{Target: b.Target(spec), Reason: runner.ReasonLaunch, Detail: oneLine(fmt.Errorf("list nodes: %w", err))}
	}
	var names, skipped []string
	for i := range list.Items {
		n := &list.Items[i]
		if why := unfit(n, pl); why != "" {
			skipped = append(skipped, n.Name+" ("+why+")")
			continue
		}
		names = append(names, n.Name)
	}
	slices.Sort(names)
	if len(skipped) > 0 {
		b.log().Info("nodes that cannot host sandboxes get no probe", "skipped", skipped)
	}
	if len(names) == 0 {
		detail := fmt.Sprintf("no node can host sandboxes: none carries the labels {%s}", labels.SelectorFromSet(pl.NodeSelector))
		if len(skipped) > 0 {
			detail = fmt.Sprintf("no node can host sandboxes: %s", strings.Join(skipped, "; "))
		}
		return nil, &runner.CouldNotRun{Target: b.Target(spec), Reason: runner.ReasonUnschedulable, Detail: detail}
	}
	return names, nil
}

// unfit says why a node cannot take a sandbox pod, "" when it can.
func unfit(n *corev1.Node, pl policy.Placement) string {
	if n.Spec.Unschedulable {
		return "cordoned"
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		if !slices.ContainsFunc(pl.Tolerations, func(tol policy.Toleration) bool { return tolerates(tol, t) }) {
			return fmt.Sprintf("taint %s=%s:%s not tolerated", t.Key, t.Value, t.Effect)
		}
	}
	return ""
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
