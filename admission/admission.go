// Package admission owns the sandbox admission policy: the
// ValidatingAdmissionPolicy and binding that `sandprobe render --format
// admission` writes (with the rollout stage, Deny, Warn or Audit, as the
// binding's validationActions), and the judgement of a pod by the same rules,
// which `sandprobe drift --would-refuse` applies to the live pods before
// anyone switches the binding to Deny.
//
// Each rule is one entry of one table (rules) that carries both its CEL, as
// the API server evaluates it, and the same requirement in Go, as drift
// evaluates it. The binary does not evaluate CEL itself: the API server's CEL
// libraries grow the static runner binary by 9 MB
// (k8s.io/apiserver/pkg/admission/plugin/cel) to 24 MB (its
// ValidatingAdmissionPolicy validator), past its 35 MB goal. Instead the
// tests hold the two halves of every rule together: on thousands of
// generated pods the rendered CEL, evaluated by those very libraries, and
// the Go half agree on every verdict and every message, and on a real API
// server `--would-refuse` names exactly the pods a Deny binding refuses.
package admission

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
)

// PolicyName names the ValidatingAdmissionPolicy and its binding: fixed, so
// an overlay patches the base's objects and a cluster has one of each.
const PolicyName = "sandprobe-sandbox-runtime"

// Rollout stages: the binding's validationActions.
const (
	ModeDeny  = "deny"  // refuse the pod
	ModeWarn  = "warn"  // admit it and return the refusal as a warning to the client
	ModeAudit = "audit" // admit it and record the refusal in the audit event
)

// ParseMode reads --mode: deny, warn or audit, or a comma-separated
// combination the API server accepts (warn,audit is the usual audit stage;
// deny,audit also records refusals). Deny with Warn is refused as the API
// server refuses it: the client would read the same refusal twice.
func ParseMode(s string) ([]admissionv1.ValidationAction, error) {
	var out []admissionv1.ValidationAction
	for _, part := range strings.Split(s, ",") {
		var a admissionv1.ValidationAction
		switch strings.ToLower(strings.TrimSpace(part)) {
		case ModeDeny:
			a = admissionv1.Deny
		case ModeWarn:
			a = admissionv1.Warn
		case ModeAudit:
			a = admissionv1.Audit
		default:
			return nil, fmt.Errorf("want deny, warn or audit (or warn,audit), got %q", s)
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	if slices.Contains(out, admissionv1.Deny) && slices.Contains(out, admissionv1.Warn) {
		return nil, fmt.Errorf("deny and warn cannot be combined (the API server refuses it: a refused client would read the refusal twice), got %q", s)
	}
	return out, nil
}

// rule is one requirement of the admission policy, in CEL for the API
// server and in Go for drift. Both halves must give the same verdict and
// the same message on every pod: TestRulesAgreeWithCEL holds them together.
type rule struct {
	id string
	// applies says whether the policy asks for this rule at all.
	applies func(p *policy.Policy) bool
	// validation is the rule as the ValidatingAdmissionPolicy carries it.
	validation func(p *policy.Policy) admissionv1.Validation
	// refuses is the same rule in Go: "" when the pod passes, else the
	// message the validation's messageExpression gives.
	refuses func(p *policy.Policy, pod *corev1.Pod) string
	// fix says what to change, for drift's findings.
	fix func(p *policy.Policy, pod *corev1.Pod) string
}

// rules is the table: the rendered policy and the Go judgement both read it.
func rules() []rule {
	return []rule{
		{
			id:      "runtime-class",
			applies: func(p *policy.Policy) bool { return len(p.Spec.Runtime.ClassNames) > 0 },
			validation: func(p *policy.Policy) admissionv1.Validation {
				classes := p.Spec.Runtime.ClassNames
				quoted := make([]string, len(classes))
				for i, c := range classes {
					quoted[i] = strconv.Quote(c)
				}
				return admissionv1.Validation{
					Expression: fmt.Sprintf("has(object.spec.runtimeClassName) && object.spec.runtimeClassName in [%s]", strings.Join(quoted, ", ")),
					Message: fmt.Sprintf("a sandbox pod (labels %s) must run under one of the runtime classes %s (SandboxPolicy %s): set spec.runtimeClassName",
						selectorText(p), strings.Join(classes, ", "), p.Metadata.Name),
					MessageExpression: fmt.Sprintf(`"runtimeClassName " + (has(object.spec.runtimeClassName) ? object.spec.runtimeClassName : "unset") + %s`,
						strconv.Quote(runtimeClassTail(p))),
					Reason: ptr(metav1.StatusReasonForbidden),
				}
			},
			refuses: func(p *policy.Policy, pod *corev1.Pod) string {
				rc := pod.Spec.RuntimeClassName
				if rc != nil && slices.Contains(p.Spec.Runtime.ClassNames, *rc) {
					return ""
				}
				got := "unset"
				if rc != nil {
					got = *rc
				}
				return "runtimeClassName " + got + runtimeClassTail(p)
			},
			fix: func(p *policy.Policy, pod *corev1.Pod) string {
				return "set spec.runtimeClassName: " + p.Spec.Runtime.ClassNames[0] + " (one of " + strings.Join(p.Spec.Runtime.ClassNames, ", ") + ")"
			},
		},
	}
}

func runtimeClassTail(p *policy.Policy) string {
	return fmt.Sprintf(" is not allowed for a sandbox pod (labels %s): SandboxPolicy %s allows only %s",
		selectorText(p), p.Metadata.Name, strings.Join(p.Spec.Runtime.ClassNames, ", "))
}

// Check says why a policy cannot be rendered as an admission policy.
func Check(p *policy.Policy) error {
	if len(p.Spec.Runtime.ClassNames) == 0 {
		return fmt.Errorf("spec.runtime.classNames is empty: there is no runtime class to require of sandbox pods")
	}
	if len(p.Spec.Selector.MatchLabels) == 0 {
		return fmt.Errorf("spec.selector.matchLabels is empty: the admission policy would hold every pod to the sandbox's runtime")
	}
	return nil
}

// Render builds the admission policy that keeps a sandbox from starting
// without its isolation runtime by accident: a pod carrying the policy's
// selector labels is refused (or, in the Warn and Audit stages, reported)
// at creation unless its runtimeClassName is one of spec.runtime.classNames.
// Only CREATE: the runtime class of a pod cannot change afterwards, and
// refusing updates would also block the removal of finalizers from pods
// admitted earlier (drift reports those). Pods without the labels are not
// looked at. Check first: Render assumes a policy Check accepts.
func Render(p *policy.Policy, actions []admissionv1.ValidationAction) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	if len(actions) == 0 {
		actions = []admissionv1.ValidationAction{admissionv1.Deny}
	}
	fail := admissionv1.Fail
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Name: PolicyName,
			Labels: map[string]string{
				render.LabelName: "sandprobe", render.LabelManagedBy: "sandprobe", render.LabelPolicy: p.Metadata.Name,
			},
		}
	}
	var validations []admissionv1.Validation
	for _, r := range rules() {
		if r.applies(p) {
			validations = append(validations, r.validation(p))
		}
	}
	vap := &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: meta(),
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			// An expression that cannot be evaluated refuses the pod: this
			// policy exists so that a sandbox never starts unisolated.
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{
				ObjectSelector: &metav1.LabelSelector{MatchLabels: maps.Clone(p.Spec.Selector.MatchLabels)},
				ResourceRules: []admissionv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionv1.RuleWithOperations{
						Operations: []admissionv1.OperationType{admissionv1.Create},
						Rule: admissionv1.Rule{
							APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
							Scope: ptr(admissionv1.AllScopes), // the API server's default, spelt out so a re-apply changes nothing
						},
					},
				}},
			},
			Validations: validations,
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: meta(),
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        PolicyName,
			ValidationActions: slices.Clone(actions),
		},
	}
	return vap, binding
}

// selectorText is "k=v,k2=v2", sorted.
func selectorText(p *policy.Policy) string {
	m := p.Spec.Selector.MatchLabels
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		pairs = append(pairs, k+"="+m[k])
	}
	return strings.Join(pairs, ",")
}

func ptr[T any](v T) *T { return &v }
