package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
)

// The policy-dependent objects of the kustomize base (manifests/): fixed
// names, so an overlay replaces the base's objects with its own policy's by
// patching, and one cluster has one of each.
const (
	systemNamespace     = "sandprobe-system"
	policyConfigMapName = "sandprobe-policy"
	runtimeAdmission    = "sandprobe-sandbox-runtime"
)

// renderAdmission prints what manifests/ holds that depends on the policy:
// the policy ConfigMap the CronJob and its probe pods mount, and the
// ValidatingAdmissionPolicy (with its binding) that refuses a sandbox pod
// whose runtime class is not one the policy declares.
func (a *app) renderAdmission(p *policy.Policy, raw []byte, namespace string) int {
	if err := writeAdmission(a.stdout, p, raw, namespace); err != nil {
		fmt.Fprintf(a.stderr, "sandprobe render: %v\n", err)
		return report.ExitBadInput
	}
	return report.ExitOK
}

func writeAdmission(w io.Writer, p *policy.Policy, raw []byte, namespace string) error {
	if namespace == "" {
		namespace = systemNamespace
	}
	if len(p.Spec.Runtime.ClassNames) == 0 {
		return fmt.Errorf("spec.runtime.classNames is empty: there is no runtime class to require of sandbox pods")
	}
	if len(p.Spec.Selector.MatchLabels) == 0 {
		return fmt.Errorf("spec.selector.matchLabels is empty: the admission policy would hold every pod to the sandbox's runtime")
	}
	cm := render.PolicyConfigMap(p, raw, render.ProbePodOptions{Namespace: namespace, PolicyConfigMap: policyConfigMapName})
	vap, binding := runtimeAdmissionPolicy(p)
	return render.WriteYAML(w, cm, vap, binding)
}

// runtimeAdmissionPolicy builds the admission policy that keeps a sandbox
// from starting without its isolation runtime by accident: a pod carrying
// the policy's selector labels is refused at creation unless its
// runtimeClassName is one of spec.runtime.classNames. Only CREATE: the
// runtime class of a pod cannot change afterwards, and refusing updates
// would also block the removal of finalizers from pods admitted earlier
// (drift reports those). Pods without the labels are not looked at.
func runtimeAdmissionPolicy(p *policy.Policy) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	classes := p.Spec.Runtime.ClassNames
	quoted := make([]string, len(classes))
	for i, c := range classes {
		quoted[i] = strconv.Quote(c)
	}
	labels := selectorText(p.Spec.Selector.MatchLabels)
	allowed := strings.Join(classes, ", ")
	fail := admissionv1.Fail
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Name: runtimeAdmission,
			Labels: map[string]string{
				render.LabelName: "sandprobe", render.LabelManagedBy: "sandprobe", render.LabelPolicy: p.Metadata.Name,
			},
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
			Validations: []admissionv1.Validation{{
				Expression: fmt.Sprintf("has(object.spec.runtimeClassName) && object.spec.runtimeClassName in [%s]", strings.Join(quoted, ", ")),
				Message: fmt.Sprintf("a sandbox pod (labels %s) must run under one of the runtime classes %s (SandboxPolicy %s): set spec.runtimeClassName",
					labels, allowed, p.Metadata.Name),
				MessageExpression: fmt.Sprintf(`"runtimeClassName " + (has(object.spec.runtimeClassName) ? object.spec.runtimeClassName : "unset") + %s`,
					strconv.Quote(fmt.Sprintf(" is not allowed for a sandbox pod (labels %s): SandboxPolicy %s allows only %s", labels, p.Metadata.Name, allowed))),
				Reason: ptr(metav1.StatusReasonForbidden),
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: meta(),
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        runtimeAdmission,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	return vap, binding
}

// selectorText is "k=v,k2=v2", sorted.
func selectorText(m map[string]string) string {
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		pairs = append(pairs, k+"="+m[k])
	}
	return strings.Join(pairs, ",")
}

func ptr[T any](v T) *T { return &v }
