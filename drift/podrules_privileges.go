package drift

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandprobe/sandprobe/policy"
)

// What the sandbox's processes may do to the kernel and themselves.
const (
	PodSeccomp      = "drift.pod.seccomp"
	PodPrivilegeEsc = "drift.pod.privilege-escalation"
	PodReadOnlyRoot = "drift.pod.readonly-root"
	PodCapDrop      = "drift.pod.cap-drop"
	PodCapAdd       = "drift.pod.cap-add"
	PodPrivileged   = "drift.pod.privileged"
)

var privilegeRules = []podRule{
	{row{Rule{PodSeccomp, "every container runs under the declared seccomp profile (RuntimeDefault or Localhost)", medium,
		"set securityContext.seccompProfile.type: RuntimeDefault"},
		func(s *policy.Spec) bool { return s.Seccomp != policy.SeccompUnconfined }}, checkSeccomp},
	{row{Rule{PodPrivilegeEsc, "no container can gain privileges through setuid binaries (no_new_privs)", high,
		"set securityContext.allowPrivilegeEscalation: false on every container"},
		func(s *policy.Spec) bool { return s.NoNewPrivs() }}, checkPrivilegeEscalation},
	{row{Rule{PodReadOnlyRoot, "every container's root filesystem is read-only", medium,
		"set securityContext.readOnlyRootFilesystem: true on every container"},
		func(s *policy.Spec) bool { return s.Filesystem.ReadOnlyRoot }}, checkReadOnlyRoot},
	{row{Rule{PodCapDrop, "every container drops ALL capabilities", high,
		"set securityContext.capabilities.drop: [ALL] on every container"}, nil}, checkCapDrop},
	{row{Rule{PodCapAdd, "no container adds a capability the policy does not declare", high,
		"remove the capability from securityContext.capabilities.add"}, nil}, checkCapAdd},
	{row{Rule{PodPrivileged, "no container is privileged", critical,
		"remove securityContext.privileged (or set it to false)"}, nil}, checkPrivileged},
}

func checkSeccomp(c *podCheck, v *podView) {
	for d := range decisions(v, &seccompProfile) {
		if c.seccompOK(d.value) {
			continue
		}
		at := d.at()
		c.failAt(at, c.seccompWant(), seccompText(d.value), c.seccompFix(at.path), d.inheritedBy())
	}
}

func checkPrivilegeEscalation(c *podCheck, v *podView) {
	for k := range v.containers() {
		if ape := k.sc.AllowPrivilegeEscalation; ape == nil || *ape {
			at := k.at(fAllowPrivilegeEscalation, ".securityContext.allowPrivilegeEscalation")
			c.failAt(at, "false", boolText(ape)+" (no_new_privs is not set)", "set "+at.path+": false", "")
		}
	}
}

func checkReadOnlyRoot(c *podCheck, v *podView) {
	for k := range v.containers() {
		if ro := k.sc.ReadOnlyRootFilesystem; ro == nil || !*ro {
			at := k.at(fReadOnlyRoot, ".securityContext.readOnlyRootFilesystem")
			c.failAt(at, "true", boolText(ro), "set "+at.path+": true", "")
		}
	}
}

func checkCapDrop(c *podCheck, v *podView) {
	for k := range v.containers() {
		var drop []corev1.Capability
		if k.sc.Capabilities != nil {
			drop = k.sc.Capabilities.Drop
		}
		if slices.ContainsFunc(drop, func(c corev1.Capability) bool { return strings.EqualFold(string(c), "ALL") }) {
			continue
		}
		at := k.at(fCapDrop, ".securityContext.capabilities.drop")
		c.failAt(at, "[ALL]", capsText(drop), "set "+at.path+": [ALL]",
			"without drop ALL the runtime's default set stays (CHOWN, DAC_OVERRIDE, NET_RAW, SETUID, …)")
	}
}

func checkCapAdd(c *podCheck, v *podView) {
	for k := range v.containers() {
		if k.sc.Capabilities == nil {
			continue
		}
		for _, a := range k.sc.Capabilities.Add {
			if !c.e.caps[policy.NormalizeCapability(string(a))] {
				at := k.at(fCapAdd, ".securityContext.capabilities.add")
				c.failAt(at, capsWant(c.e.p.Spec.Capabilities), string(a), "remove "+string(a)+" from "+at.path, "")
			}
		}
	}
}

func checkPrivileged(c *podCheck, v *podView) {
	for k := range v.containers() {
		if p := k.sc.Privileged; p != nil && *p {
			at := k.at(fPrivileged, ".securityContext.privileged")
			c.failAt(at, "false", "true", "remove "+at.path, "a privileged container has every capability and every device of the node")
		}
	}
}

func (c *podCheck) seccompOK(p *corev1.SeccompProfile) bool {
	if p == nil {
		return false
	}
	switch c.e.p.Spec.Seccomp {
	case policy.SeccompLocalhost:
		return p.Type == corev1.SeccompProfileTypeLocalhost && p.LocalhostProfile != nil && *p.LocalhostProfile == c.e.p.Spec.SeccompProfile
	default:
		return p.Type == corev1.SeccompProfileTypeRuntimeDefault || p.Type == corev1.SeccompProfileTypeLocalhost
	}
}

func (c *podCheck) seccompWant() string {
	if c.e.p.Spec.Seccomp == policy.SeccompLocalhost {
		return "Localhost " + c.e.p.Spec.SeccompProfile
	}
	return "RuntimeDefault (or Localhost)"
}

func (c *podCheck) seccompFix(f string) string {
	if c.e.p.Spec.Seccomp == policy.SeccompLocalhost {
		return "set " + f + ": {type: Localhost, localhostProfile: " + c.e.p.Spec.SeccompProfile + "}"
	}
	return "set " + f + ".type: RuntimeDefault"
}

func seccompText(p *corev1.SeccompProfile) string {
	switch {
	case p == nil:
		return "unset (Unconfined unless the kubelet defaults it)"
	case p.Type == corev1.SeccompProfileTypeLocalhost && p.LocalhostProfile != nil:
		return "Localhost " + *p.LocalhostProfile
	}
	return string(p.Type)
}

func capsWant(declared []string) string {
	if len(declared) == 0 {
		return "no added capability"
	}
	return "only " + strings.Join(declared, ", ")
}

func capsText(cs []corev1.Capability) string {
	if len(cs) == 0 {
		return "nothing dropped"
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = string(c)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
