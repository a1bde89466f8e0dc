package kube

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandprobe/sandprobe/render"
)

// probePod is render's sandbox look-alike, in namespace ns, with what this
// run adds: the run and nonce labels, the policy itself in an annotation
// (no ConfigMap: the runner needs no right to create one in a sandbox
// namespace), the runtime class and nonce handed to the probe, the run's
// deadline, who created it, no service-account token whatever the policy
// allows (the runner-scope admission policy requires that), and, per node,
// an affinity that pins it to its node through the scheduler.
func (b *Backend) probePod(r *run, ns, node string) *corev1.Pod {
	p := r.spec.Policy
	var args []string
	if class := b.runtimeClass(r); class != "" {
		args = append(args, "--runtime-class", class)
	}
	if r.spec.NoNetwork {
		args = append(args, "--no-network")
	}
	opts := render.ProbePodOptions{
		Name:         podName(p.Metadata.Name, r.id, node),
		Namespace:    ns,
		ProbeImage:   b.ProbeImage,
		PolicyInline: r.spec.PolicyBytes,
		Nonce:        r.spec.Nonce,
		Labels:       map[string]string{LabelRun: r.id, LabelNonce: r.spec.Nonce},
		ProbeArgs:    args,
	}
	pod := render.ProbePod(p, opts)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationNonce] = r.spec.Nonce
	pod.Annotations[AnnotationDeadline] = r.deadline.String()
	if r.createdBy != "" {
		pod.Annotations[AnnotationCreatedBy] = r.createdBy
	}
	// A token would hand whatever runs in a sandbox look-alike an identity
	// in the cluster; a policy that allows one only allows it to be there.
	f := false
	pod.Spec.AutomountServiceAccountToken = &f
	if node != "" {
		pod.Annotations[AnnotationTarget] = Target(ns, node)
		// Through the scheduler, not spec.nodeName: the pod then meets the
		// same admission, taints and resource fit as a sandbox would, and a
		// node that cannot take it shows up as unschedulable.
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}},
		}}
	}
	if class := b.runtimeClass(r); class != "" {
		pod.Spec.RuntimeClassName = &class
	}
	// The kubelet kills the probe at the run's deadline even if this runner
	// is gone; render's value is the policy's, the run may ask for another.
	secs := int64((r.deadline + time.Second - 1) / time.Second)
	pod.Spec.ActiveDeadlineSeconds = &secs
	for i := range pod.Spec.InitContainers {
		b.adaptContainer(&pod.Spec.InitContainers[i], false)
	}
	for i := range pod.Spec.Containers {
		b.adaptContainer(&pod.Spec.Containers[i], pod.Spec.Containers[i].Name == render.ProbeContainer)
	}
	return pod
}

func (b *Backend) adaptContainer(c *corev1.Container, probe bool) {
	if b.PullPolicy != "" {
		c.ImagePullPolicy = b.PullPolicy
	}
	if probe && len(b.Command) > 0 {
		c.Command, c.Args = append([]string(nil), b.Command...), nil
	}
}

// runtimeClass is the class the pod runs under: the chosen one, else the
// policy's first (render's choice).
func (b *Backend) runtimeClass(r *run) string {
	if b.RuntimeClass != "" {
		return b.RuntimeClass
	}
	if cs := r.spec.Policy.Spec.Runtime.ClassNames; len(cs) > 0 {
		return cs[0]
	}
	return ""
}

// podName is sandprobe-POLICY-RUN[-NODEHASH], a valid DNS label (it becomes
// the pod's hostname) whatever the policy and node are called.
func podName(policyName, runID, node string) string {
	pol := strings.Trim(nonLabel(strings.ToLower(policyName)), "-")
	if len(pol) > 24 {
		pol = strings.TrimRight(pol[:24], "-")
	}
	name := "sandprobe-" + pol + "-" + runID
	if node != "" {
		h := fnv.New32a()
		h.Write([]byte(node))
		name += fmt.Sprintf("-%08x", h.Sum32())
	}
	return strings.ReplaceAll(name, "--", "-")
}

func nonLabel(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, s)
}
