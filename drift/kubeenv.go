package drift

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// kubeEnv is a container's environment as far as its spec tells it, built
// the way the kubelet builds it: the envFrom sources first, then each env
// entry in order, a literal value with its $(VAR) references expanded
// against the variables before it, a later entry of a name replacing an
// earlier one. What only the cluster knows (a ConfigMap's or Secret's
// keys, the downward API) is kept as unknown, with the reason.
type kubeEnv struct {
	c    *corev1.Container
	vars map[string]envValue
}

// envValue is a variable's value, or why it is not known from the spec.
type envValue struct {
	value   string
	unknown string // "" when value is what the container gets
}

func newKubeEnv(c *corev1.Container) *kubeEnv {
	e := &kubeEnv{c: c, vars: make(map[string]envValue, len(c.Env))}
	for i := range c.Env {
		ev := &c.Env[i]
		switch {
		case ev.Value != "":
			e.vars[ev.Name] = e.expand(ev.Value)
		case ev.ValueFrom != nil:
			e.vars[ev.Name] = envValue{unknown: ev.Name + " is " + valueFromText(ev.ValueFrom)}
		default:
			e.vars[ev.Name] = envValue{}
		}
	}
	return e
}

// lookup is a variable the container gets: set is false when neither env
// sets it nor an envFrom source could.
func (e *kubeEnv) lookup(name string) (v envValue, set bool) {
	if v, ok := e.vars[name]; ok {
		return v, true
	}
	for i := range e.c.EnvFrom {
		if src := &e.c.EnvFrom[i]; name != "" && strings.HasPrefix(name, src.Prefix) {
			return envValue{unknown: name + " may come from " + envFromText(src) + ", whose keys are not in the pod spec"}, true
		}
	}
	return envValue{}, false
}

// expand is the kubelet's expansion of a literal value
// (k8s.io/kubernetes third_party/forked/golang/expansion): $(NAME) is
// replaced by NAME's value when NAME is defined, and left as written when
// it is not; $$ is a literal $; a $ before anything else, or a $( that is
// never closed, stays as it is. Service-link variables (FOO_SERVICE_HOST…),
// which the kubelet also maps, hold addresses and ports, never a path: a
// reference to one is left as written.
func (e *kubeEnv) expand(in string) envValue {
	if !strings.Contains(in, "$") {
		return envValue{value: in}
	}
	var b strings.Builder
	for i := 0; i < len(in); i++ {
		if in[i] != '$' || i+1 == len(in) {
			b.WriteByte(in[i])
			continue
		}
		switch next := in[i+1]; next {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(in[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			name := in[i+2 : i+2+end]
			switch v, set := e.lookup(name); {
			case !set:
				b.WriteString("$(" + name + ")")
			case v.unknown != "":
				return envValue{unknown: v.unknown}
			default:
				b.WriteString(v.value)
			}
			i += 2 + end
		default:
			b.WriteByte('$')
			b.WriteByte(next)
			i++
		}
	}
	return envValue{value: b.String()}
}

func valueFromText(src *corev1.EnvVarSource) string {
	switch {
	case src.ConfigMapKeyRef != nil:
		return "taken from configMap " + src.ConfigMapKeyRef.Name + " key " + src.ConfigMapKeyRef.Key
	case src.SecretKeyRef != nil:
		return "taken from secret " + src.SecretKeyRef.Name + " key " + src.SecretKeyRef.Key
	case src.FieldRef != nil:
		return "taken from the pod's field " + src.FieldRef.FieldPath
	case src.ResourceFieldRef != nil:
		return "taken from the container's " + src.ResourceFieldRef.Resource
	case src.FileKeyRef != nil:
		return "taken from file " + src.FileKeyRef.Path + " key " + src.FileKeyRef.Key
	}
	return "taken from a source the pod spec does not show"
}

func envFromText(src *corev1.EnvFromSource) string {
	switch {
	case src.ConfigMapRef != nil:
		return "configMap " + src.ConfigMapRef.Name
	case src.SecretRef != nil:
		return "secret " + src.SecretRef.Name
	}
	return "an envFrom source"
}
