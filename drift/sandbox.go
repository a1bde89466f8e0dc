package drift

import (
	"fmt"
	"hash/fnv"
	"maps"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
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
	if t.Kind == SandboxTemplateKind {
		// Every pod made from the template carries its ref-hash label: the
		// label its managed NetworkPolicy selects.
		t.Meta.Labels = maps.Clone(t.Meta.Labels)
		if t.Meta.Labels == nil {
			t.Meta.Labels = map[string]string{}
		}
		t.Meta.Labels[SandboxTemplateRefHashLabel] = sandboxTemplateRefHash(t.Name)
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

// What the agent-sandbox SandboxTemplate controller renders
// (kubernetes-sigs/agent-sandbox, extensions/controllers): a template
// under networkPolicyManagement Managed (the default) gets one shared
// NetworkPolicy, "<template>-network-policy" in its namespace, selecting
// every pod made from it by the template-ref-hash label the controllers
// put on those pods; its ingress and egress are the template's
// spec.networkPolicy, or when that is unset the controller's "secure
// default", whose egress opens the public internet on every port.
const (
	SandboxTemplateRefHashLabel = "agents.x-k8s.io/sandbox-template-ref-hash"
	sandboxRouterNamespace      = "agent-sandbox-system"
	// renderedFromAnnotation marks a NetworkPolicy drift rendered itself
	// from a SandboxTemplate: its findings say so.
	renderedFromAnnotation = "sandprobe.dev/rendered-from"
	renderedFixAnnotation  = "sandprobe.dev/rendered-fix"
)

// sandboxTemplateRefHash is the controllers' NameHash: FNV-1a 32 of the
// template's name, as eight hex digits.
func sandboxTemplateRefHash(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("%08x", h.Sum32())
}

// sandboxTemplateNetpol is the part of a SandboxTemplate its controller
// renders a NetworkPolicy from.
type sandboxTemplateNetpol struct {
	Spec struct {
		NetworkPolicy *struct {
			Ingress []networkingv1.NetworkPolicyIngressRule `json:"ingress,omitempty"`
			Egress  []networkingv1.NetworkPolicyEgressRule  `json:"egress,omitempty"`
		} `json:"networkPolicy,omitempty"`
		NetworkPolicyManagement string `json:"networkPolicyManagement,omitempty"`
	} `json:"spec"`
}

// SandboxTemplateNetworkPolicy is the NetworkPolicy the agent-sandbox
// controller keeps for a SandboxTemplate, or nil when it keeps none
// (networkPolicyManagement Unmanaged, or obj is not a SandboxTemplate).
// drift -f judges it like a NetworkPolicy in the files; a live cluster
// holds the controller's own.
func SandboxTemplateNetworkPolicy(obj *unstructured.Unstructured) (*networkingv1.NetworkPolicy, error) {
	if obj.GetKind() != SandboxTemplateKind {
		return nil, nil
	}
	var st sandboxTemplateNetpol
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &st); err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	switch st.Spec.NetworkPolicyManagement {
	case "", "Managed":
	case "Unmanaged":
		return nil, nil
	default:
		return nil, fmt.Errorf("%s %s/%s: spec.networkPolicyManagement: %q is neither Managed nor Unmanaged", obj.GetKind(), obj.GetNamespace(), obj.GetName(), st.Spec.NetworkPolicyManagement)
	}
	from := fmt.Sprintf("sandboxtemplate/%s/%s: the agent-sandbox controller renders it (networkPolicyManagement Managed) from spec.networkPolicy", obj.GetNamespace(), obj.GetName())
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: obj.GetName() + "-network-policy", Namespace: obj.GetNamespace()},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{SandboxTemplateRefHashLabel: sandboxTemplateRefHash(obj.GetName())}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
	fix := fmt.Sprintf("narrow spec.networkPolicy.egress of sandboxtemplate %s/%s to the declared destinations (the controller renders it into networkpolicy %s)", obj.GetNamespace(), obj.GetName(), np.Name)
	if p := st.Spec.NetworkPolicy; p != nil {
		np.Spec.Ingress, np.Spec.Egress = p.Ingress, p.Egress
	} else {
		fix = fmt.Sprintf("set spec.networkPolicy.egress of sandboxtemplate %s/%s to the declared destinations (unset, the controller's default opens the public internet), or networkPolicyManagement: Unmanaged with a policy of your own", obj.GetNamespace(), obj.GetName())
		from = fmt.Sprintf("sandboxtemplate/%s/%s leaves spec.networkPolicy unset under networkPolicyManagement Managed: the agent-sandbox controller renders its secure default, which allows every port to the public internet (0.0.0.0/0 and ::/0 but private and link-local ranges)", obj.GetNamespace(), obj.GetName())
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": sandboxRouterNamespace}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sandbox-router"}},
		}}}}
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"}}},
			{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: []string{"fc00::/7", "fe80::/10"}}},
		}}}
	}
	np.Annotations = map[string]string{renderedFromAnnotation: from, renderedFixAnnotation: fix}
	return np, nil
}
