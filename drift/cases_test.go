package drift_test

import (
	"maps"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
)

// The test objects are built here, from a policy, so the same cases run
// offline, against the real API server and as fixture files
// (fixtures/drift/*.yaml, rewritten with -update).

// caseLabel marks which case an object belongs to; case-specific network
// policies select it.
const caseLabel = "case"

// expectAnnotation lists, on every fixture object, the checks it must
// trigger: the fixture files document themselves.
const expectAnnotation = "sandprobe.dev/expect"

const digest = "@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

func loadPolicy(t testing.TB, name string) *policy.Policy {
	t.Helper()
	p, _, err := policy.LoadFile(filepath.Join(repoRoot(), "fixtures", name))
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	return p
}

func ptr[T any](v T) *T { return &v }

// sizeFor is the emptyDir size a hardened pod uses under p.
func sizeFor(p *policy.Policy) resource.Quantity {
	for _, v := range []string{p.Spec.Filesystem.SizeLimit, p.Spec.Resources.Limits["ephemeral-storage"]} {
		if v != "" {
			return resource.MustParse(v)
		}
	}
	return resource.MustParse("1Gi")
}

func hardenedContainer(p *policy.Policy, name string) corev1.Container {
	c := corev1.Container{
		Name:  name,
		Image: "registry.example/agents/" + name + digest,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr(false),
			ReadOnlyRootFilesystem:   ptr(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		Env: []corev1.EnvVar{
			{Name: "HOME", Value: "/workspace"},
			{Name: "ANTHROPIC_API_KEY", Value: "broker"}, // a declared placeholder
		},
	}
	for k, v := range p.Spec.Resources.Limits {
		if c.Resources.Limits == nil {
			c.Resources.Limits = corev1.ResourceList{}
		}
		c.Resources.Limits[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	for _, w := range p.Spec.Filesystem.Writable {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "w" + strings.ReplaceAll(w, "/", "-"), MountPath: w})
	}
	return c
}

// hardenedPod is a sandbox pod exactly as tight as p declares: two
// containers and an init container, placeholders in the environment.
func hardenedPod(p *policy.Policy, ns, name string) *corev1.Pod {
	labels := map[string]string{"app.kubernetes.io/name": "agent", caseLabel: name}
	maps.Copy(labels, p.Spec.Selector.MatchLabels)
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
			InitContainers: []corev1.Container{hardenedContainer(p, "setup")},
			Containers:     []corev1.Container{hardenedContainer(p, "agent"), hardenedContainer(p, "browser")},
		},
	}
	if len(p.Spec.Runtime.ClassNames) > 0 {
		pod.Spec.RuntimeClassName = ptr(p.Spec.Runtime.ClassNames[0])
	}
	for _, w := range p.Spec.Filesystem.Writable {
		size := sizeFor(p)
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
			Name: "w" + strings.ReplaceAll(w, "/", "-"), VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &size}},
		})
	}
	return pod
}

// podCase is one lazy pod: a hardened pod with one property broken, and
// the checks that must name it (exactly these, no others).
type podCase struct {
	name   string
	expect []string
	ns     string // "" for the policy's first namespace
	mutate func(p *corev1.Pod)
}

func agent(p *corev1.Pod) *corev1.Container { return &p.Spec.Containers[0] }

// podCases break the pod rules one at a time, for fixtures/policy.yaml.
func podCases() []podCase {
	return []podCase{
		{"hardened", nil, "", func(*corev1.Pod) {}},
		{"selector-labels", []string{drift.PodSelectorLabels, drift.NetpolEgressUnrestricted}, "", func(p *corev1.Pod) {
			// Without the label no network policy written for sandboxes
			// selects it: both findings are the point.
			delete(p.Labels, "sandbox")
		}},
		{"runtime-class", []string{drift.PodRuntimeClass}, "", func(p *corev1.Pod) { p.Spec.RuntimeClassName = ptr("runc") }},
		{"runtime-class-unset", []string{drift.PodRuntimeClass}, "", func(p *corev1.Pod) { p.Spec.RuntimeClassName = nil }},
		{"sa-token", []string{drift.PodSAToken}, "", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil }},
		{"sa-token-volume", []string{drift.PodSAToken}, "", func(p *corev1.Pod) {
			p.Spec.ServiceAccountName = "agent" // the API requires one for a token projection
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}},
			}}})
		}},
		{"run-as-non-root", []string{drift.PodRunAsNonRoot}, "", func(p *corev1.Pod) { agent(p).SecurityContext.RunAsNonRoot = ptr(false) }},
		{"run-as-user", []string{drift.PodRunAsUser}, "", func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsUser = ptr(int64(1000)) }},
		{"run-as-root", []string{drift.PodRunAsUser}, "", func(p *corev1.Pod) { agent(p).SecurityContext.RunAsUser = ptr(int64(0)) }},
		{"run-as-group", []string{drift.PodRunAsGroup}, "", func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsGroup = ptr(int64(0)) }},
		{"fs-group", []string{drift.PodFSGroup}, "", func(p *corev1.Pod) { p.Spec.SecurityContext.FSGroup = ptr(int64(1000)) }},
		{"supplemental-groups", []string{drift.PodSupplementalGroups}, "", func(p *corev1.Pod) { p.Spec.SecurityContext.SupplementalGroups = []int64{0} }},
		{"seccomp", []string{drift.PodSeccomp}, "", func(p *corev1.Pod) {
			agent(p).SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}},
		{"seccomp-unset", []string{drift.PodSeccomp}, "", func(p *corev1.Pod) { p.Spec.SecurityContext.SeccompProfile = nil }},
		{"privilege-escalation", []string{drift.PodPrivilegeEsc}, "", func(p *corev1.Pod) {
			p.Spec.InitContainers[0].SecurityContext.AllowPrivilegeEscalation = nil // an init container counts too
		}},
		{"readonly-root", []string{drift.PodReadOnlyRoot}, "", func(p *corev1.Pod) { p.Spec.Containers[1].SecurityContext.ReadOnlyRootFilesystem = ptr(false) }},
		{"cap-drop", []string{drift.PodCapDrop}, "", func(p *corev1.Pod) {
			agent(p).SecurityContext.Capabilities.Drop = []corev1.Capability{"NET_RAW"}
		}},
		{"cap-add", []string{drift.PodCapAdd}, "", func(p *corev1.Pod) {
			agent(p).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		}},
		{"privileged", []string{drift.PodPrivileged, drift.PodPrivilegeEsc}, "", func(p *corev1.Pod) {
			// The API refuses privileged together with allowPrivilegeEscalation
			// false, so a privileged container always escalates too.
			agent(p).SecurityContext.Privileged = ptr(true)
			agent(p).SecurityContext.AllowPrivilegeEscalation = nil
		}},
		{"host-network", []string{drift.PodHostNetwork}, "", func(p *corev1.Pod) { p.Spec.HostNetwork = true }},
		{"host-pid", []string{drift.PodHostPID}, "", func(p *corev1.Pod) { p.Spec.HostPID = true }},
		{"host-ipc", []string{drift.PodHostIPC}, "", func(p *corev1.Pod) { p.Spec.HostIPC = true }},
		{"host-ports", []string{drift.PodHostPorts}, "", func(p *corev1.Pod) {
			agent(p).Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 8080, Protocol: corev1.ProtocolTCP}}
		}},
		{"host-path", []string{drift.PodHostPath}, "", func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/run"}}})
		}},
		{"proc-mount", []string{drift.PodProcMount}, "", func(p *corev1.Pod) {
			p.Spec.HostUsers = ptr(false) // the API allows an unmasked /proc only in a user namespace
			agent(p).SecurityContext.ProcMount = ptr(corev1.UnmaskedProcMount)
		}},
		{"sysctls", []string{drift.PodSysctls}, "", func(p *corev1.Pod) {
			p.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "kernel.msgmax", Value: "65536"}}
		}},
		{"selinux", []string{drift.PodSELinux}, "", func(p *corev1.Pod) {
			agent(p).SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"}
		}},
		{"apparmor", []string{drift.PodAppArmor}, "", func(p *corev1.Pod) {
			p.Spec.SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}},
		{"image-digest", []string{drift.PodImageDigest}, "", func(p *corev1.Pod) { agent(p).Image = "registry.example/agents/agent:latest" }},
		{"resources", []string{drift.PodResources}, "", func(p *corev1.Pod) { delete(agent(p).Resources.Limits, corev1.ResourceMemory) }},
		{"resources-above", []string{drift.PodResources}, "", func(p *corev1.Pod) {
			agent(p).Resources.Limits[corev1.ResourceMemory] = resource.MustParse("16Gi")
		}},
		{"emptydir-size", []string{drift.PodEmptyDirSize}, "", func(p *corev1.Pod) { p.Spec.Volumes[0].EmptyDir.SizeLimit = nil }},
		{"secret-env", []string{drift.PodSecretEnv}, "", func(p *corev1.Pod) {
			agent(p).Env = append(agent(p).Env, corev1.EnvVar{Name: "GITHUB_TOKEN", Value: "ghp_notarealtoken"})
		}},
		{"secret-env-ref", []string{drift.PodSecretEnv}, "", func(p *corev1.Pod) {
			agent(p).Env = append(agent(p).Env, corev1.EnvVar{Name: "DATABASE_URL", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "url"},
			}})
		}},
		{"pss-restricted", []string{drift.PodPSSRestricted}, "", func(p *corev1.Pod) {
			// Nothing in the policy forbids a probe aimed at another host;
			// the restricted standard does.
			agent(p).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Host: "10.0.0.1", Port: intstr.FromInt32(8080), Path: "/healthz",
			}}}
		}},
		{"egress-unrestricted", []string{drift.NetpolEgressUnrestricted}, "team-a", func(*corev1.Pod) {}},
	}
}

// egressCase is a hardened pod plus the network policies that select it
// (on top of the rendered ones), and the checks that must fire.
type egressCase struct {
	name   string
	expect []string
	ns     string // "" for the policy's first namespace
	// objects are NetworkPolicies and Cilium policies selecting case=name.
	objects func(ns string) []any
}

func caseSelector(name string) metav1.LabelSelector {
	return metav1.LabelSelector{MatchLabels: map[string]string{caseLabel: name}}
}

func netpol(ns, name, caseName string, egress ...networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: caseSelector(caseName),
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      egress,
		},
	}
}

func port(n int32, proto corev1.Protocol) networkingv1.NetworkPolicyPort {
	v := intstr.FromInt32(n)
	return networkingv1.NetworkPolicyPort{Port: &v, Protocol: &proto}
}

func ipPeer(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
}

func cnp(ns, name, caseName string, egress ...map[string]any) *unstructured.Unstructured {
	eg := make([]any, len(egress))
	for i, e := range egress {
		eg[i] = e
	}
	kind := drift.CiliumNetworkPolicyKind
	md := map[string]any{"name": name, "namespace": ns}
	if ns == "" {
		kind = drift.CiliumClusterwideNetworkPolicyKind
		md = map[string]any{"name": name}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cilium.io/v2", "kind": kind, "metadata": md,
		"spec": map[string]any{
			"endpointSelector": map[string]any{"matchLabels": map[string]any{"k8s:" + caseLabel: caseName}},
			"egress":           eg,
		},
	}}
}

// kubeDNSRule is an egress rule to cluster DNS on port 53 whose DNS rule
// allows names.
func kubeDNSRule(names ...map[string]any) map[string]any {
	dns := make([]any, len(names))
	for i, n := range names {
		dns[i] = n
	}
	return map[string]any{
		"toEndpoints": []any{map[string]any{"matchLabels": map[string]any{"k8s:io.kubernetes.pod.namespace": "kube-system", "k8s:k8s-app": "kube-dns"}}},
		"toPorts": []any{map[string]any{
			"ports": []any{map[string]any{"port": "53", "protocol": "ANY"}},
			"rules": map[string]any{"dns": dns},
		}},
	}
}

func ciliumPorts(port string) []any {
	return []any{map[string]any{"ports": []any{map[string]any{"port": port, "protocol": "TCP"}}}}
}

// netpolCases break the egress rules for fixtures/policy.yaml (a proxy, no
// addresses): every pod is also selected by the rendered NetworkPolicy.
func netpolCases() []egressCase {
	return []egressCase{
		{"egress-clean", nil, "", func(string) []any { return nil }},
		{"additive-reopen", []string{drift.NetpolWorld}, "", func(ns string) []any {
			// A default-deny, then a second policy "for a minute" that opens
			// the internet: policies add up, so egress is open.
			return []any{
				netpol(ns, "default-deny", "additive-reopen"),
				netpol(ns, "allow-internet-for-a-minute", "additive-reopen",
					networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{ipPeer("0.0.0.0/0", "169.254.169.254/32")}}),
			}
		}},
		{"world-v6", []string{drift.NetpolWorld}, "", func(ns string) []any {
			return []any{netpol(ns, "allow-v6", "world-v6", networkingv1.NetworkPolicyEgressRule{
				To: []networkingv1.NetworkPolicyPeer{ipPeer("::/0")}, Ports: []networkingv1.NetworkPolicyPort{port(443, corev1.ProtocolTCP)}})}
		}},
		{"any-destination", []string{drift.NetpolAnyDestination}, "", func(ns string) []any {
			return []any{netpol(ns, "dns-anywhere", "any-destination", networkingv1.NetworkPolicyEgressRule{
				Ports: []networkingv1.NetworkPolicyPort{port(53, corev1.ProtocolUDP)}})}
		}},
		{"ipblock", []string{drift.NetpolIPBlock}, "", func(ns string) []any {
			return []any{netpol(ns, "allow-corp", "ipblock", networkingv1.NetworkPolicyEgressRule{
				To: []networkingv1.NetworkPolicyPeer{ipPeer("10.0.0.0/8")}, Ports: []networkingv1.NetworkPolicyPort{port(443, corev1.ProtocolTCP)}})}
		}},
		{"peer", []string{drift.NetpolPeer}, "", func(ns string) []any {
			return []any{netpol(ns, "allow-cluster", "peer", networkingv1.NetworkPolicyEgressRule{
				To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}})}
		}},
		{"proxy-wrong-port", []string{drift.NetpolPeer}, "", func(ns string) []any {
			return []any{netpol(ns, "proxy-admin", "proxy-wrong-port", networkingv1.NetworkPolicyEgressRule{
				To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "sandbox-system"}}}},
				Ports: []networkingv1.NetworkPolicyPort{port(9090, corev1.ProtocolTCP)}})}
		}},
	}
}

// ciliumCases break the egress rules for fixtures/direct-policy.yaml (no
// proxy, names and an address): every pod is also selected by the rendered
// NetworkPolicy and CiliumNetworkPolicy.
func ciliumCases() []egressCase {
	return []egressCase{
		{"cilium-clean", nil, "", func(string) []any { return nil }},
		{"port", []string{drift.NetpolPort}, "", func(ns string) []any {
			return []any{netpol(ns, "cache-all-ports", "port", networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{ipPeer("203.0.113.10/32")}})}
		}},
		{"fqdn-extra", []string{drift.CiliumFQDNExtra}, "", func(ns string) []any {
			return []any{cnp(ns, "pastebin", "fqdn-extra", map[string]any{
				"toFQDNs": []any{map[string]any{"matchName": "pastebin.com"}}, "toPorts": ciliumPorts("443")})}
		}},
		{"fqdn-pattern-extra", []string{drift.CiliumFQDNExtra}, "", func(ns string) []any {
			return []any{cnp(ns, "all-of-github-ish", "fqdn-pattern-extra", map[string]any{
				"toFQDNs": []any{map[string]any{"matchPattern": "*github.com"}}, "toPorts": ciliumPorts("443")})}
		}},
		{"cilium-world", []string{drift.CiliumWorld}, "", func(string) []any {
			return []any{cnp("", "world-for-debugging", "cilium-world", map[string]any{"toEntities": []any{"world"}})}
		}},
		{"cilium-cidr", []string{drift.CiliumCIDR}, "", func(ns string) []any {
			return []any{cnp(ns, "docs-range", "cilium-cidr", map[string]any{
				"toCIDRSet": []any{map[string]any{"cidr": "198.51.100.0/24"}}, "toPorts": ciliumPorts("443")})}
		}},
		{"cilium-any", []string{drift.CiliumAnyDestination}, "", func(ns string) []any {
			return []any{cnp(ns, "https-anywhere", "cilium-any", map[string]any{"toPorts": ciliumPorts("443")})}
		}},
		{"cilium-peer", []string{drift.CiliumPeer}, "", func(ns string) []any {
			return []any{cnp(ns, "apiserver", "cilium-peer", map[string]any{"toEntities": []any{"kube-apiserver"}, "toPorts": ciliumPorts("443")})}
		}},
		{"fqdn-apex", []string{drift.CiliumFQDNExtra}, "", func(ns string) []any {
			// "*.github.com" is declared, which Cilium (and the policy) read
			// as subdomains only: the apex is one name more.
			return []any{cnp(ns, "github-apex", "fqdn-apex", map[string]any{
				"toFQDNs": []any{map[string]any{"matchName": "github.com"}}, "toPorts": ciliumPorts("443")})}
		}},
		{"dns-any", []string{drift.CiliumDNSNames}, "", func(ns string) []any {
			// The DNS exfiltration channel Cilium users open by accident:
			// "let DNS through" written as a pattern for every name.
			return []any{cnp(ns, "dns-everything", "dns-any", kubeDNSRule(map[string]any{"matchPattern": "*"}))}
		}},
		{"dns-pattern", []string{drift.CiliumDNSNames}, "", func(ns string) []any {
			return []any{cnp(ns, "dns-pages", "dns-pattern", kubeDNSRule(map[string]any{"matchPattern": "*.github.io"}))}
		}},
		{"dns-healthy", nil, "", func(ns string) []any {
			// The user's own DNS rule: declared names, one name more (no
			// channel: the sandbox cannot choose it) and the cluster's
			// names, which its resolver answers itself.
			return []any{cnp(ns, "dns-own", "dns-healthy", kubeDNSRule(
				map[string]any{"matchPattern": "*.github.com"}, map[string]any{"matchName": "api.anthropic.com"},
				map[string]any{"matchName": "status.example.org"}, map[string]any{"matchPattern": "*.cluster.local"},
				map[string]any{"matchPattern": "*.svc.cluster.local"}))}
		}},
		{"fqdn-missing", []string{drift.CiliumFQDNMissing}, "agents-b", func(ns string) []any {
			// In agents-b only the model API is allowed: git cannot work.
			return []any{cnp(ns, "model-only", "fqdn-missing", map[string]any{
				"toFQDNs": []any{map[string]any{"matchName": "api.anthropic.com"}}, "toPorts": ciliumPorts("443")})}
		}},
	}
}

// egressBase are the rendered policies every egress case starts from.
func egressBase(p *policy.Policy, withCilium bool) []any {
	var out []any
	for _, ns := range render.Namespaces(p, "") {
		out = append(out, render.NetworkPolicy(p, ns))
	}
	if withCilium {
		// Only the first namespace gets the full Cilium policy; the others
		// have their own (see the fqdn-missing case).
		out = append(out, &unstructured.Unstructured{Object: render.CiliumNetworkPolicy(p, p.Spec.Namespaces[0])})
	}
	return out
}

// sandboxObject wraps a pod's spec and labels in an agents.x-k8s.io Sandbox.
func sandboxObject(pod *corev1.Pod, version string) *unstructured.Unstructured {
	spec, err := runtimeToUnstructured(&pod.Spec)
	if err != nil {
		panic(err)
	}
	labels := map[string]any{}
	for k, v := range pod.Labels {
		labels[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": drift.SandboxGroup + "/" + version, "kind": drift.SandboxKind,
		"metadata": map[string]any{"name": pod.Name, "namespace": pod.Namespace},
		"spec":     map[string]any{"podTemplate": map[string]any{"metadata": map[string]any{"labels": labels}, "spec": spec}},
	}}
}

// caseNamespace resolves a case's namespace: the policy's first one by
// default; prefix keeps the sets apart in one API server.
func caseNamespace(p *policy.Policy, prefix, ns string) string {
	if ns == "" {
		return p.Spec.Namespaces[0]
	}
	return prefix + ns
}

func (c podCase) pod(p *policy.Policy, prefix string) *corev1.Pod {
	pod := hardenedPod(p, caseNamespace(p, prefix, c.ns), c.name)
	c.mutate(pod)
	pod.Annotations = map[string]string{expectAnnotation: strings.Join(c.expect, ",")}
	return pod
}

func (c egressCase) pod(p *policy.Policy, prefix string) *corev1.Pod {
	pod := hardenedPod(p, caseNamespace(p, prefix, c.ns), c.name)
	pod.Annotations = map[string]string{expectAnnotation: strings.Join(c.expect, ",")}
	return pod
}

// fixtureSet is one fixture file: objects built from a policy.
type fixtureSet struct {
	file    string // under fixtures/drift/
	policy  string // under fixtures/
	objects func(p *policy.Policy, prefix string) []any
}

func fixtureSets() []fixtureSet {
	return []fixtureSet{
		{"hardened.yaml", "policy.yaml", func(p *policy.Policy, prefix string) []any {
			out := egressBase(p, false)
			for i, name := range []string{"agent-1", "agent-2", "agent-3"} {
				pod := hardenedPod(p, p.Spec.Namespaces[0], name)
				if i == 2 {
					// Placeholders and a read-only credential are fine.
					agent(pod).Env = append(agent(pod).Env, corev1.EnvVar{Name: "GIT_TOKEN", Value: "broker"})
				}
				out = append(out, pod)
			}
			sb := hardenedPod(p, p.Spec.Namespaces[0], "agent-sandbox-1")
			return append(out, sandboxObject(sb, "v1alpha1"))
		}},
		{"pods.yaml", "policy.yaml", func(p *policy.Policy, prefix string) []any {
			out := egressBase(p, false)
			for _, c := range podCases() {
				out = append(out, c.pod(p, prefix))
			}
			return out
		}},
		{"sandboxes.yaml", "policy.yaml", func(p *policy.Policy, prefix string) []any {
			out := egressBase(p, false)
			for _, c := range podCases() {
				switch c.name {
				case "hardened", "privileged", "selector-labels", "sa-token", "image-digest":
				default:
					continue
				}
				pod := c.pod(p, prefix)
				pod.Name = "sandbox-" + c.name
				sb := sandboxObject(pod, "v1alpha1")
				// The template is judged like the pods it makes, egress too.
				sb.SetAnnotations(map[string]string{expectAnnotation: pod.Annotations[expectAnnotation]})
				out = append(out, sb)
			}
			return out
		}},
		{"netpol.yaml", "policy.yaml", func(p *policy.Policy, prefix string) []any {
			out := egressBase(p, false)
			for _, c := range netpolCases() {
				ns := caseNamespace(p, prefix, c.ns)
				out = append(out, c.objects(ns)...)
				out = append(out, c.pod(p, prefix))
			}
			return out
		}},
		{"workloads.yaml", "policy.yaml", workloadObjects},
		{"phases.yaml", "phases-policy.yaml", phaseObjects},
		{"anp.yaml", "policy.yaml", anpObjects},
		{"cilium-read.yaml", "direct-policy.yaml", ciliumReadObjects},
		{"factory.yaml", "factory-policy.yaml", factoryObjects},
		{"cilium.yaml", "direct-policy.yaml", func(p *policy.Policy, prefix string) []any {
			out := egressBase(p, true)
			for _, c := range ciliumCases() {
				ns := caseNamespace(p, prefix, c.ns)
				out = append(out, c.objects(ns)...)
				out = append(out, c.pod(p, prefix))
			}
			return out
		}},
	}
}
