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
	"k8s.io/client-go/rest"

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

// asRunner is a client that acts as the runner's ServiceAccount (the test's
// admin impersonates it), so RBAC and the admission policies see the
// runner's own requests.
func asRunner(t *testing.T) kubernetes.Interface {
	t.Helper()
	appliedBase(t)
	cfg := rest.CopyConfig(cluster.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: serviceAccountUser, Groups: serviceAccountGroups}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRunnerScope proves manifests/runner-guard.yaml with requests made as
// the runner: it creates and deletes only what belongs to a run, and its
// probe pods get neither its ServiceAccount nor a Secret; the same requests
// by anyone else are not its business.
func TestRunnerScope(t *testing.T) {
	admin := appliedBase(t)
	runnerClient := asRunner(t)
	ctx := context.Background()
	p, _, err := policy.LoadFile("policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const run = "sandprobe.dev/run"
	probe := func(mutate func(*corev1.Pod)) *corev1.Pod {
		pod := render.ProbePod(p, render.ProbePodOptions{Namespace: ownNamespace, PolicyConfigMap: "sandprobe-run-r1", Nonce: "n", Labels: map[string]string{run: "r1"}})
		pod.Name = ""
		pod.GenerateName = "probe-"
		if mutate != nil {
			mutate(pod)
		}
		return pod
	}
	configMap := func(name string, labels map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Data: map[string]string{"policy.yaml": "x"}}
	}
	// Objects to delete, made by the admin.
	for _, cm := range []*corev1.ConfigMap{configMap("sandprobe-run-old", map[string]string{run: "old"}), configMap("someone-elses", nil)} {
		if _, err := admin.CoreV1().ConfigMaps(ownNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	// The guard takes effect a moment after it is stored.
	eventually(t, 30*time.Second, func() error {
		_, err := runnerClient.CoreV1().ConfigMaps(ownNamespace).Create(ctx, configMap("guard-ready", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return fmt.Errorf("the runner guard does not refuse yet")
		}
		return nil
	})
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	dryDelete := metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	cases := []struct {
		name    string
		do      func(kubernetes.Interface) error
		refused string // "" admitted; else what the refusal says
	}{
		{name: "probe-pod", do: func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Pods(ownNamespace).Create(ctx, probe(nil), dry)
			return err
		}},
		{name: "pod-without-run-label", refused: "only the objects of its runs", do: func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Pods(ownNamespace).Create(ctx, probe(func(p *corev1.Pod) { delete(p.Labels, run) }), dry)
			return err
		}},
		{name: "pod-as-the-runner-service-account", refused: "default ServiceAccount", do: func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Pods(ownNamespace).Create(ctx, probe(func(p *corev1.Pod) { p.Spec.ServiceAccountName = "sandprobe" }), dry)
			return err
		}},
		{name: "pod-mounting-a-secret", refused: "without Secrets", do: func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Pods(ownNamespace).Create(ctx, probe(func(p *corev1.Pod) {
				p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "any"}}})
			}), dry)
			return err
		}},
		{name: "pod-projecting-a-secret", refused: "without Secrets", do: func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Pods(ownNamespace).Create(ctx, probe(func(p *corev1.Pod) {
				p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "any"}}}}}}})
			}), dry)
			return err
		}},
		{name: "pod-in-another-namespace", refused: "forbidden", do: func(c kubernetes.Interface) error {
			pod := probe(nil)
			pod.Namespace = "default"
			_, err := c.CoreV1().Pods("default").Create(ctx, pod, dry)
			return err
		}},
		{name: "run-configmap", do: func(c kubernetes.Interface) error {
			_, err := c.CoreV1().ConfigMaps(ownNamespace).Create(ctx, configMap("sandprobe-run-r1", map[string]string{run: "r1"}), dry)
			return err
		}},
		{name: "configmap-without-run-label", refused: "only the objects of its runs", do: func(c kubernetes.Interface) error {
			_, err := c.CoreV1().ConfigMaps(ownNamespace).Create(ctx, configMap("sandprobe-policy-2", nil), dry)
			return err
		}},
		{name: "delete-a-leftover-run-configmap", do: func(c kubernetes.Interface) error {
			return c.CoreV1().ConfigMaps(ownNamespace).Delete(ctx, "sandprobe-run-old", dryDelete)
		}},
		{name: "delete-the-policy-configmap", refused: "only the objects of its runs", do: func(c kubernetes.Interface) error {
			return c.CoreV1().ConfigMaps(ownNamespace).Delete(ctx, "sandprobe-policy", dryDelete)
		}},
		{name: "delete-someone-elses-configmap", refused: "only the objects of its runs", do: func(c kubernetes.Interface) error {
			return c.CoreV1().ConfigMaps(ownNamespace).Delete(ctx, "someone-elses", dryDelete)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.do(runnerClient)
			switch {
			case c.refused == "" && err != nil:
				t.Fatalf("refused, want admitted: %v", err)
			case c.refused != "" && err == nil:
				t.Fatalf("admitted, want refused with %q", c.refused)
			case c.refused != "" && !strings.Contains(err.Error(), c.refused):
				t.Fatalf("refused with %v, want %q", err, c.refused)
			}
			// The guard is about the runner only: the admin may.
			if c.refused != "" && c.refused != "forbidden" && !strings.HasPrefix(c.name, "delete") {
				if err := c.do(admin); err != nil {
					t.Errorf("the admin was refused too: %v", err)
				}
			}
		})
	}
}
