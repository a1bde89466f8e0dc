package kube

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// testLogger sends the backend's logs to the test's log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestHealthyRun: a pod that runs and reports is collected from its
// termination message (envtest has no kubelet to serve logs), carries the
// run's labels, nonce, runtime class and deadline, gets the runner's
// host-kernel cross-check, and is gone afterwards with its ConfigMap.
func TestHealthyRun(t *testing.T) {
	f := newFixture(t)
	f.node("node-a", "6.1.0-test", map[string]string{"pool": "sandbox"})
	var seen *corev1.Pod
	f.kubelet(runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
		seen = pod
		k.exit(ctx, pod, 0, "Completed", message(t, probeResult(pod, "4.4.0")))
	}))
	b := f.backend()
	var lines []string
	b.Progress = func(msg string) { lines = append(lines, msg) }
	spec := specFor(t, gvisorPolicy)
	results, err := b.Run(context.Background(), spec)
	results = probeResults(results)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(results) != 1 || results[0].Target != Target(f.ns, "node-a") {
		t.Fatalf("results: %+v", results)
	}
	res := results[0]
	if !res.Compact {
		t.Errorf("the result should come from the termination message (compact)")
	}
	i := slices.IndexFunc(res.Findings, func(f report.Finding) bool { return f.Subject == runner.HostKernelSubject })
	if i < 0 || res.Findings[i].Status != report.Pass || !strings.Contains(res.Findings[i].Evidence, "6.1.0-test") {
		t.Errorf("no passing host-kernel cross-check: %+v", res.Findings)
	}
	if seen == nil {
		t.Fatal("the kubelet never saw the pod")
	}
	checkProbePodShape(t, seen, spec)
	for _, f := range res.Findings {
		if f.Namespace != seen.Namespace {
			t.Errorf("finding %s has namespace %q, want %q", f.Name(), f.Namespace, seen.Namespace)
		}
	}
	if left := f.leftovers(); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "running on node-a") }) {
		t.Errorf("progress never said the pod was running: %q", lines)
	}
	if lines[len(lines)-1] != "" {
		t.Errorf("progress not cleared at the end: %q", lines[len(lines)-1])
	}
}

// checkProbePodShape: the probe pod carries the run's nonce and class,
// the sandbox labels, the policy in an annotation and no volume but
// emptyDir and downwardAPI, no token, its creator, a deadline, and pulls
// nothing.
func checkProbePodShape(t *testing.T, seen *corev1.Pod, spec runner.ProbeSpec) {
	t.Helper()
	c := seen.Spec.Containers[0]
	for _, want := range []string{"--nonce " + spec.Nonce, "--runtime-class gvisor"} {
		if !strings.Contains(strings.Join(c.Args, " "), want) {
			t.Errorf("probe args %q lack %q", c.Args, want)
		}
	}
	if seen.Labels["sandbox"] != "true" || seen.Labels[LabelRun] == "" || seen.Labels[LabelNonce] != spec.Nonce || seen.Annotations[AnnotationNonce] != spec.Nonce {
		t.Errorf("labels %v annotations %v", seen.Labels, seen.Annotations)
	}
	// The policy travels in the pod itself: no ConfigMap in the namespace.
	if seen.Annotations[render.AnnotationPolicy] != string(spec.PolicyBytes) {
		t.Errorf("annotation %s = %q, want the policy as written", render.AnnotationPolicy, seen.Annotations[render.AnnotationPolicy])
	}
	for _, v := range seen.Spec.Volumes {
		if v.ConfigMap != nil || v.Secret != nil || v.HostPath != nil || v.Projected != nil {
			t.Errorf("volume %s is not emptyDir or downwardAPI: %+v", v.Name, v.VolumeSource)
		}
	}
	if a := seen.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("automountServiceAccountToken %v, want false", a)
	}
	if by := seen.Annotations[AnnotationCreatedBy]; by == "" {
		t.Errorf("no %s annotation: the runner-scope admission policy would not let it delete the pod", AnnotationCreatedBy)
	}
	if rc := seen.Spec.RuntimeClassName; rc == nil || *rc != "gvisor" {
		t.Errorf("runtimeClassName %v", rc)
	}
	if d := seen.Spec.ActiveDeadlineSeconds; d == nil || *d != 20 {
		t.Errorf("activeDeadlineSeconds %v, want 20", d)
	}
	if c.ImagePullPolicy != corev1.PullNever {
		t.Errorf("pull policy %s", c.ImagePullPolicy)
	}
}

// TestFailClosed: every way a probe pod can fail to report ends the run
// with a could-not-run of the named reason, and nothing is left behind.
func TestFailClosed(t *testing.T) {
	cases := []struct {
		name   string
		script script
		// deadline, when set, is the run's own deadline.
		deadline time.Duration
		reason   string
		detail   string
	}{
		{
			name: "unschedulable",
			script: func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				k.status(ctx, pod, func(s *corev1.PodStatus) {
					s.Phase = corev1.PodPending
					s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
						Message: "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."}}
				})
			},
			reason: runner.ReasonUnschedulable, detail: "didn't match Pod's node affinity",
		},
		{
			name: "image never pulled",
			script: func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				k.bind(ctx, pod, "node-a")
				k.waiting(ctx, pod, "ErrImageNeverPull", `Container image "sandprobe.local/sandprobe:test" is not present with pull policy of Never`)
			},
			reason: runner.ReasonImagePull, detail: "ErrImageNeverPull",
		},
		{
			name: "image pull backoff",
			script: func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				k.bind(ctx, pod, "node-a")
				k.waiting(ctx, pod, "ContainerCreating", "")
				k.waiting(ctx, pod, "ImagePullBackOff", "Back-off pulling image")
			},
			reason: runner.ReasonImagePull, detail: "ImagePullBackOff",
		},
		{
			name: "create container error past the grace",
			script: func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				k.bind(ctx, pod, "node-a")
				k.waiting(ctx, pod, "CreateContainerConfigError", `configmap "x" not found`)
			},
			reason: runner.ReasonLaunch, detail: "CreateContainerConfigError",
		},
		{
			name: "exit 42",
			script: runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				k.exit(ctx, pod, 42, "Error", "")
			}),
			reason: runner.ReasonCrashed, detail: "exited 42",
		},
		{
			name: "SIGSEGV",
			script: runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				k.exit(ctx, pod, 139, "Error", "")
			}),
			reason: runner.ReasonCrashed, detail: "signal 11",
		},
		{
			name: "Go panic with its tail as the termination message",
			script: runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				k.exit(ctx, pod, 2, "Error", "panic: runtime error: index out of range\n\ngoroutine 1 [running]:\nmain.main()")
			}),
			reason: runner.ReasonCrashed, detail: "panicked",
		},
		{
			name: "OOM killed",
			script: runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				k.exit(ctx, pod, 137, "OOMKilled", "")
			}),
			reason: runner.ReasonOOM, detail: "256Mi",
		},
		{
			name: "kubelet's active deadline",
			script: runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				k.status(ctx, pod, func(s *corev1.PodStatus) {
					s.Phase, s.Reason, s.Message = corev1.PodFailed, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
				})
			}),
			reason: runner.ReasonDeadline, detail: "activeDeadlineSeconds",
		},
		{
			name: "our own deadline while running",
			script: runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				// and never ends
			}),
			deadline: 2 * time.Second,
			reason:   runner.ReasonDeadline, detail: "running on node-a",
		},
		{
			name: "our own deadline while pending",
			script: func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				k.bind(ctx, pod, "node-a")
				k.waiting(ctx, pod, "ContainerCreating", "")
			},
			deadline: 2 * time.Second,
			reason:   runner.ReasonDeadline, detail: "creating the container",
		},
		{
			name: "no log and no termination message",
			script: runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				k.exit(ctx, pod, 0, "Completed", "")
			}),
			reason: runner.ReasonLogsUnavailable, detail: "no termination message",
		},
		{
			name: "garbled",
			script: runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				k.exit(ctx, pod, 0, "Completed", "hello from a wrapper script\n")
			}),
			reason: runner.ReasonGarbled, detail: "hello from a wrapper",
		},
		{
			name: "truncated",
			script: runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				msg := message(t, probeResult(pod, "4.4.0"))
				k.exit(ctx, pod, 0, "Completed", msg[:len(msg)/2])
			}),
			reason: runner.ReasonTruncated,
		},
		{
			name: "wrong nonce",
			script: runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				res := probeResult(pod, "4.4.0")
				res.Nonce = "0123456789abcdef01234567"
				k.exit(ctx, pod, 0, "Completed", message(t, res))
			}),
			reason: runner.ReasonWrongNonce, detail: "0123456789abcdef01234567",
		},
		{
			name: "exit 0 with failures inside",
			script: runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				k.exit(ctx, pod, 0, "Completed", message(t, probeResult(pod, "4.4.0", report.Pass, report.Fail)))
			}),
			reason: runner.ReasonInconsistentExit,
		},
		{
			name: "deleted by someone else",
			script: runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				zero := int64(0)
				k.cs.CoreV1().Pods(k.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			}),
			reason: runner.ReasonNoResult, detail: "deleted by someone else",
		},
		{
			name: "evicted",
			script: runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				k.status(ctx, pod, func(s *corev1.PodStatus) {
					s.Phase, s.Reason, s.Message = corev1.PodFailed, "Evicted", "The node was low on resource: ephemeral-storage."
				})
			}),
			reason: runner.ReasonCrashed, detail: "evicted",
		},
		{
			name: "failed without the container running",
			script: func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				k.bind(ctx, pod, "node-a")
				k.status(ctx, pod, func(s *corev1.PodStatus) {
					s.Phase, s.Reason, s.Message = corev1.PodFailed, "UnexpectedAdmissionError", "Allocate failed"
				})
			},
			reason: runner.ReasonLaunch, detail: "UnexpectedAdmissionError",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.kubelet(c.script)
			b := f.backend()
			spec := specFor(t, gvisorPolicy)
			spec.Deadline = c.deadline
			start := time.Now()
			results, err := b.Run(context.Background(), spec)
			results = probeResults(results)
			if len(results) != 0 {
				t.Errorf("results despite the failure: %+v", results)
			}
			var cnr *runner.CouldNotRun
			if !errors.As(err, &cnr) {
				t.Fatalf("err = %v, want a could-not-run", err)
			}
			if cnr.Reason != c.reason || !strings.Contains(cnr.Detail, c.detail) {
				t.Errorf("got %s: %s\nwant %s containing %q", cnr.Reason, cnr.Detail, c.reason, c.detail)
			}
			if !strings.HasPrefix(cnr.Target, "namespace/"+f.ns) {
				t.Errorf("target %q names neither the node nor the pod", cnr.Target)
			}
			if took := time.Since(start); took > 15*time.Second {
				t.Errorf("took %s to fail", took)
			}
			if left := f.leftovers(); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

// TestAdmissionRefused: a ValidatingAdmissionPolicy that refuses
// sandbox-labelled pods without an allowed runtime class refuses the probe
// pod too (it is a sandbox look-alike): admission-refused, with the
// policy's message.
func TestAdmissionRefused(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	name := "sandbox-runtime-" + f.ns
	vap := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: `!has(object.metadata.labels) || !('sandbox' in object.metadata.labels) || (has(object.spec.runtimeClassName) && object.spec.runtimeClassName in ['kata'])`,
				Message:    "sandbox pods must run under runtime class kata",
			}},
		},
	}
	if _, err := f.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, vap, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": f.ns},
			}},
		},
	}
	if _, err := f.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	// Until the policy takes effect, pods run and report.
	f.kubelet(runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
		k.exit(ctx, pod, 0, "Completed", message(t, probeResult(pod, "4.4.0")))
	}))
	b := f.backend()
	spec := specFor(t, gvisorPolicy)
	// The policy and binding take a moment to reach the admission plugin.
	var cnr *runner.CouldNotRun
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := b.Run(ctx, spec)
		if errors.As(err, &cnr) && cnr.Reason == runner.ReasonAdmission {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never refused: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !strings.Contains(cnr.Detail, "must run under runtime class kata") {
		t.Errorf("detail lacks the policy's message: %s", cnr.Detail)
	}
	if left := f.leftovers(); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestWholeResultFromTerminationMessage: where the runner may not read pod
// logs (a sandbox namespace; envtest has no kubelet to serve them anyway),
// the whole result still arrives, compressed in the termination message,
// passes and evidence included.
func TestWholeResultFromTerminationMessage(t *testing.T) {
	f := newFixture(t)
	f.node("node-a", "6.1.0-test", nil)
	f.kubelet(runThen(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
		res := probeResult(pod, "4.4.0")
		for i := range res.Findings {
			res.Findings[i].Evidence = "what was attempted and what stopped it"
		}
		declareRoles(&res)
		msg, err := res.TerminationMessage(report.TerminationMsgSize)
		if err != nil {
			t.Error(err)
		}
		k.exit(ctx, pod, 0, "Completed", string(msg))
	}))
	results, err := f.backend().Run(context.Background(), specFor(t, gvisorPolicy))
	results = probeResults(results)
	if err != nil || len(results) != 1 {
		t.Fatalf("run: %v %+v", err, results)
	}
	res := results[0]
	if res.Compact || res.OmittedPasses != 0 {
		t.Errorf("compact %v, %d passes omitted: want the whole result", res.Compact, res.OmittedPasses)
	}
	if i := slices.IndexFunc(res.Findings, func(f report.Finding) bool { return f.Status == report.Pass && f.Evidence != "" }); i < 0 {
		t.Errorf("no passing finding with its evidence: %+v", res.Findings)
	}
}
