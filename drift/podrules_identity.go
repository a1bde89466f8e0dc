package drift

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/sandprobe/sandprobe/policy"
)

// Who the sandbox runs as.
const (
	PodRunAsNonRoot       = "drift.pod.run-as-non-root"
	PodRunAsUser          = "drift.pod.run-as-user"
	PodRunAsGroup         = "drift.pod.run-as-group"
	PodFSGroup            = "drift.pod.fs-group"
	PodSupplementalGroups = "drift.pod.supplemental-groups"
)

var identityRules = []podRule{
	// A policy that declares root (allowRoot, uid 0) cannot also ask the
	// kubelet to refuse root.
	{row{Rule{PodRunAsNonRoot, "the kubelet refuses to start any container of the pod as root", high,
		"set securityContext.runAsNonRoot: true"},
		func(s *policy.Spec) bool { return s.Identity.UID != 0 }}, checkRunAsNonRoot},
	{row{Rule{PodRunAsUser, "every container runs as the declared uid", high,
		"set securityContext.runAsUser to the declared uid"}, nil}, checkRunAsUser},
	{row{Rule{PodRunAsGroup, "every container runs as the declared gid", high,
		"set securityContext.runAsGroup to the declared gid"}, nil}, checkRunAsGroup},
	{row{Rule{PodFSGroup, "volumes are owned by the declared fsGroup", medium,
		"set spec.securityContext.fsGroup to the declared group"},
		func(s *policy.Spec) bool { return s.Identity.FSGroup != nil }}, checkFSGroup},
	{row{Rule{PodSupplementalGroups, "the pod adds no supplementary groups beyond the declared ones", medium,
		"set spec.securityContext.supplementalGroups to (a subset of) the declared groups"}, nil}, checkSupplementalGroups},
}

func checkRunAsNonRoot(c *podCheck, v *podView) {
	for d := range decisions(v, &runAsNonRoot) {
		if d.value != nil && *d.value {
			continue
		}
		at := d.at()
		c.failAt(at, "true", boolText(d.value), "set "+at.path+": true", d.inheritedBy())
	}
}

func checkRunAsUser(c *podCheck, v *podView) {
	checkID(c, v, &runAsUser, c.e.p.Spec.Identity.UID, "unset (the image's USER decides, often root)")
}

func checkRunAsGroup(c *podCheck, v *podView) {
	checkID(c, v, &runAsGroup, c.e.p.Spec.Identity.GID, "unset (the image decides, often group 0)")
}

// checkID holds runAsUser or runAsGroup to the declared id wherever it is
// decided.
func checkID(c *podCheck, v *podView, f *inheritable[int64], want int64, unset string) {
	for d := range decisions(v, f) {
		if d.value != nil && *d.value == want {
			continue
		}
		at, id := d.at(), strconv.FormatInt(want, 10)
		c.failAt(at, id, int64Text(d.value, unset), "set "+at.path+": "+id, d.inheritedBy())
	}
}

func checkFSGroup(c *podCheck, v *podView) {
	want, have := *c.e.p.Spec.Identity.FSGroup, v.psc.FSGroup
	if have != nil && *have == want {
		return
	}
	at, id := v.at(fFSGroup, ".securityContext.fsGroup"), strconv.FormatInt(want, 10)
	c.failAt(at, id, int64Text(have, "unset"), "set "+at.path+": "+id, "")
}

func checkSupplementalGroups(c *podCheck, v *podView) {
	declared := c.e.p.Spec.Identity.SupplementalGroups
	for _, g := range v.psc.SupplementalGroups {
		if slices.Contains(declared, g) {
			continue
		}
		want := "no supplementary groups"
		if len(declared) > 0 {
			want = "only " + int64List(declared)
		}
		at := v.at(fSupplementalGroups, ".securityContext.supplementalGroups")
		c.failAt(at, want, int64List(v.psc.SupplementalGroups), fmt.Sprintf("remove group %d from %s", g, at.path), "")
	}
}
