package admission

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestTemplatesAndLabelsOnAPIServer: on a real API server, the policies
// `render --format admission --require-labels` writes, in the deny stage,
// refuse at apply time a Deployment, StatefulSet, Job and CronJob whose pod
// template carries the sandbox labels but runs under runc or no class, with
// the policy's message naming the object; admit the same under gvisor, and
// a template without the labels; refuse a pod in a sandbox namespace
// without the labels, and admit it in another namespace. In the warn stage
// the same objects are admitted with the policies' warnings.
func TestTemplatesAndLabelsOnAPIServer(t *testing.T) {
	client := auditedAPIServer(t)
	ctx := context.Background()
	t.Cleanup(func() {
		for _, name := range []string{TemplatesPolicyName, LabelsPolicyName} {
			client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
			client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{})
		}
		applyRendered(t, refPolicy, "audit", func() error { return nil }) // the pods' policy back to a stage that refuses nothing
	})
	sandbox := map[string]string{"sandbox": "true"}
	const ns = "sandboxes"
	apply := func(kind string, labels map[string]string, class string) error {
		return applyTemplate(ctx, client, ns, kind, labels, class)
	}
	ready := func() error {
		if err := apply("Deployment", sandbox, "runc"); !apierrors.IsForbidden(err) {
			return fmt.Errorf("deployment under runc: %w, want Forbidden", err)
		}
		if _, err := create(t, newPod(ns, "ready-unlabelled", nil, "gvisor"), true); !apierrors.IsForbidden(err) {
			return fmt.Errorf("unlabelled pod: %w, want Forbidden", err)
		}
		return nil
	}
	applyRendered(t, refPolicy, "deny", ready, "--require-labels")
	for _, kind := range []string{"Deployment", "StatefulSet", "Job", "CronJob"} {
		for _, c := range []struct {
			labels  map[string]string
			class   string
			refused bool
		}{{sandbox, "runc", true}, {sandbox, "", true}, {sandbox, "gvisor", false}, {nil, "runc", false}} {
			err := apply(kind, c.labels, c.class)
			switch {
			case c.refused && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), kind+" ") || !strings.Contains(err.Error(), "is not allowed for a sandbox pod template (labels sandbox=true)")):
				t.Errorf("%s labels %v class %q: %v, want refused with the policy's message", kind, c.labels, c.class, err)
			case !c.refused && err != nil:
				t.Errorf("%s labels %v class %q: refused: %v", kind, c.labels, c.class, err)
			}
		}
	}
	if _, err := create(t, newPod(ns, "unlabelled", nil, "gvisor"), true); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "pod unlabelled in sandbox namespace sandboxes lacks the sandbox labels sandbox=true") {
		t.Errorf("an unlabelled pod in the sandbox namespace: %v, want refused with the policy's message", err)
	}
	if _, err := create(t, newPod("builds", "unlabelled", nil, "runc"), true); err != nil {
		t.Errorf("an unlabelled pod in another namespace: %v", err)
	}
	if _, err := create(t, newPod(ns, "labelled", sandbox, "gvisor"), true); err != nil {
		t.Errorf("a sandbox pod as declared: %v", err)
	}

	// Warn: admitted, with the policies' messages as warnings.
	applyRendered(t, refPolicy, "warn", func() error {
		if ws, err := create(t, newPod(ns, "warn-ready", nil, "gvisor"), true); err != nil || len(ws) == 0 {
			return fmt.Errorf("unlabelled pod in warn: %w, warnings %q", err, ws)
		}
		return nil
	}, "--require-labels")
	ws, err := create(t, newPod(ns, "warned", nil, "gvisor"), true)
	if err != nil || !strings.Contains(strings.Join(ws, "\n"), "ValidatingAdmissionPolicy '"+LabelsPolicyName+"'") {
		t.Errorf("warn stage: %v, warnings %q", err, ws)
	}
}

// applyTemplate creates, as a dry run, a workload of kind in ns whose pod
// template carries labels and runs under class.
func applyTemplate(ctx context.Context, client kubernetes.Interface, ns, kind string, labels map[string]string, class string) error {
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	name := strings.ToLower(kind) + "-" + class + "x"
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
	p := newPod(ns, "", labels, class)
	pt := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: p.Spec}
	pt.Labels = map[string]string{"app": name}
	for k, v := range labels {
		pt.Labels[k] = v
	}
	pt.Spec.RestartPolicy = corev1.RestartPolicyNever
	meta := metav1.ObjectMeta{Name: name, Namespace: ns}
	var err error
	switch kind {
	case "Deployment":
		pt.Spec.RestartPolicy = corev1.RestartPolicyAlways
		_, err = client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{Selector: sel, Template: pt}}, dry)
	case "StatefulSet":
		pt.Spec.RestartPolicy = corev1.RestartPolicyAlways
		_, err = client.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{Selector: sel, Template: pt}}, dry)
	case "Job":
		_, err = client.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: meta, Spec: batchv1.JobSpec{Template: pt}}, dry)
	case "CronJob":
		_, err = client.BatchV1().CronJobs(ns).Create(ctx, &batchv1.CronJob{ObjectMeta: meta, Spec: batchv1.CronJobSpec{Schedule: "*/30 * * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: pt}}}}, dry)
	}
	return err
}
