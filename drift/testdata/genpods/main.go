// Command genpods writes N generated sandbox pods as one multi-document
// YAML file, the input of the offline drift benchmark (make bench) and of
// the streaming tests: drift -f and kube-score read the same file. The
// mix is what a real namespace of agent pods looks like when hardening is
// uneven — a quarter hardened (no finding), a quarter with a tag instead
// of a digest and no limits (a few findings), a quarter plain pods with
// the sandbox label (most rules fail), a quarter without the sandbox
// label — with every tenth pod owned by a ReplicaSet whose template is in
// the file, and the rendered egress NetworkPolicy and the ReplicaSet at
// the end, so a reader must see the whole file before judging egress.
//
//	genpods -n 10000 -o pods.yaml [-policy fixtures/policy.yaml]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
)

func main() {
	n := flag.Int("n", 10000, "pods")
	out := flag.String("o", "-", "output file")
	policyPath := flag.String("policy", "fixtures/policy.yaml", "the SandboxPolicy the pods are judged by")
	flag.Parse()
	p, _, err := policy.LoadFile(*policyPath)
	if err != nil {
		fail(err)
	}
	f := os.Stdout
	if *out != "-" {
		if f, err = os.Create(*out); err != nil {
			fail(err)
		}
	}
	w := bufio.NewWriterSize(f, 1<<20)
	ns := p.Spec.Namespaces[0]
	emit := func(obj any) {
		b, err := yaml.Marshal(obj)
		if err != nil {
			fail(err)
		}
		w.WriteString("---\n")
		w.Write(b)
	}
	rs := &appsv1.ReplicaSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "agent-rs", Namespace: ns},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr(int32(*n / 10)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent-rs"}},
		},
	}
	for i := 0; i < *n; i++ {
		pod := hardened(p, ns, "agent-"+strconv.Itoa(i))
		switch i % 4 {
		case 1:
			for j := range pod.Spec.Containers {
				c := &pod.Spec.Containers[j]
				c.Image = "registry.example/agents/agent:v" + strconv.Itoa(i%7)
				c.Resources = corev1.ResourceRequirements{}
			}
		case 2:
			pod.Spec = corev1.PodSpec{Containers: []corev1.Container{{
				Name: "agent", Image: "registry.example/agents/agent:latest",
				Env: []corev1.EnvVar{{Name: "GITHUB_TOKEN", Value: "ghp_" + strconv.Itoa(i)}},
			}}}
		case 3:
			delete(pod.Labels, "sandbox")
			pod.Spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem = ptr(false)
		}
		if i%10 == 5 {
			pod.Labels["app"] = "agent-rs"
			pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, Controller: ptr(true), UID: "rs-uid"}}
			if i == 5 {
				tmpl := pod.DeepCopy()
				rs.Spec.Template = corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: tmpl.Labels}, Spec: tmpl.Spec}
			}
		}
		emit(pod)
	}
	emit(rs)
	emit(render.NetworkPolicy(p, ns))
	if err := w.Flush(); err != nil {
		fail(err)
	}
	if err := f.Close(); err != nil {
		fail(err)
	}
}

func hardened(p *policy.Policy, ns, name string) *corev1.Pod {
	labels := map[string]string{"app.kubernetes.io/name": "agent", "sandbox-id": name}
	for k, v := range p.Spec.Selector.MatchLabels {
		labels[k] = v
	}
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false),
			EnableServiceLinks:           ptr(false),
			RestartPolicy:                corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr(true),
				RunAsUser:      ptr(p.Spec.Identity.UID),
				RunAsGroup:     ptr(p.Spec.Identity.GID),
				FSGroup:        p.Spec.Identity.FSGroup,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{container(p, "agent"), container(p, "browser")},
		},
	}
	if len(p.Spec.Runtime.ClassNames) > 0 {
		pod.Spec.RuntimeClassName = ptr(p.Spec.Runtime.ClassNames[0])
	}
	for _, w := range p.Spec.Filesystem.Writable {
		size := resource.MustParse(p.Spec.Resources.Limits["ephemeral-storage"])
		vol := "w" + sanitize(w)
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &size}}})
		for j := range pod.Spec.Containers {
			pod.Spec.Containers[j].VolumeMounts = append(pod.Spec.Containers[j].VolumeMounts, corev1.VolumeMount{Name: vol, MountPath: w})
		}
	}
	return pod
}

func container(p *policy.Policy, name string) corev1.Container {
	limits := corev1.ResourceList{}
	for k, v := range p.Spec.Resources.Limits {
		limits[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return corev1.Container{
		Name:      name,
		Image:     "registry.example/agents/" + name + "@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr(false),
			ReadOnlyRootFilesystem:   ptr(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
}

func sanitize(path string) string {
	b := []byte(path)
	for i, c := range b {
		if c == '/' {
			b[i] = '-'
		}
	}
	return string(b)
}

func ptr[T any](v T) *T { return &v }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "genpods:", err)
	os.Exit(1)
}
