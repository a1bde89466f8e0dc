package drift

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandprobe/sandprobe/policy"
)

// What the sandbox is given: its image, its limits, its scratch space and
// its environment.
const (
	PodImageDigest  = "drift.pod.image-digest"
	PodResources    = "drift.pod.resources"
	PodEmptyDirSize = "drift.pod.emptydir-size"
	PodSecretEnv    = "drift.pod.secret-env"
)

var supplyRules = []podRule{
	{row{Rule{PodImageDigest, "every image is pinned by digest", medium, "reference the image as REPO@sha256:DIGEST"},
		func(s *policy.Spec) bool { return s.Image.RequireDigest }}, checkImageDigest},
	{row{Rule{PodResources, "every container carries the declared limits (and no more)", low, "set resources.limits as declared"},
		func(s *policy.Spec) bool { return len(s.Resources.Limits) > 0 }}, checkResources},
	{row{Rule{PodEmptyDirSize, "every emptyDir has a sizeLimit within the declared size", low, "set sizeLimit on the emptyDir"}, nil}, checkEmptyDirSize},
	{row{Rule{PodSecretEnv, "no credential reaches a container through its environment (names only are reported)", high,
		"remove the variable, or hand over a declared placeholder the broker swaps"}, nil}, checkSecretEnv},
}

func checkImageDigest(c *podCheck, v *podView) {
	for k := range v.containers() {
		if img := k.c.Image; !strings.Contains(img, "@sha256:") {
			at := k.at(fImage, ".image")
			c.failAt(at, "an image pinned by digest (@sha256:…)", img, "set "+at.path+" to "+imageRepo(img)+"@sha256:<digest>",
				"a tag can be moved to another image at any time")
		}
	}
}

func checkResources(c *podCheck, v *podView) {
	for k := range v.containers() {
		// Ephemeral containers cannot carry resources (the API refuses them).
		if k.kind == kindEphemeral {
			continue
		}
		for _, l := range c.e.limits {
			have, ok := k.c.Resources.Limits[l.name]
			if ok && have.Cmp(l.q) <= 0 {
				continue
			}
			at := k.at(fResources, ".resources.limits."+string(l.name))
			if !ok {
				c.failAt(at, l.text, "no limit", "set "+at.path+": "+l.text, "")
			} else {
				c.failAt(at, "at most "+l.text, have.String(), "set "+at.path+": "+l.text, "")
			}
		}
	}
}

// checkEmptyDirSize: every emptyDir is bounded, within the declared size
// when the policy declares one. (A volume that also names a hostPath is
// judged as a hostPath only.)
func checkEmptyDirSize(c *podCheck, v *podView) {
	limit := c.e.sizeLimit
	for i := range v.ps.Volumes {
		vol := &v.ps.Volumes[i]
		if vol.HostPath != nil || vol.EmptyDir == nil {
			continue
		}
		sl := vol.EmptyDir.SizeLimit
		if sl != nil && (limit == nil || sl.Cmp(*limit) <= 0) {
			continue
		}
		at := v.atVolume(i, ".emptyDir.sizeLimit")
		want := "a sizeLimit"
		if limit != nil {
			want = "at most " + limit.String()
		}
		if sl != nil {
			c.failAt(at, want, sl.String(), "set "+at.path+": "+limit.String(), "")
			continue
		}
		fix := "set " + at.path
		if limit != nil {
			fix += ": " + limit.String()
		}
		ev := "an unbounded emptyDir can fill the node's disk"
		if vol.EmptyDir.Medium == corev1.StorageMediumMemory {
			ev = "an unbounded memory-backed emptyDir can take the node's RAM"
		}
		c.failAt(at, want, "unset", fix, ev)
	}
}

// checkSecretEnv names every variable that carries a credential: a literal
// value under a secret-looking name, or anything taken from a Secret. The
// value is never reported.
func checkSecretEnv(c *podCheck, v *podView) {
	for k := range v.containers() {
		for i := range k.c.Env {
			if actual := c.secretEnvActual(&k.c.Env[i]); actual != "" {
				name := k.c.Env[i].Name
				at := k.at(fEnv, ".env["+name+"]")
				c.failAt(at, "no credential in the environment", actual,
					"remove "+name+" from "+k.spec+"."+k.name()+".env (mount a declared credential read-only, or pass a placeholder the broker swaps)",
					c.secretEvidence(name))
			}
		}
		for i := range k.c.EnvFrom {
			if ref := k.c.EnvFrom[i].SecretRef; ref != nil {
				at := k.at(fEnv, fmt.Sprintf(".envFrom[%d].secretRef", i))
				c.failAt(at, "no credential in the environment", "every key of secret "+ref.Name+" becomes a variable", "remove "+at.path, "")
			}
		}
	}
}

// secretEnvActual says how a variable carries a credential, or "".
func (c *podCheck) secretEnvActual(ev *corev1.EnvVar) string {
	switch {
	case ev.ValueFrom != nil && ev.ValueFrom.SecretKeyRef != nil:
		return "taken from secret " + ev.ValueFrom.SecretKeyRef.Name + " key " + ev.ValueFrom.SecretKeyRef.Key
	case ev.ValueFrom != nil && ev.ValueFrom.ConfigMapKeyRef != nil && c.e.secretName(ev.Name) != "":
		return "taken from configMap " + ev.ValueFrom.ConfigMapKeyRef.Name + " key " + ev.ValueFrom.ConfigMapKeyRef.Key
	case ev.Value != "" && !slices.Contains(c.e.p.Spec.Secrets.Placeholders, ev.Value) && c.e.secretName(ev.Name) != "":
		return "a literal value that is not a declared placeholder (value not reported)"
	}
	return ""
}

func (c *podCheck) secretEvidence(name string) string {
	if p := c.e.secretName(name); p != "" {
		return "name matches " + p
	}
	return ""
}

// imageRepo strips the tag or digest from an image reference.
func imageRepo(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		return image[:i]
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i]
	}
	return image
}
