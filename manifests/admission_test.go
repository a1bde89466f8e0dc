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
	"k8s.io/apimachinery/pkg/types"
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
			return fmt.Errorf("create: %w", err)
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

// runnerPod is the probe pod the kube runner would create in namespace ns
// (the kube backend's own additions over render's: run label, inline
// policy, no token, who created it), for the reference policy.
func runnerPod(t *testing.T, ns string, mutate func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	p, raw, err := policy.LoadFile("policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pod := render.ProbePod(p, render.ProbePodOptions{Namespace: ns, ProbeImage: baseProbeImage(t), PolicyInline: raw, Nonce: "n", Labels: map[string]string{runLabel: "r1"}})
	pod.Name = ""
	pod.GenerateName = "probe-"
	f := false
	pod.Spec.AutomountServiceAccountToken = &f
	pod.Annotations[createdBy] = serviceAccountUser
	if mutate != nil {
		mutate(pod)
	}
	return pod
}

const (
	runLabel  = "sandprobe.dev/run"
	createdBy = "sandprobe.dev/created-by"
)

// waitForRunnerGuard waits until the runner-scope policy refuses what it
// must: a policy takes effect a moment after it is stored (and its
// parameter, the CronJob, after that).
func waitForRunnerGuard(t *testing.T, runner kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 30*time.Second, func() error {
		_, err := runner.CoreV1().Pods(sandboxNamespace).Create(ctx, runnerPod(t, sandboxNamespace, func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil.invalid/x:1" }),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil || !strings.Contains(err.Error(), "sandprobe-runner-scope") {
			return fmt.Errorf("the runner guard does not refuse yet: %w", err)
		}
		_, err = runner.CoreV1().Pods(sandboxNamespace).Create(ctx, runnerPod(t, sandboxNamespace, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return fmt.Errorf("the runner guard does not admit a probe pod yet: %w", err)
		}
		return nil
	})
}

// TestRunnerScope proves manifests/runner-guard.yaml with real requests
// made as the runner's ServiceAccount, in the sandbox namespace and its
// own: it creates only probe pods (its image, its run labels, no token, no
// Secret, ConfigMap or hostPath volume, not privileged), only in the
// sandbox namespaces and its own, and deletes only pods it created; the
// same requests by anyone else are not its business.
func TestRunnerScope(t *testing.T) {
	admin := appliedBase(t)
	runnerClient := asRunner(t)
	ctx := context.Background()
	waitForRuntimeAdmission(t, admin, sandboxNamespace)
	waitForRunnerGuard(t, runnerClient)
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	create := func(ns string, mutate func(*corev1.Pod)) func(kubernetes.Interface) error {
		return func(c kubernetes.Interface) error {
			_, err := c.CoreV1().Pods(ns).Create(ctx, runnerPod(t, ns, mutate), dry)
			return err
		}
	}
	withVolume := func(v corev1.VolumeSource) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "extra", VolumeSource: v})
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "extra", MountPath: "/extra"})
		}
	}
	yes := true
	cases := []struct {
		name string
		// ns and mutate make a probe pod to create, or do is the request.
		ns      string
		mutate  func(*corev1.Pod)
		do      func(kubernetes.Interface) error
		refused string // "" admitted; else what the refusal says
		// adminToo: the admin may do the same (the guard is about the runner only).
		adminToo bool
	}{
		{name: "probe-pod-in-the-sandbox-namespace", ns: sandboxNamespace},
		{name: "probe-pod-in-its-own-namespace", ns: ownNamespace},
		{name: "pod-outside-spec-namespaces", refused: "forbidden", ns: "default"},
		{name: "pod-in-kube-system", refused: "forbidden", ns: "kube-system"},
		{name: "another-image", refused: "only the runner's own image", adminToo: true, ns: sandboxNamespace, mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "docker.io/library/busybox:1"
		}},
		{name: "another-image-in-an-init-container", refused: "only the runner's own image", adminToo: true, ns: sandboxNamespace, mutate: func(p *corev1.Pod) {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "x", Image: "docker.io/library/busybox:1", Command: []string{"sh"}})
		}},
		{name: "without-run-label", refused: "only the pods of its runs", adminToo: true, ns: sandboxNamespace, mutate: func(p *corev1.Pod) { delete(p.Labels, runLabel) }},
		{name: "with-a-token", refused: "without its token", adminToo: true, ns: sandboxNamespace, mutate: func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil }},
		{name: "with-a-token-asked-for", refused: "without its token", adminToo: true, ns: sandboxNamespace, mutate: func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = &yes }},
		{name: "as-the-runner-service-account", refused: "default ServiceAccount", ns: sandboxNamespace, mutate: func(p *corev1.Pod) { p.Spec.ServiceAccountName = "sandprobe" }},
		{name: "projecting-a-token", refused: "only emptyDir and downwardAPI", adminToo: true, ns: sandboxNamespace, mutate: func(p *corev1.Pod) {
			// The API insists on a named ServiceAccount for a token projection.
			p.Spec.ServiceAccountName = "default"
			withVolume(corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}})(p)
		}},
		{name: "mounting-a-secret", refused: "only emptyDir and downwardAPI", adminToo: true, ns: sandboxNamespace, mutate: withVolume(corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "broker"}})},
		{name: "projecting-a-secret", refused: "only emptyDir and downwardAPI", adminToo: true, ns: sandboxNamespace, mutate: withVolume(corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "broker"}}}}}})},
		{name: "mounting-a-configmap", refused: "only emptyDir and downwardAPI", adminToo: true, ns: sandboxNamespace, mutate: withVolume(corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "agent-config"}}})},
		{name: "mounting-a-host-path", refused: "only emptyDir and downwardAPI", adminToo: true, ns: sandboxNamespace, mutate: withVolume(corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}})},
		{name: "privileged", refused: "not privileged", adminToo: true, ns: sandboxNamespace, mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Privileged = &yes
			p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = &yes
		}},
		{name: "on-the-host-network", refused: "shares no host namespace", adminToo: true, ns: sandboxNamespace, mutate: func(p *corev1.Pod) { p.Spec.HostNetwork = true }},
		{name: "with-a-host-port", refused: "shares no host namespace or port", adminToo: true, ns: sandboxNamespace, mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 8080}}
		}},
		{name: "bypassing-the-scheduler", refused: "placed by the scheduler", adminToo: true, ns: sandboxNamespace, mutate: func(p *corev1.Pod) { p.Spec.NodeName = "worker-1" }},
		{name: "claiming-another-creator", refused: "sandprobe.dev/created-by", ns: sandboxNamespace, mutate: func(p *corev1.Pod) { p.Annotations[createdBy] = "system:admin" }},
		{name: "a-configmap", refused: "forbidden", do: func(c kubernetes.Interface) error {
			_, err := c.CoreV1().ConfigMaps(ownNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sandprobe-run-r1", Labels: map[string]string{runLabel: "r1"}}}, dry)
			return err
		}},
	}
	refusals := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			do := c.do
			if do == nil {
				do = create(c.ns, c.mutate)
			}
			err := do(runnerClient)
			switch {
			case c.refused == "" && err != nil:
				t.Fatalf("refused, want admitted: %v", err)
			case c.refused != "" && err == nil:
				t.Fatalf("admitted, want refused with %q", c.refused)
			case c.refused != "" && !strings.Contains(err.Error(), c.refused):
				t.Fatalf("refused with %v, want %q", err, c.refused)
			}
			if c.refused != "" {
				refusals++
			}
			if c.adminToo {
				// The same pod from the admin (claiming no creator: that
				// annotation is the runner's alone) is not the guard's business.
				if _, err := admin.CoreV1().Pods(c.ns).Create(ctx, runnerPod(t, c.ns, func(p *corev1.Pod) {
					c.mutate(p)
					delete(p.Annotations, createdBy)
				}), dry); err != nil {
					t.Errorf("the admin was refused too: %v", err)
				}
			}
		})
	}
	t.Logf("%d real admission requests as the runner, %d refused as they must be", len(cases), refusals)
}

// TestRunnerDeletesOnlyItsOwn: real pods, really deleted. The runner
// deletes a probe pod it created; it cannot delete a sandbox, a pod that
// copies a probe pod's labels, or one whose created-by annotation someone
// forged, because nobody but the runner can make a pod that names the
// runner as its creator, on creation or afterwards.
func TestRunnerDeletesOnlyItsOwn(t *testing.T) {
	admin := appliedBase(t)
	runnerClient := asRunner(t)
	ctx := context.Background()
	waitForRuntimeAdmission(t, admin, sandboxNamespace)
	waitForRunnerGuard(t, runnerClient)
	ns := sandboxNamespace
	grace := int64(0)
	del := metav1.DeleteOptions{GracePeriodSeconds: &grace}

	own, err := runnerClient.CoreV1().Pods(ns).Create(ctx, runnerPod(t, ns, nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the runner cannot create its probe pod: %v", err)
	}
	sandbox, err := admin.CoreV1().Pods(ns).Create(ctx, pod("agent-1", map[string]string{"sandbox": "true"}, "gvisor"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A pod with a probe pod's labels and annotations but its own creator.
	lookalike := runnerPod(t, ns, nil)
	lookalike.GenerateName = "lookalike-"
	delete(lookalike.Annotations, createdBy)
	copied, err := admin.CoreV1().Pods(ns).Create(ctx, lookalike, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, name := range []string{sandbox.Name, copied.Name} {
			admin.CoreV1().Pods(ns).Delete(context.Background(), name, del)
		}
	})
	// Forging the creator, at creation or afterwards, is refused to anyone.
	forged := runnerPod(t, ns, nil)
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, forged, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "sandprobe-created-by") {
		t.Errorf("the admin created a pod naming the runner as its creator: %v", err)
	}
	patch := []byte(`{"metadata":{"annotations":{"sandprobe.dev/created-by":"` + serviceAccountUser + `"}}}`)
	if _, err := admin.CoreV1().Pods(ns).Patch(ctx, copied.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err == nil || !strings.Contains(err.Error(), "never changes") {
		t.Errorf("the admin made a pod name the runner as its creator afterwards: %v", err)
	}
	if _, err := admin.CoreV1().Pods(ns).Patch(ctx, own.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"sandprobe.dev/created-by":null}}}`), metav1.PatchOptions{}); err == nil {
		t.Errorf("the admin removed the creator of the runner's pod")
	}
	for _, c := range []struct {
		name, pod, refused string
	}{
		{"a sandbox", sandbox.Name, "only the pods of its runs"},
		{"a look-alike of a probe pod", copied.Name, "only pods it created"},
		{"its own probe pod", own.Name, ""},
	} {
		err := runnerClient.CoreV1().Pods(ns).Delete(ctx, c.pod, del)
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("delete %s: refused: %v", c.name, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("delete %s: %v, want refused with %q", c.name, err, c.refused)
		}
	}
	if _, err := admin.CoreV1().Pods(ns).Get(ctx, own.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the runner's own pod is still there: %v", err)
	}
}
