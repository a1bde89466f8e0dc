package kube

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
)

// placement is where one probe pod of a run stands.
type placement struct {
	ns   string
	node string // "" when the scheduler picks
	// runtimeClass is the class it runs under ("" for none).
	runtimeClass string
	// stray, when set, makes this the probe that stands in for pods of the
	// namespace without the sandbox labels: their labels, class and node.
	stray *stray
	// control makes this the run's control vantage (controlPod).
	control bool
}

// target names where the pod reports from once it runs on node.
func (pl placement) target(node string) string { return pl.location(node).String() }

// location is where the pod reports from once it runs on node.
func (pl placement) location(node string) report.Location {
	l := report.Location{Namespace: pl.ns, Node: node, Control: pl.control}
	if pl.stray != nil {
		l.Stray, l.Control = pl.stray.pod.name, false
	}
	return l
}

// probePod is render's sandbox look-alike, in its placement's namespace,
// with what this run adds: the run and nonce labels, the policy itself in
// an annotation (no ConfigMap: the runner needs no right to create one in
// a sandbox namespace), the runtime class and nonce handed to the probe,
// the run's deadline, who created it, no service-account token whatever
// the policy allows (the runner-scope admission policy requires that), and,
// per node, an affinity that pins it to its node through the scheduler. A
// stray's probe carries that pod's labels instead of the sandbox's, and
// checks egress only.
func (b *Backend) probePod(r *run, pl placement) *corev1.Pod {
	if pl.control {
		return b.controlPod(r, pl)
	}
	p := r.spec.Policy
	var args []string
	if pl.runtimeClass != "" && pl.stray == nil {
		args = append(args, "--runtime-class", pl.runtimeClass)
	}
	if r.spec.NoNetwork {
		args = append(args, "--no-network")
	}
	if pl.stray != nil {
		// Where a pod without the sandbox labels stands, the question is
		// what it can reach; its identity and filesystem are drift's.
		args = append(args, "--only", "egress")
	}
	if r.spec.Only != "" {
		args = append(args, "--only", r.spec.Only) // after a stray's: the last one counts
	}
	if len(b.ImageCommand) > 0 && pl.stray == nil {
		argv, _ := json.Marshal(b.ImageCommand) // a []string always marshals
		args = append(args, "--image-command", string(argv), "--image-command-timeout", b.ImageCommandTimeout.String())
	}
	name := podName(p.Metadata.Name, r.id, pl.node)
	if pl.stray != nil {
		name = podName(p.Metadata.Name, r.id, "stray/"+pl.stray.pod.name)
	}
	opts := render.ProbePodOptions{
		Name:         name,
		Namespace:    pl.ns,
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
	if pl.stray != nil {
		pl.stray.relabel(pod, p.Spec.Selector.MatchLabels)
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
	pinTo(pod, pl)
	pod.Spec.RuntimeClassName = nil
	if pl.runtimeClass != "" {
		class := pl.runtimeClass
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
	if probe {
		for _, kv := range b.Env {
			k, v, _ := strings.Cut(kv, "=")
			c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: v})
		}
	}
}

// runtimeClass is the class the namespace's probe runs under: the chosen
// one, else the declared class most live sandboxes there use (the
// policy's first when none runs or the survey failed).
func (b *Backend) runtimeClass(r *run, ns string) string {
	if b.RuntimeClass != "" {
		return b.RuntimeClass
	}
	classes := r.spec.Policy.Spec.Runtime.ClassNames
	if r.survey != nil && r.survey.err == nil {
		return r.survey.runtimeClassFor(ns, classes)
	}
	if len(classes) > 0 {
		return classes[0]
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
	return strings.ReplaceAll("sandprobe-"+pol+"-"+runID+nodeSuffix(node), "--", "-")
}

// nodeSuffix tells apart the pods of one run on different nodes: a hash of
// the node's name (a name may be longer than a pod name allows).
func nodeSuffix(node string) string {
	if node == "" {
		return ""
	}
	h := fnv.New32a()
	h.Write([]byte(node))
	return fmt.Sprintf("-%08x", h.Sum32())
}

// pinTo puts a pod placed on a node there, through the scheduler, not
// spec.nodeName: the pod then meets the same admission, taints and
// resource fit as a sandbox would, and a node that cannot take it shows up
// as unschedulable.
func pinTo(pod *corev1.Pod, pl placement) {
	if pl.node == "" {
		return
	}
	pod.Annotations[AnnotationTarget] = pl.target(pl.node)
	pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{pl.node}}},
		}}},
	}}
}

func nonLabel(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, s)
}
