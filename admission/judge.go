package admission

import (
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandprobe/sandprobe/policy"
)

// Judge decides, for a pod as it stands, what the rendered admission policy
// would do with its creation: whether the policy looks at it at all (its
// match constraints) and which of its rules refuse it.
type Judge struct {
	policy   *policy.Policy
	vap      *admissionv1.ValidatingAdmissionPolicy
	selector labels.Selector
	rules    []rule
}

// Refusal is one rule that refuses a pod: the message the API server
// returns for it and what to change.
type Refusal struct {
	Rule    string
	Message string
	Fix     string
}

// NewJudge renders the policy's admission policy and prepares to judge pods
// by it. Matching reads the rendered object itself (its objectSelector), so
// the pods judged are the pods the API server would hand the policy.
func NewJudge(p *policy.Policy) (*Judge, error) {
	if err := Check(p); err != nil {
		return nil, err
	}
	vap, _ := Render(p, nil)
	mc := vap.Spec.MatchConstraints
	if mc.NamespaceSelector != nil || len(mc.ExcludeResourceRules) > 0 || len(vap.Spec.MatchConditions) > 0 || len(vap.Spec.Variables) > 0 {
		// Render writes none of these; a judge that ignored one would
		// silently disagree with the API server.
		return nil, fmt.Errorf("admission policy %s: the judge knows objectSelector and resource rules only", vap.Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(mc.ObjectSelector)
	if err != nil {
		return nil, fmt.Errorf("admission policy %s: objectSelector: %w", vap.Name, err)
	}
	j := &Judge{policy: p, vap: vap, selector: sel}
	for _, r := range rules() {
		if r.applies(p) {
			j.rules = append(j.rules, r)
		}
	}
	return j, nil
}

// PolicyName is the admission policy's name, for findings.
func (j *Judge) PolicyName() string { return j.vap.Name }

// Selector is the label selector of the pods the policy looks at, for
// listing them ("sandbox=true").
func (j *Judge) Selector() string { return j.selector.String() }

// Requirement says in words what the policy requires of a sandbox pod.
func (j *Judge) Requirement() string {
	return fmt.Sprintf("admitted by ValidatingAdmissionPolicy %s (labels %s: runtime class one of %s)",
		j.vap.Name, selectorText(j.policy), strings.Join(j.policy.Spec.Runtime.ClassNames, ", "))
}

// Matches says whether the policy looks at the creation of this pod. The
// policy matches pod CREATE in every namespace; its objectSelector decides.
func (j *Judge) Matches(pod *corev1.Pod) bool {
	return j.selector.Matches(labels.Set(pod.Labels))
}

// Refusals lists the rules that refuse the pod, in the policy's order (the
// API server's refusal quotes the first); nil when the pod would be
// admitted or the policy does not look at it.
func (j *Judge) Refusals(pod *corev1.Pod) []Refusal {
	if !j.Matches(pod) {
		return nil
	}
	var out []Refusal
	for _, r := range j.rules {
		if msg := r.refuses(j.policy, pod); msg != "" {
			out = append(out, Refusal{Rule: r.id, Message: msg, Fix: r.fix(j.policy, pod)})
		}
	}
	return out
}
