package drift

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandprobe/sandprobe/policy"
)

// Container kinds, in the order the rules visit them.
const (
	kindContainer = iota
	kindInit
	kindEphemeral
)

var kindField = [...]string{"containers", "initContainers", "ephemeralContainers"}

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

// containerAt returns the i-th container across containers, init
// containers and ephemeral containers, without allocating.
func containerAt(ps *corev1.PodSpec, i int) (int, *corev1.Container) {
	if i < len(ps.Containers) {
		return kindContainer, &ps.Containers[i]
	}
	i -= len(ps.Containers)
	if i < len(ps.InitContainers) {
		return kindInit, &ps.InitContainers[i]
	}
	i -= len(ps.InitContainers)
	// EphemeralContainerCommon has exactly Container's fields.
	return kindEphemeral, (*corev1.Container)(&ps.EphemeralContainers[i].EphemeralContainerCommon)
}

func containerCount(ps *corev1.PodSpec) int {
	return len(ps.Containers) + len(ps.InitContainers) + len(ps.EphemeralContainers)
}

// cfield is the field path of a container: "spec.containers[app]".
func (c *podCheck) cfield(kind int, name string) string {
	return c.spec + "." + kindField[kind] + "[" + name + "]"
}

// run applies the pod rules. The pass path allocates nothing: strings are
// built only for findings.
func (c *podCheck) run() {
	e, s, ps := c.e, &c.e.p.Spec, c.ps
	psc := ps.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}

	if e.sandboxNS[c.ns] && !e.selector.Matches(labels.Set(c.om.Labels)) {
		c.fail(PodSelectorLabels, c.meta+".labels", selectorText(s.Selector.MatchLabels),
			missingLabels(s.Selector.MatchLabels, c.om.Labels),
			fmt.Sprintf("add labels %s to %s.labels (or move the workload out of namespace %s)", selectorText(s.Selector.MatchLabels), c.meta, c.ns),
			fmt.Sprintf("the pod runs in sandbox namespace %s without the selector's labels: no NetworkPolicy or Cilium policy written for sandboxes selects it", c.ns))
	}
	if len(e.classes) > 0 && (ps.RuntimeClassName == nil || !e.classes[*ps.RuntimeClassName]) {
		actual := "unset (the node's default runtime: no isolation)"
		if ps.RuntimeClassName != nil {
			actual = *ps.RuntimeClassName
		}
		c.fail(PodRuntimeClass, c.spec+".runtimeClassName", "one of "+strings.Join(s.Runtime.ClassNames, ", "), actual,
			"set "+c.spec+".runtimeClassName: "+s.Runtime.ClassNames[0], "")
	}
	if s.ServiceAccount == policy.TokenAbsent {
		if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
			actual := "unset (the token is mounted unless the ServiceAccount disables it)"
			if ps.AutomountServiceAccountToken != nil {
				actual = "true"
			}
			c.fail(PodSAToken, c.spec+".automountServiceAccountToken", "false", actual,
				"set "+c.spec+".automountServiceAccountToken: false", "serviceAccountName: "+orDefault(ps.ServiceAccountName, "default"))
		}
		for i := range ps.Volumes {
			v := &ps.Volumes[i]
			if v.Projected == nil {
				continue
			}
			for _, src := range v.Projected.Sources {
				if src.ServiceAccountToken != nil {
					c.fail(PodSAToken, c.spec+".volumes["+v.Name+"].projected", "no service-account token projection",
						"projects a service-account token to "+src.ServiceAccountToken.Path,
						"remove the serviceAccountToken source from "+c.spec+".volumes["+v.Name+"]", "")
				}
			}
		}
	}

	// Pod-level fields that containers can override: a finding lands on the
	// level that decides the effective value.
	var inheritNonRoot, inheritUser, inheritGroup, inheritSeccomp bool
	seccompApplies := s.Seccomp != policy.SeccompUnconfined
	// A policy that declares root (allowRoot, uid 0) cannot also ask the
	// kubelet to refuse root.
	nonRootApplies := s.Identity.UID != 0
	n := containerCount(ps)
	for i := 0; i < n; i++ {
		kind, ctr := containerAt(ps, i)
		sc := ctr.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		switch {
		case !nonRootApplies:
		case sc.RunAsNonRoot == nil:
			inheritNonRoot = true
		case !*sc.RunAsNonRoot:
			f := c.cfield(kind, ctr.Name) + ".securityContext.runAsNonRoot"
			c.fail(PodRunAsNonRoot, f, "true", "false", "set "+f+": true", "")
		}
		if sc.RunAsUser == nil {
			inheritUser = true
		} else if *sc.RunAsUser != s.Identity.UID {
			f := c.cfield(kind, ctr.Name) + ".securityContext.runAsUser"
			c.fail(PodRunAsUser, f, strconv.FormatInt(s.Identity.UID, 10), strconv.FormatInt(*sc.RunAsUser, 10),
				"set "+f+": "+strconv.FormatInt(s.Identity.UID, 10), "")
		}
		if sc.RunAsGroup == nil {
			inheritGroup = true
		} else if *sc.RunAsGroup != s.Identity.GID {
			f := c.cfield(kind, ctr.Name) + ".securityContext.runAsGroup"
			c.fail(PodRunAsGroup, f, strconv.FormatInt(s.Identity.GID, 10), strconv.FormatInt(*sc.RunAsGroup, 10),
				"set "+f+": "+strconv.FormatInt(s.Identity.GID, 10), "")
		}
		if seccompApplies {
			if sc.SeccompProfile == nil {
				inheritSeccomp = true
			} else if !c.seccompOK(sc.SeccompProfile) {
				f := c.cfield(kind, ctr.Name) + ".securityContext.seccompProfile"
				c.fail(PodSeccomp, f, c.seccompWant(), seccompText(sc.SeccompProfile), c.seccompFix(f), "")
			}
		}
		c.containerRules(kind, ctr, sc)
	}
	if inheritNonRoot && (psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot) {
		f := c.spec + ".securityContext.runAsNonRoot"
		c.fail(PodRunAsNonRoot, f, "true", boolText(psc.RunAsNonRoot), "set "+f+": true", c.inheritedBy(func(sc *corev1.SecurityContext) bool { return sc.RunAsNonRoot == nil }))
	}
	if inheritUser && (psc.RunAsUser == nil || *psc.RunAsUser != s.Identity.UID) {
		f := c.spec + ".securityContext.runAsUser"
		c.fail(PodRunAsUser, f, strconv.FormatInt(s.Identity.UID, 10), int64Text(psc.RunAsUser, "unset (the image's USER decides, often root)"),
			"set "+f+": "+strconv.FormatInt(s.Identity.UID, 10), c.inheritedBy(func(sc *corev1.SecurityContext) bool { return sc.RunAsUser == nil }))
	}
	if inheritGroup && (psc.RunAsGroup == nil || *psc.RunAsGroup != s.Identity.GID) {
		f := c.spec + ".securityContext.runAsGroup"
		c.fail(PodRunAsGroup, f, strconv.FormatInt(s.Identity.GID, 10), int64Text(psc.RunAsGroup, "unset (the image decides, often group 0)"),
			"set "+f+": "+strconv.FormatInt(s.Identity.GID, 10), c.inheritedBy(func(sc *corev1.SecurityContext) bool { return sc.RunAsGroup == nil }))
	}
	if inheritSeccomp && !c.seccompOK(psc.SeccompProfile) {
		f := c.spec + ".securityContext.seccompProfile"
		c.fail(PodSeccomp, f, c.seccompWant(), seccompText(psc.SeccompProfile), c.seccompFix(f),
			c.inheritedBy(func(sc *corev1.SecurityContext) bool { return sc.SeccompProfile == nil }))
	}
	if fs := s.Identity.FSGroup; fs != nil && (psc.FSGroup == nil || *psc.FSGroup != *fs) {
		f := c.spec + ".securityContext.fsGroup"
		c.fail(PodFSGroup, f, strconv.FormatInt(*fs, 10), int64Text(psc.FSGroup, "unset"), "set "+f+": "+strconv.FormatInt(*fs, 10), "")
	}
	for _, g := range psc.SupplementalGroups {
		if !slices.Contains(s.Identity.SupplementalGroups, g) {
			f := c.spec + ".securityContext.supplementalGroups"
			want := "no supplementary groups"
			if len(s.Identity.SupplementalGroups) > 0 {
				want = "only " + int64List(s.Identity.SupplementalGroups)
			}
			c.fail(PodSupplementalGroups, f, want, int64List(psc.SupplementalGroups),
				fmt.Sprintf("remove group %d from %s", g, f), "")
		}
	}
	for _, sc := range psc.Sysctls {
		if !safeSysctls[sc.Name] {
			c.fail(PodSysctls, c.spec+".securityContext.sysctls["+sc.Name+"]", "only namespaced, safe sysctls", sc.Name+"="+sc.Value,
				"remove "+sc.Name+" from "+c.spec+".securityContext.sysctls", "")
		}
	}
	if o := psc.SELinuxOptions; o != nil && (!selinuxTypes[o.Type] || o.User != "" || o.Role != "") {
		f := c.spec + ".securityContext.seLinuxOptions"
		c.fail(PodSELinux, f, "type container_t (or unset), no user or role", selinuxText(o), "remove type/user/role from "+f, "")
	}
	if p := psc.AppArmorProfile; p != nil && p.Type == corev1.AppArmorProfileTypeUnconfined {
		f := c.spec + ".securityContext.appArmorProfile"
		c.fail(PodAppArmor, f, "RuntimeDefault or Localhost", "Unconfined", "set "+f+".type: RuntimeDefault", "")
	}
	for k, v := range c.om.Annotations {
		if strings.HasPrefix(k, appArmorAnnotationPrefix) && v == "unconfined" {
			c.fail(PodAppArmor, c.meta+".annotations["+k+"]", "runtime/default or localhost/…", v, "remove annotation "+k, "")
		}
	}
	if ps.HostNetwork {
		c.fail(PodHostNetwork, c.spec+".hostNetwork", "false", "true", "remove "+c.spec+".hostNetwork", "the pod sees and uses the node's network: no NetworkPolicy applies")
	}
	if ps.HostPID {
		c.fail(PodHostPID, c.spec+".hostPID", "false", "true", "remove "+c.spec+".hostPID", "")
	}
	if ps.HostIPC {
		c.fail(PodHostIPC, c.spec+".hostIPC", "false", "true", "remove "+c.spec+".hostIPC", "")
	}
	for i := range ps.Volumes {
		v := &ps.Volumes[i]
		switch {
		case v.HostPath != nil:
			f := c.spec + ".volumes[" + v.Name + "].hostPath"
			c.fail(PodHostPath, f, "no hostPath volume", "hostPath "+v.HostPath.Path, "replace "+f+" with an emptyDir (or a secret/configMap)", "")
		case v.EmptyDir != nil:
			c.emptyDir(v)
		}
	}
	c.pssRestricted()
}

// containerRules are the rules that only a container's own securityContext,
// image, ports, resources and environment decide.
func (c *podCheck) containerRules(kind int, ctr *corev1.Container, sc *corev1.SecurityContext) {
	e, s := c.e, &c.e.p.Spec
	if s.NoNewPrivs() && (sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation) {
		f := c.cfield(kind, ctr.Name) + ".securityContext.allowPrivilegeEscalation"
		c.fail(PodPrivilegeEsc, f, "false", boolText(sc.AllowPrivilegeEscalation)+" (no_new_privs is not set)", "set "+f+": false", "")
	}
	if s.Filesystem.ReadOnlyRoot && (sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem) {
		f := c.cfield(kind, ctr.Name) + ".securityContext.readOnlyRootFilesystem"
		c.fail(PodReadOnlyRoot, f, "true", boolText(sc.ReadOnlyRootFilesystem), "set "+f+": true", "")
	}
	var drop, add []corev1.Capability
	if sc.Capabilities != nil {
		drop, add = sc.Capabilities.Drop, sc.Capabilities.Add
	}
	if !slices.ContainsFunc(drop, func(c corev1.Capability) bool { return strings.EqualFold(string(c), "ALL") }) {
		f := c.cfield(kind, ctr.Name) + ".securityContext.capabilities.drop"
		c.fail(PodCapDrop, f, "[ALL]", capsText(drop), "set "+f+": [ALL]", "without drop ALL the runtime's default set stays (CHOWN, DAC_OVERRIDE, NET_RAW, SETUID, …)")
	}
	for _, a := range add {
		if !e.caps[policy.NormalizeCapability(string(a))] {
			f := c.cfield(kind, ctr.Name) + ".securityContext.capabilities.add"
			c.fail(PodCapAdd, f, capsWant(s.Capabilities), string(a), "remove "+string(a)+" from "+f, "")
		}
	}
	if sc.Privileged != nil && *sc.Privileged {
		f := c.cfield(kind, ctr.Name) + ".securityContext.privileged"
		c.fail(PodPrivileged, f, "false", "true", "remove "+f, "a privileged container has every capability and every device of the node")
	}
	if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
		f := c.cfield(kind, ctr.Name) + ".securityContext.procMount"
		c.fail(PodProcMount, f, "Default", string(*sc.ProcMount), "remove "+f, "")
	}
	if o := sc.SELinuxOptions; o != nil && (!selinuxTypes[o.Type] || o.User != "" || o.Role != "") {
		f := c.cfield(kind, ctr.Name) + ".securityContext.seLinuxOptions"
		c.fail(PodSELinux, f, "type container_t (or unset), no user or role", selinuxText(o), "remove type/user/role from "+f, "")
	}
	if p := sc.AppArmorProfile; p != nil && p.Type == corev1.AppArmorProfileTypeUnconfined {
		f := c.cfield(kind, ctr.Name) + ".securityContext.appArmorProfile"
		c.fail(PodAppArmor, f, "RuntimeDefault or Localhost", "Unconfined", "set "+f+".type: RuntimeDefault", "")
	}
	for i := range ctr.Ports {
		if hp := ctr.Ports[i].HostPort; hp != 0 {
			f := fmt.Sprintf("%s.ports[%d].hostPort", c.cfield(kind, ctr.Name), i)
			c.fail(PodHostPorts, f, "no host port", strconv.Itoa(int(hp)), "remove "+f, "")
		}
	}
	if s.Image.RequireDigest && !strings.Contains(ctr.Image, "@sha256:") {
		f := c.cfield(kind, ctr.Name) + ".image"
		c.fail(PodImageDigest, f, "an image pinned by digest (@sha256:…)", ctr.Image, "set "+f+" to "+imageRepo(ctr.Image)+"@sha256:<digest>", "a tag can be moved to another image at any time")
	}
	// Ephemeral containers cannot carry resources (the API refuses them).
	if kind != kindEphemeral {
		for _, l := range e.limits {
			have, ok := ctr.Resources.Limits[l.name]
			if ok && have.Cmp(l.q) <= 0 {
				continue
			}
			f := c.cfield(kind, ctr.Name) + ".resources.limits." + string(l.name)
			if !ok {
				c.fail(PodResources, f, l.text, "no limit", "set "+f+": "+l.text, "")
			} else {
				c.fail(PodResources, f, "at most "+l.text, have.String(), "set "+f+": "+l.text, "")
			}
		}
	}
	c.secretEnv(kind, ctr)
}

// secretEnv names every variable that carries a credential: a literal value
// under a secret-looking name, or anything taken from a Secret. The value is
// never reported.
func (c *podCheck) secretEnv(kind int, ctr *corev1.Container) {
	s := &c.e.p.Spec
	for i := range ctr.Env {
		ev := &ctr.Env[i]
		var actual string
		switch {
		case ev.ValueFrom != nil && ev.ValueFrom.SecretKeyRef != nil:
			actual = "taken from secret " + ev.ValueFrom.SecretKeyRef.Name + " key " + ev.ValueFrom.SecretKeyRef.Key
		case ev.ValueFrom != nil && ev.ValueFrom.ConfigMapKeyRef != nil && c.e.secretName(ev.Name) != "":
			actual = "taken from configMap " + ev.ValueFrom.ConfigMapKeyRef.Name + " key " + ev.ValueFrom.ConfigMapKeyRef.Key
		case ev.Value != "" && !slices.Contains(s.Secrets.Placeholders, ev.Value) && c.e.secretName(ev.Name) != "":
			actual = "a literal value that is not a declared placeholder (value not reported)"
		default:
			continue
		}
		f := c.cfield(kind, ctr.Name) + ".env[" + ev.Name + "]"
		c.fail(PodSecretEnv, f, "no credential in the environment", actual,
			"remove "+ev.Name+" from "+c.cfield(kind, ctr.Name)+".env (mount a declared credential read-only, or pass a placeholder the broker swaps)",
			c.secretEvidence(ev.Name))
	}
	for i := range ctr.EnvFrom {
		if ref := ctr.EnvFrom[i].SecretRef; ref != nil {
			f := fmt.Sprintf("%s.envFrom[%d].secretRef", c.cfield(kind, ctr.Name), i)
			c.fail(PodSecretEnv, f, "no credential in the environment", "every key of secret "+ref.Name+" becomes a variable",
				"remove "+f, "")
		}
	}
}

func (c *podCheck) secretEvidence(name string) string {
	if p := c.e.secretName(name); p != "" {
		return "name matches " + p
	}
	return ""
}

// secretName returns the secret pattern a variable name matches, if any.
func (e *Engine) secretName(name string) string {
	up := strings.ToUpper(name)
	for i := range e.patterns {
		if e.patterns[i].match(up) {
			return e.p.Spec.Secrets.EnvNamePatterns[i]
		}
	}
	return ""
}

// glob is a secret-name pattern. Patterns made of literals and "*" (all the
// usual ones: "*_KEY", "*PASSWORD*") are matched without path.Match, which
// is a fifth of the engine's time otherwise; anything else falls back to it.
type glob struct {
	raw   string
	parts []string // raw split on "*", when simple
}

func compileGlob(p string) glob {
	g := glob{raw: strings.ToUpper(p)}
	if !strings.ContainsAny(g.raw, `?[\`) {
		g.parts = strings.Split(g.raw, "*")
	}
	return g
}

func (g glob) match(s string) bool {
	if g.parts == nil {
		ok, _ := path.Match(g.raw, s)
		return ok
	}
	if len(g.parts) == 1 {
		return s == g.parts[0]
	}
	first, last := g.parts[0], g.parts[len(g.parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	s = s[len(first) : len(s)-len(last)]
	for _, mid := range g.parts[1 : len(g.parts)-1] {
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s = s[i+len(mid):]
	}
	return true
}

func (c *podCheck) emptyDir(v *corev1.Volume) {
	sl := v.EmptyDir.SizeLimit
	if sl != nil && (c.e.sizeLimit == nil || sl.Cmp(*c.e.sizeLimit) <= 0) {
		return
	}
	f := c.spec + ".volumes[" + v.Name + "].emptyDir.sizeLimit"
	want := "a sizeLimit"
	if c.e.sizeLimit != nil {
		want = "at most " + c.e.sizeLimit.String()
	}
	switch {
	case sl == nil:
		fix := "set " + f
		if c.e.sizeLimit != nil {
			fix += ": " + c.e.sizeLimit.String()
		}
		ev := "an unbounded emptyDir can fill the node's disk"
		if v.EmptyDir.Medium == corev1.StorageMediumMemory {
			ev = "an unbounded memory-backed emptyDir can take the node's RAM"
		}
		c.fail(PodEmptyDirSize, f, want, "unset", fix, ev)
	case c.e.sizeLimit != nil && sl.Cmp(*c.e.sizeLimit) > 0:
		c.fail(PodEmptyDirSize, f, want, sl.String(), "set "+f+": "+c.e.sizeLimit.String(), "")
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

// inheritedBy names the containers that take a pod-level value.
func (c *podCheck) inheritedBy(inherits func(*corev1.SecurityContext) bool) string {
	var names []string
	empty := &corev1.SecurityContext{}
	for i := 0; i < containerCount(c.ps); i++ {
		kind, ctr := containerAt(c.ps, i)
		sc := ctr.SecurityContext
		if sc == nil {
			sc = empty
		}
		if inherits(sc) {
			names = append(names, kindField[kind]+"["+ctr.Name+"]")
		}
	}
	return "inherited by " + strings.Join(names, ", ")
}

func missingLabels(want, have map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(want) {
		v, ok := have[k]
		switch {
		case !ok:
			parts = append(parts, k+" missing")
		case v != want[k]:
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, ", ")
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

func boolText(b *bool) string {
	if b == nil {
		return "unset"
	}
	return strconv.FormatBool(*b)
}

func int64Text(v *int64, unset string) string {
	if v == nil {
		return unset
	}
	return strconv.FormatInt(*v, 10)
}

func int64List(vs []int64) string {
	if len(vs) == 0 {
		return "none"
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.FormatInt(v, 10)
	}
	return "[" + strings.Join(parts, ", ") + "]"
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

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
