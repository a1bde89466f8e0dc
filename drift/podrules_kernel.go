package drift

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// What the kernel hides from the sandbox and the security modules that
// confine it.
const (
	PodProcMount = "drift.pod.proc-mount"
	PodSysctls   = "drift.pod.sysctls"
	PodSELinux   = "drift.pod.selinux"
	PodAppArmor  = "drift.pod.apparmor"
)

var kernelRules = []podRule{
	{row{Rule{PodProcMount, "every container gets the masked /proc", high,
		"remove securityContext.procMount (or set it to Default)"}, nil}, checkProcMount},
	{row{Rule{PodSysctls, "the pod sets only namespaced, safe sysctls", high,
		"remove the sysctl from spec.securityContext.sysctls"}, nil}, checkSysctls},
	{row{Rule{PodSELinux, "no container loosens its SELinux type or sets a user or role", medium,
		"remove securityContext.seLinuxOptions.type/user/role"}, nil}, checkSELinux},
	{row{Rule{PodAppArmor, "no container runs AppArmor-unconfined", medium,
		"set securityContext.appArmorProfile.type: RuntimeDefault (and drop unconfined annotations)"}, nil}, checkAppArmor},
}

// safeSysctls are the sysctls the Pod Security Standard allows: namespaced
// and isolated from other pods on the node.
var safeSysctls = map[string]bool{
	"kernel.shm_rmid_forced":              true,
	"net.ipv4.ip_local_port_range":        true,
	"net.ipv4.tcp_syncookies":             true,
	"net.ipv4.ping_group_range":           true,
	"net.ipv4.ip_unprivileged_port_start": true,
	"net.ipv4.ip_local_reserved_ports":    true,
	"net.ipv4.tcp_keepalive_time":         true,
	"net.ipv4.tcp_fin_timeout":            true,
	"net.ipv4.tcp_keepalive_intvl":        true,
	"net.ipv4.tcp_keepalive_probes":       true,
	"net.ipv4.tcp_rmem":                   true,
	"net.ipv4.tcp_wmem":                   true,
	"net.ipv4.tcp_slow_start_after_idle":  true,
	"net.ipv4.tcp_notsent_lowat":          true,
}

// selinuxTypes are the SELinux types a container may ask for without
// loosening its confinement.
var selinuxTypes = map[string]bool{"": true, "container_t": true, "container_init_t": true, "container_kvm_t": true, "container_engine_t": true}

const appArmorAnnotationPrefix = "container.apparmor.security.beta.kubernetes.io/"

func checkProcMount(c *podCheck, v *podView) {
	for k := range v.containers() {
		if pm := k.sc.ProcMount; pm != nil && *pm != corev1.DefaultProcMount {
			at := k.at(fProcMount, ".securityContext.procMount")
			c.failAt(at, "Default", string(*pm), "remove "+at.path, "")
		}
	}
}

func checkSysctls(c *podCheck, v *podView) {
	for _, sc := range v.psc.Sysctls {
		if !safeSysctls[sc.Name] {
			c.failAt(v.at(fSysctls, ".securityContext.sysctls["+sc.Name+"]"), "only namespaced, safe sysctls", sc.Name+"="+sc.Value,
				"remove "+sc.Name+" from "+v.spec+".securityContext.sysctls", "")
		}
	}
}

// checkSELinux judges each container's seLinuxOptions and the pod's on
// their own: a loosened type anywhere is drift, whichever one applies.
func checkSELinux(c *podCheck, v *podView) {
	for k := range v.containers() {
		if o := k.sc.SELinuxOptions; selinuxLoosened(o) {
			c.failSELinux(k.at(fSELinux, ".securityContext.seLinuxOptions"), o)
		}
	}
	if o := v.psc.SELinuxOptions; selinuxLoosened(o) {
		c.failSELinux(v.at(fSELinux, ".securityContext.seLinuxOptions"), o)
	}
}

func selinuxLoosened(o *corev1.SELinuxOptions) bool {
	return o != nil && (!selinuxTypes[o.Type] || o.User != "" || o.Role != "")
}

func (c *podCheck) failSELinux(at place, o *corev1.SELinuxOptions) {
	c.failAt(at, "type container_t (or unset), no user or role", selinuxText(o), "remove type/user/role from "+at.path, "")
}

// checkAppArmor judges each container's profile, the pod's, and the
// annotations that set one per container (before Kubernetes 1.30).
func checkAppArmor(c *podCheck, v *podView) {
	for k := range v.containers() {
		if p := k.sc.AppArmorProfile; p != nil && p.Type == corev1.AppArmorProfileTypeUnconfined {
			c.failAppArmor(k.at(fAppArmor, ".securityContext.appArmorProfile"))
		}
	}
	if p := v.psc.AppArmorProfile; p != nil && p.Type == corev1.AppArmorProfileTypeUnconfined {
		c.failAppArmor(v.at(fAppArmor, ".securityContext.appArmorProfile"))
	}
	if !hasUnconfinedAnnotation(v.om.Annotations) {
		return
	}
	for _, k := range sortedKeys(v.om.Annotations) {
		if val := v.om.Annotations[k]; unconfinedAnnotation(k, val) {
			c.failAt(v.atMeta(fAnnotations, ".annotations["+k+"]"), "runtime/default or localhost/…", val, "remove annotation "+k, "")
		}
	}
}

// hasUnconfinedAnnotation says, without allocating, whether any annotation
// runs a container AppArmor-unconfined (the findings then list them in key
// order).
func hasUnconfinedAnnotation(annotations map[string]string) bool {
	for k, v := range annotations {
		if unconfinedAnnotation(k, v) {
			return true
		}
	}
	return false
}

func unconfinedAnnotation(k, v string) bool {
	return strings.HasPrefix(k, appArmorAnnotationPrefix) && v == "unconfined"
}

func (c *podCheck) failAppArmor(at place) {
	c.failAt(at, "RuntimeDefault or Localhost", "Unconfined", "set "+at.path+".type: RuntimeDefault", "")
}

func selinuxText(o *corev1.SELinuxOptions) string {
	var parts []string
	if o.Type != "" {
		parts = append(parts, "type "+o.Type)
	}
	if o.User != "" {
		parts = append(parts, "user "+o.User)
	}
	if o.Role != "" {
		parts = append(parts, "role "+o.Role)
	}
	return strings.Join(parts, ", ")
}
