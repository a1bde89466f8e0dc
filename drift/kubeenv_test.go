package drift

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestKubeEnvExpandsLikeTheKubelet: the cases of the kubelet's own
// expansion tests (third_party/forked/golang/expansion), against env
// entries before the one expanded, and what only the cluster knows.
func TestKubeEnvExpandsLikeTheKubelet(t *testing.T) {
	before := []corev1.EnvVar{
		{Name: "VAR_A", Value: "A"},
		{Name: "VAR_B", Value: "B"},
		{Name: "VAR_C", Value: "C"},
		{Name: "VAR_REF", Value: "$(VAR_A)"},
		{Name: "VAR_EMPTY", Value: ""},
		{Name: "FROM_CM", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "k"}}},
		{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
	}
	for _, c := range []struct {
		in, want, unknown string
		envFrom           []corev1.EnvFromSource
	}{
		{in: "$(VAR_A)", want: "A"},
		{in: "___$(VAR_B)___", want: "___B___"},
		{in: "$(VAR_A)-$(VAR_A)", want: "A-A"},
		{in: "$(VAR_A)$(VAR_B)$(VAR_C)", want: "ABC"},
		{in: "$(VAR_REF)", want: "A"}, // expanded when it was defined
		{in: "f000-$$VAR_A", want: "f000-$VAR_A"},
		{in: "$$(VAR_A)", want: "$(VAR_A)"},
		{in: "$$$(VAR_A)", want: "$A"},
		{in: "$$$$(VAR_A)", want: "$$(VAR_A)"},
		{in: "$(VAR_EMPTY)x", want: "x"},
		{in: "$(UNDEFINED)/x", want: "$(UNDEFINED)/x"},
		{in: "$VAR_A", want: "$VAR_A"},
		{in: "$(VAR_A", want: "$(VAR_A"},
		{in: "foo$", want: "foo$"},
		{in: "$()", want: "$()"},
		{in: "/home/$(POD)", unknown: "POD is taken from the pod's field metadata.name"},
		{in: "$(FROM_CM)/x", unknown: "FROM_CM is taken from configMap cm key k"},
		{in: "$(SOMETHING)", unknown: "SOMETHING may come from configMap layout", envFrom: []corev1.EnvFromSource{
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "layout"}}}}},
		{in: "$(SOMETHING)", want: "$(SOMETHING)", envFrom: []corev1.EnvFromSource{
			{Prefix: "APP_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "layout"}}}}},
	} {
		ctr := &corev1.Container{Env: append(append([]corev1.EnvVar(nil), before...), corev1.EnvVar{Name: "X", Value: c.in}), EnvFrom: c.envFrom}
		got := newKubeEnv(ctr).vars["X"]
		if got.value != c.want || (c.unknown == "") != (got.unknown == "") || !strings.HasPrefix(got.unknown, c.unknown) {
			t.Errorf("%q: got %+v, want %q (unknown %q)", c.in, got, c.want, c.unknown)
		}
	}
}

// TestDockerSameStore: a path on a bind of the workspace's host directory
// (or one below it) or on the same named volume is on the workspace; a
// neighbour directory, another volume or a tmpfs is not.
func TestDockerSameStore(t *testing.T) {
	ws := mount{typ: "bind", source: "/srv/attempt-42/ws", dest: "/workspace"}
	vol := mount{typ: "volume", source: "attempt-42", dest: "/workspace"}
	for _, c := range []struct {
		m    mount
		w    *mount
		p    string
		want bool
	}{
		{ws, &ws, "/workspace/.home", true},
		{mount{typ: "bind", source: "/srv/attempt-42/ws/home", dest: "/home/agent"}, &ws, "/home/agent", true},
		{mount{typ: "bind", source: "/srv/attempt-42", dest: "/attempt"}, &ws, "/attempt/ws/.config", true},
		{mount{typ: "bind", source: "/srv/attempt-42", dest: "/attempt"}, &ws, "/attempt/home", false},
		{mount{typ: "bind", source: "/srv/attempt-42/ws2", dest: "/home/agent"}, &ws, "/home/agent", false},
		{mount{typ: "volume", source: "attempt-42", dest: "/srv/dotfiles"}, &vol, "/srv/dotfiles/config", true},
		{mount{typ: "volume", source: "home", dest: "/home/agent"}, &vol, "/home/agent", false},
		{mount{typ: "tmpfs", dest: "/tmp"}, &mount{typ: "tmpfs", dest: "/workspace"}, "/tmp/home", false},
	} {
		if got := sameDockerStore(&c.m, c.p, c.w); got != c.want {
			t.Errorf("%s on %+v, workspace %+v: %v, want %v", c.p, c.m, *c.w, got, c.want)
		}
	}
}
