package kube

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// TestKwokNodePoolSimulated: the per-node run the shipped CronJob makes
// probes exactly the sandbox pool of a simulated fleet whose nodes are in
// the states fleets have — one cordoned (with the taint the node lifecycle
// controller adds), one tainted without the policy's toleration, one
// relabelled out of the nodeSelector, one whose kubelet is NotReady. The
// pool's healthy nodes each report; the cordoned and the NotReady one are
// could-not-run findings naming them (exit 3, never a silent skip); the
// nodes outside the pool get no pod and no finding. Then the same fleet
// with a run deadline too short for its nodes: every pool node is either
// probed or a deadline-exceeded finding naming it, none passes unprobed,
// and no pod is left.
func TestKwokNodePoolSimulated(t *testing.T) {
	const nodes = 10
	f := newFleet(t, nodes, 200*time.Millisecond, 300*time.Millisecond, "", nil)
	ctx := context.Background()
	patch := func(name, body string) {
		t.Helper()
		if _, err := f.cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatalf("patch node %s: %v", name, err)
		}
	}
	cordoned, tainted, relabelled := testenv.KwokNodeName(1), testenv.KwokNodeName(2), testenv.KwokNodeName(3)
	patch(cordoned, `{"spec":{"unschedulable":true,"taints":[{"key":"node.kubernetes.io/unschedulable","effect":"NoSchedule"}]}}`)
	patch(tainted, `{"spec":{"taints":[{"key":"dedicated","value":"gpu","effect":"NoSchedule"}]}}`)
	patch(relabelled, `{"metadata":{"labels":{"pool":"other"}}}`)
	// Not kwok's (no kwok.x-k8s.io/node annotation): nobody plays its
	// kubelet, as for a node whose kubelet died.
	const notReady = "kwok-notready"
	n, err := f.cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: notReady, Labels: map[string]string{"pool": "sandbox", "kubernetes.io/hostname": notReady}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", Message: "PLEG is not healthy"}}
	if _, err := f.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var healthy []string
	for i := range nodes {
		if name := testenv.KwokNodeName(i); name != cordoned && name != tainted && name != relabelled {
			healthy = append(healthy, name)
		}
	}

	t.Run("exactly the pool", func(t *testing.T) {
		run := f.run(t, "", true)
		if run.code != report.ExitCouldNotRun {
			t.Fatalf("exit %d, want %d (a pool node could not be probed); errors: %s\n%s", run.code, report.ExitCouldNotRun, errorsOf(run.report, 5), tail(run.stderr, 2000))
		}
		if got := probedNodes(run.report); !slices.Equal(got, healthy) {
			t.Errorf("probe results from %v, want exactly the pool's ready nodes %v", got, healthy)
		}
		seen := sandboxFindings(run.report)
		for _, out := range []string{tainted, relabelled} {
			if len(seen[out]) > 0 {
				t.Errorf("%s is outside the pool but has findings: %+v", out, seen[out])
			}
		}
		want := map[string]string{cordoned: runner.ReasonNodeCordoned, notReady: runner.ReasonNodeNotReady}
		for node, findings := range seen {
			for _, fd := range findings {
				if fd.Status == report.Pass || fd.Status == report.Skip {
					continue
				}
				if reason, ok := want[node]; !ok || fd.Check != "probe.run" || fd.Subject != reason || fd.Status != report.Error || !strings.Contains(fd.Actual, node) {
					t.Errorf("%s (%s): %s %s is %s: %s", node, fd.Target, fd.Check, fd.Subject, fd.Status, fd.Actual)
				}
			}
		}
		for node, reason := range want {
			if !slices.ContainsFunc(seen[node], func(fd report.Finding) bool {
				return fd.Subject == reason && fd.Status == report.Error && fd.Target == Target("sandboxes", node)
			}) {
				t.Errorf("no %s error finding for %s: %+v", reason, node, seen[node])
			}
			if slices.ContainsFunc(seen[node], func(fd report.Finding) bool { return fd.Status == report.Pass }) {
				t.Errorf("%s was not probed but has a pass", node)
			}
		}
		// The metrics say which nodes went unprobed, and why, while the run
		// as a whole could check (the seven others): exit 3, sandprobe_up 1.
		unprobed := map[string]string{}
		if mf := run.metrics[report.MetricNodeUnprobed]; mf != nil {
			for _, m := range mf.Metric {
				if m.GetGauge().GetValue() == 1 && labelOf(m, "namespace") == "sandboxes" {
					unprobed[labelOf(m, "node")] = labelOf(m, "reason")
				}
			}
		}
		if !maps.Equal(unprobed, want) {
			t.Errorf("%s: %v, want %v", report.MetricNodeUnprobed, unprobed, want)
		}
		if up := run.metrics[report.MetricUp]; up == nil || up.Metric[0].GetGauge().GetValue() != 1 {
			t.Errorf("%s is not 1: the seven ready nodes were checked (%v)", report.MetricUp, up)
		}
		if left := f.podsLeft(t); len(left) > 0 {
			t.Errorf("%d pods left after the run: %v", len(left), left)
		}
	})

	t.Run("deadline too short for the pool", func(t *testing.T) {
		run := f.run(t, "", true, "--parallel=1", "--run-deadline=1s")
		if run.code != report.ExitCouldNotRun {
			t.Fatalf("exit %d, want %d; errors: %s\n%s", run.code, report.ExitCouldNotRun, errorsOf(run.report, 5), tail(run.stderr, 2000))
		}
		probed := probedNodes(run.report)
		seen := sandboxFindings(run.report)
		cut := 0
		for _, node := range healthy {
			deadline := slices.ContainsFunc(seen[node], func(fd report.Finding) bool {
				return fd.Check == "probe.run" && fd.Subject == runner.ReasonDeadline && fd.Status == report.Error && fd.Target == Target("sandboxes", node)
			})
			switch {
			case deadline && slices.Contains(probed, node):
				t.Errorf("%s has both a probe result and a deadline finding", node)
			case deadline:
				cut++
				if slices.ContainsFunc(seen[node], func(fd report.Finding) bool { return fd.Status == report.Pass }) {
					t.Errorf("%s was cut by the deadline but has a pass", node)
				}
			case !slices.Contains(probed, node):
				t.Errorf("%s: neither probed nor a finding naming it (an omission): %+v", node, seen[node])
			}
		}
		if cut == 0 {
			t.Errorf("a 1s deadline at 1 pod at a time cut no node of %d (probed %v)", len(healthy), probed)
		}
		t.Logf("run deadline 1s, 1 at a time: %d of %d pool nodes probed, %d deadline findings, exit %d in %.1fs; first: %s", len(probed), len(healthy), cut, run.code, run.wall.Seconds(), errorsOf(run.report, 2))
		if left := f.podsLeft(t); len(left) > 0 {
			t.Errorf("%d pods left after the run: %v", len(left), left)
		}
	})
}

// sandboxFindings gathers the findings of the probes in the sandbox
// namespace under their node (the control pod lands wherever the
// scheduler puts it, pool or not: it is not a sandbox).
func sandboxFindings(run report.Run) map[string][]report.Finding {
	out := map[string][]report.Finding{}
	for _, f := range run.Findings {
		if strings.HasPrefix(f.Target, "namespace/sandboxes/node/") {
			out[nodeOf(f.Where, f.Target)] = append(out[nodeOf(f.Where, f.Target)], f)
		}
	}
	return out
}

// probedNodes are the nodes a run has probe results from, sorted.
func probedNodes(run report.Run) []string {
	var out []string
	for _, p := range run.Probes {
		if node := nodeOf(p.Where, p.Target); node != "" && strings.HasPrefix(p.Target, "namespace/sandboxes/node/") {
			out = append(out, node)
		}
	}
	slices.Sort(out)
	return out
}
