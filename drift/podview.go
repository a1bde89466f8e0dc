package drift

import (
	"iter"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podView is a pod as the pod rules read it — a Pod, a workload's pod
// template or a Sandbox's — with the YAML path of every field a rule can
// name, and, for the securityContext fields a pod sets for every container
// that leaves them unset, which of the two decides for each container
// (decisions).
type podView struct {
	om  *metav1.ObjectMeta // the pod's (or the template's) labels and annotations
	ps  *corev1.PodSpec
	psc *corev1.PodSecurityContext // never nil
	// spec and meta are the field paths of the PodSpec and of the pod
	// metadata: "spec" and "metadata" for a Pod, "spec.template.spec" and
	// "spec.template.metadata" for a Deployment.
	spec, meta string
}

var noPodSecurityContext = &corev1.PodSecurityContext{}

func newPodView(om *metav1.ObjectMeta, ps *corev1.PodSpec, spec, meta string) podView {
	psc := ps.SecurityContext
	if psc == nil {
		psc = noPodSecurityContext
	}
	return podView{om: om, ps: ps, psc: psc, spec: spec, meta: meta}
}

// Container kinds, in the order the rules visit them.
const (
	kindContainer = iota
	kindInit
	kindEphemeral
)

var kindField = [...]string{"containers", "initContainers", "ephemeralContainers"}

// containerView is one container of a pod (an init or ephemeral one too).
type containerView struct {
	index int // across containers, init containers and ephemeral containers
	kind  int
	c     *corev1.Container
	sc    *corev1.SecurityContext // never nil
	spec  string                  // the PodSpec's path
}

var noSecurityContext = &corev1.SecurityContext{}

// containers yields every container: containers, init containers, then
// ephemeral containers.
func (v *podView) containers() iter.Seq[containerView] {
	return func(yield func(containerView) bool) {
		n := v.containerCount()
		for i := 0; i < n; i++ {
			if !yield(v.container(i)) {
				return
			}
		}
	}
}

func (v *podView) containerCount() int {
	ps := v.ps
	return len(ps.Containers) + len(ps.InitContainers) + len(ps.EphemeralContainers)
}

// container returns the i-th container across containers, init containers
// and ephemeral containers, without allocating.
func (v *podView) container(i int) containerView {
	ps := v.ps
	k := containerView{index: i, spec: v.spec}
	switch j := i - len(ps.Containers) - len(ps.InitContainers); {
	case i < len(ps.Containers):
		k.kind, k.c = kindContainer, &ps.Containers[i]
	case j < 0:
		k.kind, k.c = kindInit, &ps.InitContainers[i-len(ps.Containers)]
	default:
		// EphemeralContainerCommon has exactly Container's fields.
		k.kind, k.c = kindEphemeral, (*corev1.Container)(&ps.EphemeralContainers[j].EphemeralContainerCommon)
	}
	k.sc = k.c.SecurityContext
	if k.sc == nil {
		k.sc = noSecurityContext
	}
	return k
}

// name is the container's name as a pod-relative list entry:
// "containers[app]".
func (k *containerView) name() string { return kindField[k.kind] + "[" + k.c.Name + "]" }

// at is where a container field sits: its site and its path, the
// container's path followed by suffix (".securityContext.privileged").
func (k *containerView) at(f field, suffix string) place {
	return place{site: siteOf(zoneContainer, k.index, f), path: k.spec + "." + k.name() + suffix}
}

// at is where a pod field sits: suffix follows the PodSpec's path.
func (v *podView) at(f field, suffix string) place {
	return place{site: siteOf(zoneOfPodField(f), 0, f), path: v.spec + suffix}
}

// atMeta is where a pod metadata field sits: suffix follows the metadata's
// path.
func (v *podView) atMeta(f field, suffix string) place {
	return place{site: siteOf(zoneOfPodField(f), 0, f), path: v.meta + suffix}
}

// atVolume is where the i-th volume's source sits (".hostPath").
func (v *podView) atVolume(i int, suffix string) place {
	return place{site: siteOf(zoneVolume, i, fVolume), path: v.spec + ".volumes[" + v.ps.Volumes[i].Name + "]" + suffix}
}

// inheritable is a securityContext field that a pod sets for every
// container leaving its own unset: runAsNonRoot, runAsUser, runAsGroup,
// seccompProfile.
type inheritable[T any] struct {
	field field
	name  string // the YAML field: "runAsUser"
	own   func(*corev1.SecurityContext) *T
	pod   func(*corev1.PodSecurityContext) *T
}

var (
	runAsNonRoot = inheritable[bool]{fRunAsNonRoot, "runAsNonRoot",
		func(sc *corev1.SecurityContext) *bool { return sc.RunAsNonRoot },
		func(sc *corev1.PodSecurityContext) *bool { return sc.RunAsNonRoot }}
	runAsUser = inheritable[int64]{fRunAsUser, "runAsUser",
		func(sc *corev1.SecurityContext) *int64 { return sc.RunAsUser },
		func(sc *corev1.PodSecurityContext) *int64 { return sc.RunAsUser }}
	runAsGroup = inheritable[int64]{fRunAsGroup, "runAsGroup",
		func(sc *corev1.SecurityContext) *int64 { return sc.RunAsGroup },
		func(sc *corev1.PodSecurityContext) *int64 { return sc.RunAsGroup }}
	seccompProfile = inheritable[corev1.SeccompProfile]{fSeccomp, "seccompProfile",
		func(sc *corev1.SecurityContext) *corev1.SeccompProfile { return sc.SeccompProfile },
		func(sc *corev1.PodSecurityContext) *corev1.SeccompProfile { return sc.SeccompProfile }}
)

// decision is the value of an inheritable field where it is decided: in a
// container that sets its own, or in the pod's securityContext for the
// containers that leave theirs unset.
type decision[T any] struct {
	value *T // nil: unset at the pod too
	// byPod says the pod's field decides; then only the containers that
	// inherit it are judged by it (inheritedBy names them).
	byPod bool
	k     containerView // the container that decides, unless byPod
	v     *podView
	f     *inheritable[T]
}

// at is where the deciding field sits: the container's, or the pod's.
func (d *decision[T]) at() place {
	if d.byPod {
		return d.v.at(d.f.field, ".securityContext."+d.f.name)
	}
	return d.k.at(d.f.field, ".securityContext."+d.f.name)
}

// inheritedBy is evidence for a pod-level decision: "inherited by
// containers[a], initContainers[b]"; "" for a container's own.
func (d *decision[T]) inheritedBy() string {
	if !d.byPod {
		return ""
	}
	var names []string
	for k := range d.v.containers() {
		if d.f.own(k.sc) == nil {
			names = append(names, k.name())
		}
	}
	return "inherited by " + strings.Join(names, ", ")
}

// decisions yields where an inheritable field is decided: each container
// that sets it, then the pod's securityContext when at least one container
// leaves it unset. A pod-level value no container takes decides nothing and
// is not yielded.
func decisions[T any](v *podView, f *inheritable[T]) iter.Seq[decision[T]] {
	return func(yield func(decision[T]) bool) {
		inherited := false
		for k := range v.containers() {
			own := f.own(k.sc)
			if own == nil {
				inherited = true
				continue
			}
			if !yield(decision[T]{value: own, k: k, v: v, f: f}) {
				return
			}
		}
		if inherited {
			yield(decision[T]{value: f.pod(v.psc), byPod: true, v: v, f: f})
		}
	}
}
