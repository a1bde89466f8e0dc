package drift

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sandprobe/sandprobe/report"
)

// SandboxGroup is the API group of the agent Sandbox objects
// (kubernetes-sigs/agent-sandbox); SandboxKind their kind. SandboxTemplates
// (what SandboxClaims and SandboxWarmPools create Sandboxes from) live in
// the extensions group.
const (
	SandboxGroup    = "agents.x-k8s.io"
	SandboxKind     = "Sandbox"
	SandboxResource = "sandboxes"

	SandboxTemplateGroup    = "extensions.agents.x-k8s.io"
	SandboxTemplateKind     = "SandboxTemplate"
	SandboxTemplateResource = "sandboxtemplates"
)

// sandboxObject is the part of a Sandbox or SandboxTemplate the rules read:
// its pod template.
type sandboxObject struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		PodTemplate struct {
			Metadata struct {
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"metadata"`
			Spec corev1.PodSpec `json:"spec"`
		} `json:"podTemplate"`
		Replicas *int32 `json:"replicas,omitempty"`
	} `json:"spec"`
}

// SandboxTemplateOf returns the pod template of an agents.x-k8s.io Sandbox
// or an extensions.agents.x-k8s.io SandboxTemplate.
func SandboxTemplateOf(obj *unstructured.Unstructured) (*Template, error) {
	var sb sandboxObject
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &sb); err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	pt := &sb.Spec.PodTemplate
	t := &Template{
		Kind: obj.GetKind(), Namespace: sb.Metadata.Namespace, Name: sb.Metadata.Name, UID: sb.Metadata.UID,
		Owner: controllerOf(sb.Metadata.OwnerReferences),
		Meta:  metav1.ObjectMeta{Labels: pt.Metadata.Labels, Annotations: pt.Metadata.Annotations},
		Spec:  &pt.Spec, SpecPath: "spec.podTemplate.spec", MetaPath: "spec.podTemplate.metadata",
	}
	if t.Kind == SandboxKind {
		// The API defaults replicas to 1 (0 pauses the sandbox).
		one := int32(1)
		t.Replicas = &one
		if sb.Spec.Replicas != nil {
			t.Replicas = sb.Spec.Replicas
		}
	}
	if t.Kind == SandboxTemplateKind && pt.Spec.AutomountServiceAccountToken == nil {
		t.Notes = map[string]string{PodSAToken: "automountServiceAccountToken is unset: newer agent-sandbox controllers default it to false for sandboxes made from a template, older ones do not — set it so the verdict does not depend on the controller's version"}
	}
	return t, nil
}

// CheckSandbox checks the pod template of a Sandbox (or SandboxTemplate)
// like a pod. It reports whether the object is a sandbox under this policy
// at all (in a sandbox namespace, or its template carries the selector's
// labels).
func (e *Engine) CheckSandbox(obj *unstructured.Unstructured) ([]report.Finding, bool, error) {
	t, err := SandboxTemplateOf(obj)
	if err != nil {
		return nil, false, err
	}
	fs, ok := e.CheckTemplate(t)
	return fs, ok, nil
}

// SandboxGVR is the resource for one served version of the Sandbox API.
func SandboxGVR(version string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: SandboxGroup, Version: version, Resource: SandboxResource}
}

// SandboxTemplateGVR is the resource for one served version of the SandboxTemplate API.
func SandboxTemplateGVR(version string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: SandboxTemplateGroup, Version: version, Resource: SandboxTemplateResource}
}
