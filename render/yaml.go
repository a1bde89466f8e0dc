package render

import (
	"fmt"
	"io"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/sandprobe/sandprobe/policy"
)

// Manifests are everything `sandprobe render` prints for Kubernetes: the
// policy ConfigMap, the probe pod and the egress policies of the kinds
// given (both when none is).
func Manifests(p *policy.Policy, raw []byte, opts ProbePodOptions, namespace string, kinds ...EgressKind) []any {
	if namespace != "" {
		opts.Namespace = namespace
	}
	if len(kinds) == 0 {
		kinds = []EgressKind{KindNetworkPolicy, KindCilium}
	}
	out := []any{PolicyConfigMap(p, raw, opts), ProbePod(p, opts)}
	return append(out, EgressPolicies(p, namespace, kinds...)...)
}

// EgressPolicies are the egress policies of the kinds given (both when
// none is) in each sandbox namespace (namespace, when given): what to apply
// there, without the probe pod and the policy ConfigMap (render --format
// egress).
func EgressPolicies(p *policy.Policy, namespace string, kinds ...EgressKind) []any {
	if len(kinds) == 0 {
		kinds = []EgressKind{KindNetworkPolicy, KindCilium}
	}
	var out []any
	if slices.Contains(kinds, KindNetworkPolicy) {
		for _, ns := range Namespaces(p, namespace) {
			out = append(out, NetworkPolicy(p, ns))
		}
	}
	if slices.Contains(kinds, KindCilium) {
		for _, ns := range Namespaces(p, namespace) {
			out = append(out, CiliumNetworkPolicy(p, ns))
		}
	}
	return out
}

// WriteYAML writes objects as one multi-document YAML stream. Typed objects
// lose the empty creationTimestamp and status the API types carry, so the
// output is what a person would write.
func WriteYAML(w io.Writer, objs ...any) error {
	for i, o := range objs {
		m, ok := o.(map[string]any)
		if !ok {
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
			if err != nil {
				return fmt.Errorf("render object %d: %w", i, err)
			}
			m = u
			delete(m, "status")
			if md, ok := m["metadata"].(map[string]any); ok {
				delete(md, "creationTimestamp")
			}
		}
		b, err := yaml.Marshal(m)
		if err != nil {
			return fmt.Errorf("render object %d: %w", i, err)
		}
		if _, err := fmt.Fprintf(w, "---\n%s", b); err != nil {
			return err
		}
	}
	return nil
}
