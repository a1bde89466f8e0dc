package main

import (
	"fmt"
	"io"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
)

// The runner's identity in manifests/ and the name of its rights in each
// sandbox namespace.
const (
	runnerServiceAccount = "sandprobe"
	sandboxRoleName      = "sandprobe-probe"
)

// renderRBAC prints the runner's rights in each sandbox namespace (the
// policy's spec.namespaces, or the one --namespace names): what
// manifests/components/sandbox-namespaces holds for the reference policy.
func (a *app) renderRBAC(p *policy.Policy, namespace string) int {
	if err := writeRBAC(a.stdout, p, namespace); err != nil {
		fmt.Fprintf(a.stderr, "sandprobe render: %v\n", err)
		return report.ExitBadInput
	}
	return report.ExitOK
}

func writeRBAC(w io.Writer, p *policy.Policy, namespace string) error {
	namespaces := p.Spec.Namespaces
	if namespace != "" {
		namespaces = []string{namespace}
	}
	if len(namespaces) == 0 {
		return fmt.Errorf("spec.namespaces is empty: there is no sandbox namespace to grant the runner rights in (declare them, or name one with --namespace)")
	}
	var objs []any
	for _, ns := range namespaces {
		role, binding := sandboxRBAC(ns)
		objs = append(objs, role, binding)
	}
	return render.WriteYAML(w, objs...)
}

// sandboxRBAC is the least the runner needs in one sandbox namespace to
// put a probe pod there: create it, learn why it never started (events),
// delete it. Listing and watching pods it already has cluster-wide (drift,
// sandprobe-reader). RBAC cannot say which pods: the runner-scope
// admission policy narrows create to probe pods and delete to the pods the
// runner created. No pods/log: it would be every sandbox's log too; the
// probe leaves its whole result, compressed, in its termination message.
// No ConfigMaps: the policy travels in the probe pod's own annotation.
func sandboxRBAC(ns string) (*rbacv1.Role, *rbacv1.RoleBinding) {
	meta := metav1.ObjectMeta{
		Name: sandboxRoleName, Namespace: ns,
		// No policy label: only the namespace depends on the policy, and an
		// overlay's policy of another name keeps the base's namespace.
		Labels: map[string]string{render.LabelName: "sandprobe", render.LabelManagedBy: "sandprobe"},
	}
	role := &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
		ObjectMeta: meta,
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list"}},
		},
	}
	binding := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
		ObjectMeta: *meta.DeepCopy(),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sandboxRoleName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: runnerServiceAccount, Namespace: systemNamespace}},
	}
	return role, binding
}
