package kube

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
)

// A pod in a sandbox namespace without the sandbox labels (started by
// hand, by a controller that lost its labels) stands outside the policies
// written for sandboxes. Drift names it; but only a probe where it stands
// shows what it can reach. So for every such pod that the namespace's
// egress policies govern differently from the sandboxes, the run adds a
// probe pod with that pod's labels, its runtime class and on its node, and
// checks egress from there.
//
// The probe carries only the labels the namespace's egress policies look at
// (drift.SelectorKeys), never a controller's (pod-template-hash and its
// kind): a probe that copied every label could be adopted by a ReplicaSet
// or StatefulSet whose selector matches, which would then count it as a
// replica and might delete one of its real pods.

// DefaultMaxStrays bounds the stray probes of one run: one per distinct
// set of policy-relevant labels; past it, the rest are named, not probed.
const DefaultMaxStrays = 8

// CheckStrays names the strays a run could not probe.
const CheckStrays = "parity.strays"

// controllerLabels are never copied onto a probe, whatever selects on them.
var controllerLabels = []string{
	"pod-template-hash", "controller-revision-hash", "statefulset.kubernetes.io/pod-name",
	"apps.kubernetes.io/pod-index", "batch.kubernetes.io/controller-uid", "controller-uid",
	"batch.kubernetes.io/job-name", "job-name", "batch.kubernetes.io/job-completion-index",
}

// stray is one probe's worth of pods without the sandbox labels: the
// first of them (by name) stands for the others with the same labels.
type stray struct {
	pod    livePod
	labels map[string]string // what the probe carries of pod's labels
	others []string
}

// relabel gives a probe pod the stray's labels in place of the sandbox
// selector's, keeping the run's own (so the run can find and delete it).
func (s *stray) relabel(pod *corev1.Pod, selector map[string]string) {
	for k := range selector {
		delete(pod.Labels, k)
	}
	for k, v := range s.labels {
		switch k {
		case LabelRun, LabelNonce, render.LabelManagedBy:
		default:
			pod.Labels[k] = v
		}
	}
	pod.Annotations["sandprobe.dev/stands-for"] = strings.Join(append([]string{s.pod.name}, s.others...), ",")
}

// strays plans the stray probes of namespace ns: pods whose egress
// policies are none of the sets the sandboxes (or, with none running, a
// pod with exactly the declared labels) have. It returns those past max
// apart.
func (s *survey) strays(ns string, max int) ([]*stray, []livePod) {
	nss := s.byNS[ns]
	if nss == nil {
		return nil, nil
	}
	refs := [][]string{nss.declared}
	if len(nss.sandboxes) > 0 {
		refs = nil
		for _, sb := range nss.sandboxes {
			refs = append(refs, sb.policies)
		}
	}
	keys := s.engine.SelectorKeys(ns)
	byLabels := map[string]*stray{}
	var order []string
	pods := slices.SortedFunc(slices.Values(nss.strays), func(a, b livePod) int { return strings.Compare(a.name, b.name) })
	var over []livePod
	for _, p := range pods {
		if slices.ContainsFunc(refs, func(r []string) bool { return slices.Equal(r, p.policies) }) {
			continue // governed like the sandboxes: drift reports its labels
		}
		carried := map[string]string{}
		for _, k := range keys {
			if v, ok := p.labels[k]; ok && !slices.Contains(controllerLabels, k) {
				carried[k] = v
			}
		}
		key := labelsKey(carried) + "\x00" + p.runtimeClass
		if st := byLabels[key]; st != nil {
			st.others = append(st.others, p.name)
			continue
		}
		if len(order) >= max {
			over = append(over, p)
			continue
		}
		byLabels[key] = &stray{pod: p, labels: carried}
		order = append(order, key)
	}
	out := make([]*stray, 0, len(order))
	for _, k := range order {
		out = append(out, byLabels[k])
	}
	return out, over
}

func labelsKey(m map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b.WriteString(k + "=" + m[k] + ",")
	}
	return b.String()
}

// strayParity: the stray's probe is governed like the pod it stands for.
func (a *attempt) strayParity(probe []string) []report.Finding {
	st := a.stray
	f := report.Finding{Check: CheckParityPolicies, Subject: "as " + st.pod.name,
		Expected: fmt.Sprintf("exactly the egress policies that select pod %s (no sandbox labels) select its probe", st.pod.name)}
	if slices.Equal(probe, st.pod.policies) {
		f.Status = report.Pass
		f.Actual = fmt.Sprintf("the probe with pod %s's labels %s is governed like it: %s", st.pod.name, labelsText(st.labels), policiesText(probe))
		if len(st.others) > 0 {
			f.Evidence = "it stands for " + strings.Join(st.others, ", ") + " too (the same labels)"
		}
		return []report.Finding{f}
	}
	f = policyMismatch(f, probe, st.pod.policies, "pod "+st.pod.name, nil)
	f.Subject = "as " + st.pod.name
	f.Fix = fmt.Sprintf("the probe for pod %s could not carry what its policies select on (a service account, a controller's label): read its verdicts as unproven", st.pod.name)
	return []report.Finding{f}
}

func labelsText(m map[string]string) string {
	if len(m) == 0 {
		return "(none the policies look at)"
	}
	return "{" + strings.TrimSuffix(labelsKey(m), ",") + "}"
}

// unprobedStrays is the finding for strays past the bound.
func unprobedStrays(ns string, over []livePod, max int) report.Finding {
	return report.Finding{Check: CheckStrays, Target: Target(ns, ""), Where: report.Location{Namespace: ns}, Namespace: ns, Status: report.Skip,
		Expected: "a probe where each pod without the sandbox labels stands",
		Actual:   fmt.Sprintf("%d more such pods were not probed (at most %d stray probes per run): %s", len(over), max, podsText(over)),
		Fix:      "label them as sandboxes (drift names each), or remove them"}
}
