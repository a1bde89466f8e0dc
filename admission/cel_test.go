package admission

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiadmission "k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/sandprobe/sandprobe/policy"
)

// celValidator compiles a rendered policy the way the API server's
// ValidatingAdmissionPolicy plugin does (its compilePolicy: the same
// compiler, environment, variables, validations and messageExpressions),
// with the API server's own libraries. Only the tests link them; see the
// package comment for why the binary does not.
func celValidator(t testing.TB, vap *admissionv1.ValidatingAdmissionPolicy) validating.Validator {
	t.Helper()
	comp, err := cel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	withAuthz := cel.OptionalVariableDeclarations{HasAuthorizer: true}
	var conds, msgs []cel.ExpressionAccessor
	for _, v := range vap.Spec.Validations {
		conds = append(conds, &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason})
		if v.MessageExpression != "" {
			msgs = append(msgs, &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression})
		} else {
			msgs = append(msgs, nil)
		}
	}
	if len(vap.Spec.Variables) > 0 || len(vap.Spec.MatchConditions) > 0 || len(vap.Spec.AuditAnnotations) > 0 {
		t.Fatalf("the rendered policy grew variables, match conditions or audit annotations: teach celValidator and the Judge")
	}
	return validating.NewValidator(
		comp.CompileCondition(conds, withAuthz, environment.StoredExpressions),
		nil,
		comp.CompileCondition(nil, withAuthz, environment.StoredExpressions),
		comp.CompileCondition(msgs, cel.OptionalVariableDeclarations{}, environment.StoredExpressions),
		vap.Spec.FailurePolicy, nil)
}

// celRefusals evaluates the compiled policy on a pod's creation and returns
// the messages of the validations that refuse it, in order.
func celRefusals(t testing.TB, v validating.Validator, pod *corev1.Pod) []string {
	t.Helper()
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	attr := apiadmission.NewAttributesRecord(pod, nil, gvk, pod.Namespace, pod.Name, gvr, "", apiadmission.Create, &metav1.CreateOptions{}, false, nil)
	res := v.Validate(context.Background(), gvr, &apiadmission.VersionedAttributes{Attributes: attr, VersionedObject: apiadmission.NewLazyObject(pod), VersionedKind: gvk},
		nil, nil, celconfig.RuntimeCELCostBudget, nil)
	var out []string
	for _, d := range res.Decisions {
		switch {
		case d.Evaluation == validating.EvalError:
			t.Fatalf("the rendered CEL failed to evaluate on %s: %s", podText(pod), d.Message)
		case d.Action == validating.ActionDeny:
			out = append(out, d.Message)
		}
	}
	return out
}

func podText(p *corev1.Pod) string {
	rc := "<nil>"
	if p.Spec.RuntimeClassName != nil {
		rc = fmt.Sprintf("%q", *p.Spec.RuntimeClassName)
	}
	return fmt.Sprintf("pod %s/%s labels %v runtimeClassName %s", p.Namespace, p.Name, p.Labels, rc)
}

// genPolicy is a valid policy with the given selector and classes.
func genPolicy(t testing.TB, name string, labels map[string]string, classes []string) *policy.Policy {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: sandprobe.dev/v1alpha1\nkind: SandboxPolicy\nmetadata: {name: %s}\nspec:\n  selector: {matchLabels: {", name)
	first := true
	for k, v := range labels {
		if !first {
			b.WriteString(", ")
		}
		first = false
		fmt.Fprintf(&b, "%q: %q", k, v)
	}
	b.WriteString("}}\n  runtime: {classNames: [")
	for i, c := range classes {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", c)
	}
	b.WriteString("]}\n")
	p, err := policy.Load([]byte(b.String()))
	if err != nil {
		t.Fatalf("policy %s: %v\n%s", name, err, b.String())
	}
	return p
}

// TestRulesAgreeWithCEL holds the two halves of every rule together: on
// thousands of generated pods, under several policies, the rendered CEL as
// the API server's libraries evaluate it and the Judge's Go give the same
// verdict and the same messages, in the same order.
func TestRulesAgreeWithCEL(t *testing.T) {
	policies := []*policy.Policy{
		genPolicy(t, "agent-sandbox", map[string]string{"sandbox": "true"}, []string{"kata", "gvisor"}),
		genPolicy(t, "one-class", map[string]string{"sandbox": "true"}, []string{"gvisor"}),
		genPolicy(t, "two-labels", map[string]string{"sandbox": "true", "team": "agents"}, []string{"kata-qemu", "kata-fc", "gvisor"}),
	}
	// Runtime class values: unset, empty, allowed ones, near misses (case,
	// prefix, suffix, spaces) and strangers.
	classes := []*string{nil, ptr(""), ptr("kata"), ptr("gvisor"), ptr("kata-qemu"), ptr("kata-fc"), ptr("runc"), ptr("Kata"), ptr("gvisor "),
		ptr(" kata"), ptr("kata-"), ptr("kat"), ptr("gvisor2"), ptr("runsc"), ptr(`"kata"`), ptr("kata, gvisor"), ptr("ĸata")}
	labelSets := []map[string]string{
		nil, {"sandbox": "true"}, {"sandbox": "false"}, {"sandbox": "True"}, {"sandbox": "true", "team": "agents"},
		{"team": "agents"}, {"sandbox": "true", "team": "builds"}, {"sandbox.dev/kind": "true"},
	}
	rng := rand.New(rand.NewPCG(13, 4))
	const n = 3000
	for _, p := range policies {
		j, err := NewJudge(p)
		if err != nil {
			t.Fatal(err)
		}
		vap, _ := Render(p, nil)
		v := celValidator(t, vap)
		refused, matched := 0, 0
		for i := range n {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: []string{"sandboxes", "default", "builds"}[rng.IntN(3)],
					Labels: labelSets[rng.IntN(len(labelSets))]},
				Spec: corev1.PodSpec{RuntimeClassName: classes[rng.IntN(len(classes))], Containers: []corev1.Container{{Name: "c", Image: "x"}}},
			}
			if !j.Matches(pod) {
				// The API server does not hand the policy this pod; its
				// selector is checked on the real API server.
				if got := j.Refusals(pod); got != nil {
					t.Fatalf("%s: not matched, but refused: %v", podText(pod), got)
				}
				continue
			}
			matched++
			want := celRefusals(t, v, pod)
			var got []string
			for _, r := range j.Refusals(pod) {
				got = append(got, r.Message)
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("policy %s, %s:\nCEL refuses with %q\nGo  refuses with %q", p.Metadata.Name, podText(pod), want, got)
			}
			if len(want) > 0 {
				refused++
			}
		}
		if refused == 0 || refused == matched {
			t.Fatalf("policy %s: %d of %d matched pods refused: the generator does not exercise both verdicts", p.Metadata.Name, refused, matched)
		}
		t.Logf("policy %s: %d pods, %d matched, %d refused: CEL and Go agree on every one", p.Metadata.Name, n, matched, refused)
	}
}

func TestParseMode(t *testing.T) {
	cases := []struct {
		in   string
		want []admissionv1.ValidationAction
		err  string
	}{
		{in: "deny", want: []admissionv1.ValidationAction{admissionv1.Deny}},
		{in: "warn", want: []admissionv1.ValidationAction{admissionv1.Warn}},
		{in: "audit", want: []admissionv1.ValidationAction{admissionv1.Audit}},
		{in: "Warn, Audit", want: []admissionv1.ValidationAction{admissionv1.Warn, admissionv1.Audit}},
		{in: "deny,audit", want: []admissionv1.ValidationAction{admissionv1.Deny, admissionv1.Audit}},
		{in: "audit,audit", want: []admissionv1.ValidationAction{admissionv1.Audit}},
		{in: "deny,warn", err: "deny and warn cannot be combined"},
		{in: "enforce", err: `want deny, warn or audit (or warn,audit), got "enforce"`},
		{in: "", err: `got ""`},
		{in: "warn,", err: `got "warn,"`},
	}
	for _, c := range cases {
		got, err := ParseMode(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseMode(%q) = %v, %v; want error %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}
