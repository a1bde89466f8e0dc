package admission

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandprobe/sandprobe/report"
)

// CheckWouldRefuse is the check ID of `sandprobe drift --would-refuse`.
const CheckWouldRefuse = "admission.would-refuse"

// Proves is what a clean --would-refuse run proves, for the catalogue.
const Proves = "switching the sandbox admission policy's binding to Deny refuses none of the live pods it looks at: every live pod carrying the selector's labels is one the policy would admit if it were created now"

// Fix is the usual fix, for the catalogue; each finding carries its exact one.
const Fix = "give the pod (or its controller's pod template) one of the policy's runtime classes before the binding says Deny; until then keep the binding at warn or audit"

// Severity is how bad a pod the Deny binding would refuse is: a live
// sandbox running outside the declared isolation.
const Severity = report.High

// PodLister lists pods page by page (drift.KubeAPI is one).
type PodLister interface {
	ListPods(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error)
}

// WouldRefuse is the answer to "what breaks if the binding says Deny
// today": one failing finding per live pod the policy would refuse, with
// the API server's message and the fix, or one finding that says none
// would be (pass) or that no pod was there to judge (skip).
type WouldRefuse struct {
	Findings []report.Finding
	Checked  int // pods the policy looks at
	Refused  int
	Notes    []string
}

// ScanWouldRefuse lists, across all namespaces (the policy matches pods in
// every namespace), the pods the policy's objectSelector picks, and judges
// each as if it were created now. source names where they came from for
// the findings ("the cluster at https://…").
func (j *Judge) ScanWouldRefuse(ctx context.Context, api PodLister, pageSize int64, source string) (*WouldRefuse, error) {
	out := &WouldRefuse{}
	opts := metav1.ListOptions{LabelSelector: j.Selector(), Limit: pageSize}
	for {
		list, err := api.ListPods(ctx, metav1.NamespaceAll, opts)
		if err != nil {
			return nil, fmt.Errorf("list pods with labels %s: %w", j.Selector(), err)
		}
		for i := range list.Items {
			j.add(out, &list.Items[i])
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	j.finish(out, source)
	return out, nil
}

// JudgePods is ScanWouldRefuse for pods read from files.
func (j *Judge) JudgePods(pods []*corev1.Pod, source string) *WouldRefuse {
	out := &WouldRefuse{}
	for _, p := range pods {
		j.add(out, p)
	}
	j.finish(out, source)
	return out
}

func (j *Judge) add(out *WouldRefuse, pod *corev1.Pod) {
	if !j.Matches(pod) {
		return
	}
	out.Checked++
	refusals := j.Refusals(pod)
	if len(refusals) == 0 {
		return
	}
	out.Refused++
	target := "pod/" + pod.Namespace + "/" + pod.Name
	owner := ownerText(pod)
	for _, r := range refusals {
		fix := r.Fix
		if owner != "" {
			// A controller recreates the pod from its template: fixing the
			// pod alone changes nothing.
			fix += " in the pod template of " + owner
		}
		fix += ", before the binding says Deny"
		out.Findings = append(out.Findings, report.Finding{
			Check: CheckWouldRefuse, Target: target, Subject: r.Rule, Namespace: pod.Namespace, Status: report.Fail,
			Expected: j.Requirement(),
			Actual:   "a Deny binding would refuse this pod if it were created now: " + r.Message,
			Fix:      fix,
			Evidence: podEvidence(pod, owner),
		})
	}
}

func (j *Judge) finish(out *WouldRefuse, source string) {
	sel := j.Selector()
	switch {
	case out.Checked == 0:
		out.Findings = append(out.Findings, report.Finding{
			Check: CheckWouldRefuse, Target: "admission/" + j.PolicyName(), Status: report.Skip,
			Expected: "live pods with labels " + sel + " to judge",
			Actual:   "no pod in " + source + " carries the labels " + sel + ": Deny would refuse none today, which says nothing of the next sandbox",
			Fix:      "run it where the sandboxes run (--kubeconfig, --context), or check the policy's selector",
		})
	case out.Refused == 0:
		out.Findings = append(out.Findings, report.Finding{
			Check: CheckWouldRefuse, Target: "admission/" + j.PolicyName(), Status: report.Pass,
			Expected: j.Requirement(),
			Actual:   fmt.Sprintf("all %d pods with labels %s would be admitted: the binding can say Deny", out.Checked, sel),
			Evidence: "judged " + source + " by the rendered policy's rules",
		})
	default:
		out.Notes = append(out.Notes, fmt.Sprintf("%d of %d pods with labels %s in %s would be refused by a Deny binding of %s",
			out.Refused, out.Checked, sel, source, j.PolicyName()))
	}
}

// ownerText is the pod's controller, "ReplicaSet/agents-7d9f", or "".
func ownerText(pod *corev1.Pod) string {
	for _, o := range pod.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			return o.Kind + "/" + o.Name
		}
	}
	return ""
}

func podEvidence(pod *corev1.Pod, owner string) string {
	var keys []string
	for k := range pod.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var labels []string
	for _, k := range keys {
		labels = append(labels, k+"="+pod.Labels[k])
	}
	rc := "unset"
	if pod.Spec.RuntimeClassName != nil {
		rc = *pod.Spec.RuntimeClassName
	}
	parts := []string{"labels: " + strings.Join(labels, ","), "runtimeClassName: " + rc}
	if owner != "" {
		parts = append(parts, "controlled by: "+owner)
	}
	if !pod.CreationTimestamp.IsZero() {
		parts = append(parts, "created: "+pod.CreationTimestamp.UTC().Format("2006-01-02T15:04:05Z"))
	}
	if pod.Status.Phase != "" {
		parts = append(parts, "phase: "+string(pod.Status.Phase))
	}
	return strings.Join(parts, "; ")
}
