package manifests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
)

// pod is a pod that is never run (there is no kubelet), only admitted.
func pod(name string, labels map[string]string, runtimeClass string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "sandbox.invalid/agent:1"}}},
	}
	if runtimeClass != "" {
		p.Spec.RuntimeClassName = &runtimeClass
	}
	return p
}

// waitForRuntimeAdmission waits until the admission policy refuses an
// unisolated sandbox: a new policy takes effect a moment after it is stored.
func waitForRuntimeAdmission(t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		_, err := client.CoreV1().Pods(ns).Create(context.Background(), pod("vap-ready", map[string]string{"sandbox": "true"}, ""),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return fmt.Errorf("the admission policy does not refuse sandbox pods yet")
		}
		if !apierrors.IsForbidden(err) {
			return fmt.Errorf("create: %v", err)
		}
		return nil
	})
}

func createNamespace(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	_, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// TestRuntimeAdmissionPolicy proves the ValidatingAdmissionPolicy of
// manifests/ on a real API server: a pod carrying the sandbox labels starts
// only under one of the policy's runtime classes (kata, gvisor), and is
// refused with a message naming them; other pods are not looked at.
func TestRuntimeAdmissionPolicy(t *testing.T) {
	client := appliedBase(t)
	const ns = "sandboxes"
	createNamespace(t, client, ns)
	waitForRuntimeAdmission(t, client, ns)
	sandbox := map[string]string{"sandbox": "true"}
	cases := []struct {
		name, runtimeClass string
		labels             map[string]string
		refused            []string // what the refusal says; nil: admitted
	}{
		{name: "sandbox-without-runtime-class", labels: sandbox,
			refused: []string{`runtimeClassName unset is not allowed`, "sandbox=true", "allows only kata, gvisor", "agent-sandbox"}},
		{name: "sandbox-under-runc", labels: sandbox, runtimeClass: "runc",
			refused: []string{`runtimeClassName runc is not allowed`, "allows only kata, gvisor"}},
		{name: "sandbox-with-more-labels-under-runc", labels: map[string]string{"sandbox": "true", "team": "agents"}, runtimeClass: "runc",
			refused: []string{`runtimeClassName runc is not allowed`}},
		{name: "sandbox-under-gvisor", labels: sandbox, runtimeClass: "gvisor"},
		{name: "sandbox-under-kata", labels: sandbox, runtimeClass: "kata"},
		{name: "not-a-sandbox-label-value", labels: map[string]string{"sandbox": "false"}},
		{name: "unlabelled-under-runc", runtimeClass: "runc"},
		{name: "unlabelled-without-runtime-class"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := client.CoreV1().Pods(ns).Create(context.Background(), pod(c.name, c.labels, c.runtimeClass), metav1.CreateOptions{})
			if c.refused == nil {
				if err != nil {
					t.Fatalf("refused, want admitted: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("admitted, want refused")
			}
			if !apierrors.IsForbidden(err) {
				t.Fatalf("refused, but not by the admission policy (want 403 Forbidden): %v", err)
			}
			for _, want := range c.refused {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q does not say %q", err, want)
				}
			}
			if !strings.Contains(err.Error(), "sandprobe-sandbox-runtime") {
				t.Errorf("refusal %q does not name the admission policy", err)
			}
		})
	}
}

// TestSystemNamespacePods proves that what runs in sandprobe-system passes
// its Pod Security "restricted" enforcement and the runtime-class policy:
// the CronJob's own pod and the probe pod render builds for the base's policy
// are admitted; each made lazier in one way is refused.
func TestSystemNamespacePods(t *testing.T) {
	client := appliedBase(t)
	ctx := context.Background()
	waitForRuntimeAdmission(t, client, ownNamespace)
	cj, err := client.BatchV1().CronJobs(ownNamespace).Get(ctx, "sandprobe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runner := func() *corev1.Pod {
		tmpl := cj.Spec.JobTemplate.Spec.Template.DeepCopy()
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "runner", Labels: tmpl.Labels}, Spec: tmpl.Spec}
	}
	p, raw, err := policy.LoadFile("policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	probe := func() *corev1.Pod {
		return render.ProbePod(p, render.ProbePodOptions{Namespace: ownNamespace, PolicyConfigMap: "sandprobe-policy", Nonce: "n"})
	}
	if len(raw) == 0 {
		t.Fatal("empty policy")
	}
	cases := []struct {
		name    string
		pod     *corev1.Pod
		refused string // "" admitted; else what the refusal says
	}{
		{name: "runner", pod: runner()},
		{name: "runner-as-root", pod: func() *corev1.Pod {
			p := runner()
			p.Spec.SecurityContext.RunAsNonRoot, p.Spec.SecurityContext.RunAsUser = nil, nil
			p.Spec.Containers[0].SecurityContext.RunAsNonRoot = nil
			return p
		}(), refused: `violates PodSecurity "restricted:latest"`},
		{name: "runner-keeping-capabilities", pod: func() *corev1.Pod {
			p := runner()
			p.Spec.Containers[0].SecurityContext.Capabilities = nil
			return p
		}(), refused: `violates PodSecurity "restricted:latest"`},
		{name: "probe", pod: probe()},
		{name: "probe-without-runtime-class", pod: func() *corev1.Pod {
			p := probe()
			p.Spec.RuntimeClassName = nil
			return p
		}(), refused: "runtimeClassName unset is not allowed"},
		{name: "probe-allowing-privilege-escalation", pod: func() *corev1.Pod {
			p := probe()
			t := true
			p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = &t
			return p
		}(), refused: `violates PodSecurity "restricted:latest"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.pod.Name, c.pod.Namespace = "test-"+c.name, ownNamespace
			_, err := client.CoreV1().Pods(ownNamespace).Create(ctx, c.pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			switch {
			case c.refused == "" && err != nil:
				t.Fatalf("refused, want admitted: %v", err)
			case c.refused != "" && err == nil:
				t.Fatalf("admitted, want refused with %q", c.refused)
			case c.refused != "" && !strings.Contains(err.Error(), c.refused):
				t.Fatalf("refused with %v, want %q", err, c.refused)
			}
		})
	}
}
