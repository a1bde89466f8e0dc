package admission

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
)

// Two more policies beside the pods' runtime-class one, each with its own
// binding in the same rollout stage:
//
//   - TemplatesPolicyName holds workload templates (Deployment, StatefulSet,
//     DaemonSet, ReplicaSet, Job, CronJob, agent-sandbox SandboxTemplate)
//     whose pod template carries the sandbox labels to the runtime classes
//     when they are applied, not only the pods a controller makes from them
//     later (where a refusal is a ReplicaSet's event nobody reads).
//   - LabelsPolicyName (optional: --require-labels) refuses a pod in a
//     sandbox namespace (spec.namespaces) that lacks the sandbox labels:
//     no NetworkPolicy written for sandboxes selects it, and the
//     runtime-class rule, which selects pods by those labels, never sees it.
const (
	TemplatesPolicyName = "sandprobe-sandbox-templates"
	LabelsPolicyName    = "sandprobe-sandbox-labels"
)

// sandboxTemplateGroup is agent-sandbox's SandboxTemplate API group
// (drift.SandboxTemplateGroup; admission does not import drift).
const sandboxTemplateGroup = "extensions.agents.x-k8s.io"

// templateExpr is the pod template of the workload under review, by kind.
const templateExpr = `object.kind == "CronJob" ? object.spec.jobTemplate.spec.template : (object.kind == "SandboxTemplate" ? object.spec.podTemplate : object.spec.template)`

// labelsExpr is CEL that holds when labels (an expression for a label map
// that may be absent) carry every selector label of p.
func labelsExpr(p *policy.Policy, meta string) string {
	m := p.Spec.Selector.MatchLabels
	parts := []string{"has(" + meta + ".labels)"}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("(%s in %s.labels && %s.labels[%s] == %s)", strconv.Quote(k), meta, meta, strconv.Quote(k), strconv.Quote(m[k])))
	}
	return strings.Join(parts, " && ")
}

func objectMeta(name string, p *policy.Policy) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name,
		Labels: map[string]string{
			render.LabelName: "sandprobe", render.LabelManagedBy: "sandprobe", render.LabelPolicy: p.Metadata.Name,
		},
	}
}

func bindingFor(name string, p *policy.Policy, actions []admissionv1.ValidationAction) *admissionv1.ValidatingAdmissionPolicyBinding {
	if len(actions) == 0 {
		actions = []admissionv1.ValidationAction{admissionv1.Deny}
	}
	return &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: objectMeta(name, p),
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: slices.Clone(actions)},
	}
}

// RenderTemplates builds the policy that holds sandbox workload templates
// to the runtime classes at apply time (create and update). A template
// whose pod template lacks the sandbox labels is not looked at. Check
// first.
func RenderTemplates(p *policy.Policy, actions []admissionv1.ValidationAction) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	fail := admissionv1.Fail
	ops := []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}
	rule := func(group string, resources ...string) admissionv1.NamedRuleWithOperations {
		return admissionv1.NamedRuleWithOperations{RuleWithOperations: admissionv1.RuleWithOperations{
			Operations: ops,
			Rule:       admissionv1.Rule{APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: resources, Scope: ptr(admissionv1.NamespacedScope)},
		}}
	}
	classes := p.Spec.Runtime.ClassNames
	quoted := make([]string, len(classes))
	for i, c := range classes {
		quoted[i] = strconv.Quote(c)
	}
	tail := fmt.Sprintf(" is not allowed for a sandbox pod template (labels %s): SandboxPolicy %s allows only %s",
		selectorText(p), p.Metadata.Name, strings.Join(classes, ", "))
	vap := &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: objectMeta(TemplatesPolicyName, p),
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{
				rule("apps", "deployments", "statefulsets", "daemonsets", "replicasets"),
				rule("batch", "jobs", "cronjobs"),
				rule(sandboxTemplateGroup, "sandboxtemplates"),
			}},
			// Only templates of sandboxes: the pod template carries the
			// selector's labels.
			MatchConditions: []admissionv1.MatchCondition{{
				Name:       "sandbox-pod-template",
				Expression: "has(object.spec) && " + labelsExpr(p, "("+templateExpr+").metadata"),
			}},
			Variables: []admissionv1.Variable{{Name: "podSpec", Expression: "(" + templateExpr + ").spec"}},
			Validations: []admissionv1.Validation{{
				Expression: fmt.Sprintf("has(variables.podSpec.runtimeClassName) && variables.podSpec.runtimeClassName in [%s]", strings.Join(quoted, ", ")),
				Message: fmt.Sprintf("a sandbox pod template (labels %s) must run under one of the runtime classes %s (SandboxPolicy %s): set its runtimeClassName",
					selectorText(p), strings.Join(classes, ", "), p.Metadata.Name),
				MessageExpression: fmt.Sprintf(`object.kind + " " + object.metadata.name + ": runtimeClassName " + (has(variables.podSpec.runtimeClassName) ? variables.podSpec.runtimeClassName : "unset") + %s`, strconv.Quote(tail)),
				Reason:            ptr(metav1.StatusReasonForbidden),
			}},
		},
	}
	return vap, bindingFor(TemplatesPolicyName, p, actions)
}

// CheckLabels says why a policy cannot have the labels rule.
func CheckLabels(p *policy.Policy) error {
	if len(p.Spec.Namespaces) == 0 {
		return fmt.Errorf("--require-labels: spec.namespaces is empty: there is no sandbox namespace whose pods must carry the labels")
	}
	return nil
}

// RenderLabels builds the optional policy that refuses a pod created in a
// sandbox namespace without the sandbox labels. CheckLabels first.
func RenderLabels(p *policy.Policy, actions []admissionv1.ValidationAction) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	fail := admissionv1.Fail
	vap := &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: objectMeta(LabelsPolicyName, p),
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
					Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: slices.Clone(p.Spec.Namespaces),
				}}},
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: ptr(admissionv1.NamespacedScope)},
				}}},
			},
			Validations: []admissionv1.Validation{{
				Expression: labelsExpr(p, "object.metadata"),
				Message: fmt.Sprintf("a pod in a sandbox namespace (%s) must carry the sandbox labels %s (SandboxPolicy %s): without them no sandbox NetworkPolicy selects it; add them, or run it elsewhere",
					strings.Join(p.Spec.Namespaces, ", "), selectorText(p), p.Metadata.Name),
				MessageExpression: fmt.Sprintf(`"pod " + (has(object.metadata.name) ? object.metadata.name : object.metadata.generateName + "*") + " in sandbox namespace " + namespaceObject.metadata.name + %s`,
					strconv.Quote(fmt.Sprintf(" lacks the sandbox labels %s (SandboxPolicy %s): no sandbox NetworkPolicy selects it; add the labels, or run it outside the sandbox namespaces", selectorText(p), p.Metadata.Name))),
				Reason: ptr(metav1.StatusReasonForbidden),
			}},
		},
	}
	return vap, bindingFor(LabelsPolicyName, p, actions)
}
