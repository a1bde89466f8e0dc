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
// (kubernetes-sigs/agent-sandbox); SandboxKind their kind.
const (
	SandboxGroup    = "agents.x-k8s.io"
	SandboxKind     = "Sandbox"
	SandboxResource = "sandboxes"
)

// sandboxObject is the part of a Sandbox the rules read: its pod template.
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
	} `json:"spec"`
}

// CheckSandbox checks the pod template of an agents.x-k8s.io Sandbox like a
// pod. It reports whether the object is a sandbox under this policy at all
// (in a sandbox namespace, or its template carries the selector's labels).
func (e *Engine) CheckSandbox(obj *unstructured.Unstructured) ([]report.Finding, bool, error) {
	var sb sandboxObject
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &sb); err != nil {
		return nil, false, fmt.Errorf("sandbox %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	tm := &sb.Spec.PodTemplate.Metadata
	if !e.IsSandbox(sb.Metadata.Namespace, tm.Labels) {
		return nil, false, nil
	}
	c := podCheck{
		e:    e,
		kind: "sandbox",
		name: sb.Metadata.Name,
		ns:   sb.Metadata.Namespace,
		spec: "spec.podTemplate.spec",
		meta: "spec.podTemplate.metadata",
		om:   &metav1.ObjectMeta{Namespace: sb.Metadata.Namespace, Labels: tm.Labels, Annotations: tm.Annotations},
		ps:   &sb.Spec.PodTemplate.Spec,
	}
	c.run()
	return c.out, true, nil
}

// SandboxGVR is the resource for one served version of the Sandbox API.
func SandboxGVR(version string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: SandboxGroup, Version: version, Resource: SandboxResource}
}
