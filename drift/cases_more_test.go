package drift_test

import (
	"maps"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
)

// Workloads, admin network policies and the Cilium cases Cilium reads
// differently from a plain label match: more lazy objects, built from a
// policy like the ones in cases_test.go.

// caseNSLabel marks a case's own namespace, so cluster-wide policies in
// one API server select only that case.
const caseNSLabel = "sandprobe.dev/case-ns"

func namespaceObject(name string, labels map[string]string) *corev1.Namespace {
	l := map[string]string{caseNSLabel: name}
	maps.Copy(l, labels)
	return &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

// podTemplate turns a pod into a workload's template; the expectation
// travels in the template's annotations (the template documents itself).
func podTemplate(pod *corev1.Pod, restart corev1.RestartPolicy, expect []string) corev1.PodTemplateSpec {
	t := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(pod.Labels),
		Annotations: map[string]string{expectAnnotation: strings.Join(expect, ",")}}, Spec: *pod.Spec.DeepCopy()}
	t.Spec.RestartPolicy = restart
	return t
}

func controllerRef(kind, apiVersion, name string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, Controller: ptr(true)}}
}

// workloadObjects are one set of workloads in the policy's first
// namespace: each breaks one rule in its template, and the pods of a
// Deployment's ReplicaSet and a CronJob's Job fold into them.
func workloadObjects(p *policy.Policy, prefix string) []any {
	ns := p.Spec.Namespaces[0]
	base := func(name string, mutate func(*corev1.Pod)) *corev1.Pod {
		pod := hardenedPod(p, ns, name)
		if mutate != nil {
			mutate(pod)
		}
		return pod
	}
	sel := func(pod *corev1.Pod) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{caseLabel: pod.Labels[caseLabel]}}
	}
	deployment := func(name string, expect []string, mutate func(*corev1.Pod)) (*appsv1.Deployment, *corev1.Pod) {
		pod := base(name, mutate)
		return &appsv1.Deployment{
			TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pod.Namespace},
			Spec:       appsv1.DeploymentSpec{Replicas: ptr(int32(3)), Selector: sel(pod), Template: podTemplate(pod, corev1.RestartPolicyAlways, expect)},
		}, pod
	}
	var out []any
	out = append(out, egressBase(p, false)...)

	clean, _ := deployment("wl-clean", nil, nil)
	out = append(out, clean)

	privileged := func(pod *corev1.Pod) {
		agent(pod).SecurityContext.Privileged = ptr(true)
		agent(pod).SecurityContext.AllowPrivilegeEscalation = nil
	}
	dep, depPod := deployment("wl-privileged", []string{drift.PodPrivileged, drift.PodPrivilegeEsc}, privileged)
	rs := &appsv1.ReplicaSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "wl-privileged-5d8f", Namespace: ns, OwnerReferences: controllerRef("Deployment", "apps/v1", dep.Name)},
		Spec:       appsv1.ReplicaSetSpec{Replicas: ptr(int32(3)), Selector: sel(depPod), Template: podTemplate(depPod, corev1.RestartPolicyAlways, nil)},
	}
	out = append(out, dep, rs)
	// Its pods: two exactly like the template (reported once, at the
	// Deployment), one with more than the template has (reported itself).
	for i, extra := range []func(*corev1.Pod){nil, nil, func(p *corev1.Pod) { p.Spec.HostPID = true }} {
		pod := base("wl-privileged", privileged)
		pod.Name = "wl-privileged-5d8f-" + string(rune('a'+i))
		pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
		pod.OwnerReferences = controllerRef("ReplicaSet", "apps/v1", rs.Name)
		exp := ""
		if extra != nil {
			extra(pod)
			exp = drift.PodHostPID
		}
		pod.Annotations = map[string]string{expectAnnotation: exp}
		out = append(out, pod)
	}

	stsPod := base("wl-sts", func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/run"}}})
	})
	out = append(out, &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "wl-sts", Namespace: ns},
		Spec:       appsv1.StatefulSetSpec{Selector: sel(stsPod), Template: podTemplate(stsPod, corev1.RestartPolicyAlways, []string{drift.PodHostPath})},
	})
	dsPod := base("wl-ds", func(p *corev1.Pod) { p.Spec.HostNetwork = true })
	out = append(out, &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "wl-ds", Namespace: ns},
		Spec:       appsv1.DaemonSetSpec{Selector: sel(dsPod), Template: podTemplate(dsPod, corev1.RestartPolicyAlways, []string{drift.PodHostNetwork})},
	})
	rsPod := base("wl-rs", func(p *corev1.Pod) { agent(p).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"} })
	out = append(out, &appsv1.ReplicaSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "wl-rs", Namespace: ns},
		Spec:       appsv1.ReplicaSetSpec{Selector: sel(rsPod), Template: podTemplate(rsPod, corev1.RestartPolicyAlways, []string{drift.PodCapAdd})},
	})
	jobPod := base("wl-job", func(p *corev1.Pod) { agent(p).SecurityContext.RunAsUser = ptr(int64(0)) })
	out = append(out, &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: "wl-job", Namespace: ns},
		Spec:       batchv1.JobSpec{Template: podTemplate(jobPod, corev1.RestartPolicyNever, []string{drift.PodRunAsUser})},
	})
	cronPod := base("wl-cron", func(p *corev1.Pod) { p.Spec.SecurityContext.SeccompProfile = nil })
	cron := &batchv1.CronJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"},
		ObjectMeta: metav1.ObjectMeta{Name: "wl-cron", Namespace: ns},
		Spec: batchv1.CronJobSpec{Schedule: "*/30 * * * *", JobTemplate: batchv1.JobTemplateSpec{
			Spec: batchv1.JobSpec{Template: podTemplate(cronPod, corev1.RestartPolicyNever, []string{drift.PodSeccomp})}}},
	}
	cronJob := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: "wl-cron-29000000", Namespace: ns, OwnerReferences: controllerRef("CronJob", "batch/v1", cron.Name)},
		Spec:       batchv1.JobSpec{Template: podTemplate(cronPod, corev1.RestartPolicyNever, nil)},
	}
	cronJobPod := base("wl-cron", func(p *corev1.Pod) { p.Spec.SecurityContext.SeccompProfile = nil })
	cronJobPod.Name = "wl-cron-29000000-x"
	cronJobPod.OwnerReferences = controllerRef("Job", "batch/v1", cronJob.Name)
	cronJobPod.Annotations = map[string]string{expectAnnotation: ""}
	out = append(out, cron, cronJob, cronJobPod)

	unlabelled, _ := deployment("wl-no-labels", []string{drift.PodSelectorLabels, drift.NetpolEgressUnrestricted}, func(p *corev1.Pod) { delete(p.Labels, "sandbox") })
	out = append(out, unlabelled)
	// Outside the sandbox namespaces and without the labels: not a sandbox.
	other, _ := deployment("wl-not-a-sandbox", nil, func(p *corev1.Pod) {
		p.Namespace = prefix + "team-a"
		delete(p.Labels, "sandbox")
		for k := range p.Labels {
			if k != caseLabel {
				delete(p.Labels, k)
			}
		}
		agent(p).SecurityContext.Privileged = ptr(true)
		agent(p).SecurityContext.AllowPrivilegeEscalation = nil
	})
	other.Namespace = prefix + "team-a"
	delete(other.Spec.Template.Annotations, expectAnnotation)
	out = append(out, other)

	// A SandboxTemplate that leaves the token and its network policy to
	// the controller's defaults: the token may be mounted, and the managed
	// policy the controller renders opens the public internet.
	template := func(name string, pod func(*corev1.Pod), spec map[string]any, expect ...string) {
		sbt := sandboxObject(base(name, pod), "v1alpha1")
		sbt.SetAPIVersion(drift.SandboxTemplateGroup + "/v1alpha1")
		sbt.SetKind(drift.SandboxTemplateKind)
		sbt.SetAnnotations(map[string]string{expectAnnotation: strings.Join(expect, ",")})
		for k, v := range spec {
			sbt.Object["spec"].(map[string]any)[k] = v
		}
		out = append(out, sbt)
	}
	template("wl-sandbox-template", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil }, nil, drift.NetpolWorld, drift.PodSAToken)
	egress := func(rules []networkingv1.NetworkPolicyEgressRule) map[string]any {
		np, err := runtimeToUnstructured(&networkingv1.NetworkPolicySpec{Egress: rules})
		if err != nil {
			panic(err)
		}
		return map[string]any{"egress": np["egress"]}
	}
	// Its managed policy allows 0.0.0.0/0 (a common "let the agent
	// browse" template).
	template("wl-template-open", func(*corev1.Pod) {}, map[string]any{"networkPolicy": egress([]networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{ipPeer("0.0.0.0/0")}}})}, drift.NetpolWorld)
	// A healthy one: its managed policy allows what the policy's own
	// rendered NetworkPolicy allows, nothing more.
	template("wl-template-sound", func(*corev1.Pod) {}, map[string]any{"networkPolicy": egress(render.NetworkPolicy(p, ns).Spec.Egress)})
	// Unmanaged: the controller renders nothing; the file's policies judge it.
	template("wl-template-unmanaged", func(*corev1.Pod) {}, map[string]any{"networkPolicyManagement": "Unmanaged"})

	// Claims: a v1alpha1 claim that names a warm pool gets a warm sandbox
	// of the pool's template, whatever its own template's runtime.
	sound := map[string]any{"networkPolicy": egress(render.NetworkPolicy(p, ns).Spec.Egress)}
	otherRuntime := p.Spec.Runtime.ClassNames[len(p.Spec.Runtime.ClassNames)-1]
	template("wl-claim-template", func(*corev1.Pod) {}, sound)
	template("wl-claim-template-other", func(p *corev1.Pod) { p.Spec.RuntimeClassName = &otherRuntime }, sound)
	extension := func(kind, name, expect string, spec map[string]any) {
		out = append(out, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": drift.SandboxTemplateGroup + "/v1alpha1", "kind": kind,
			"metadata": map[string]any{"name": name, "namespace": ns, "annotations": map[string]any{expectAnnotation: expect}},
			"spec":     spec,
		}})
	}
	ref := func(name string) map[string]any { return map[string]any{"name": name} }
	extension(drift.SandboxWarmPoolKind, "wl-pool-other", "", map[string]any{"replicas": int64(2), "sandboxTemplateRef": ref("wl-claim-template-other")})
	extension(drift.SandboxWarmPoolKind, "wl-pool", "", map[string]any{"replicas": int64(2), "sandboxTemplateRef": ref("wl-claim-template")})
	// Its template says kata, the pool it names warms gVisor sandboxes.
	extension(drift.SandboxClaimKind, "wl-claim-mixed", drift.ClaimWarmRuntime, map[string]any{"sandboxTemplateRef": ref("wl-claim-template"), "warmpool": "wl-pool-other"})
	// Healthy: the pool is made from the claim's own template, or none is named.
	extension(drift.SandboxClaimKind, "wl-claim-own-pool", "", map[string]any{"sandboxTemplateRef": ref("wl-claim-template"), "warmpool": "wl-pool"})
	extension(drift.SandboxClaimKind, "wl-claim-default", "", map[string]any{"sandboxTemplateRef": ref("wl-claim-template"), "warmpool": "default"})

	// A pod whose volume names no source: the API stores it as an emptyDir
	// (here: with no size limit).
	vol := base("wl-emptyvol", func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "scratch"})
	})
	vol.Annotations = map[string]string{expectAnnotation: drift.PodEmptyDirSize}
	out = append(out, vol)
	return out
}

// anpCase is a hardened pod in a namespace of its own (with the rendered
// NetworkPolicy unless noNetpol), plus the cluster-wide policies around it.
type anpCase struct {
	name     string
	expect   []string
	noNetpol bool
	objects  func(ns string) []any
}

func admin(kind, name string, spec map[string]any) *unstructured.Unstructured {
	version := "v1alpha1"
	if kind == drift.ClusterNetworkPolicyKind {
		version = "v1alpha2"
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": drift.PolicyAPIGroup + "/" + version, "kind": kind,
		"metadata": map[string]any{"name": name}, "spec": spec,
	}}
}

// nsSubject selects the case's namespace by a label, as an operator would
// ("every namespace of team agents").
func nsSubject(ns string) map[string]any {
	return map[string]any{"namespaces": map[string]any{"matchLabels": map[string]any{caseNSLabel: ns}}}
}

func egressRule(action string, to []any, ports ...any) map[string]any {
	r := map[string]any{"name": strings.ToLower(action), "action": action, "to": to}
	if len(ports) > 0 {
		r["ports"] = ports
	}
	return r
}

func networks(cidrs ...any) map[string]any { return map[string]any{"networks": cidrs} }

func portNumber(n int64) map[string]any {
	return map[string]any{"portNumber": map[string]any{"protocol": "TCP", "port": n}}
}

// anpCases judge the admin tier, NetworkPolicies and the baseline tier in
// the order a cluster does, for fixtures/policy.yaml (a proxy).
func anpCases() []anpCase {
	world := []any{networks("0.0.0.0/0", "::/0")}
	return []anpCase{
		{"anp-world", []string{drift.ANPWorld}, false, func(ns string) []any {
			// The namespace is "for a minute" let out to the internet: an
			// admin Allow overrides the NetworkPolicy that denies it.
			return []any{admin(drift.AdminNetworkPolicyKind, ns+"-world", map[string]any{
				"priority": int64(20), "subject": nsSubject(ns), "egress": []any{egressRule("Allow", []any{networks("0.0.0.0/0")})}})}
		}},
		{"anp-shadowed", nil, false, func(ns string) []any {
			// A higher-priority Deny of everything: the Allow is never reached.
			return []any{
				admin(drift.AdminNetworkPolicyKind, ns+"-deny", map[string]any{
					"priority": int64(5), "subject": nsSubject(ns), "egress": []any{egressRule("Deny", world)}}),
				admin(drift.AdminNetworkPolicyKind, ns+"-allow", map[string]any{
					"priority": int64(10), "subject": nsSubject(ns), "egress": []any{egressRule("Allow", world)}}),
			}
		}},
		{"anp-allow-first", []string{drift.ANPWorld}, false, func(ns string) []any {
			// The same two, priorities the other way round: the Allow wins.
			return []any{
				admin(drift.AdminNetworkPolicyKind, ns+"-deny", map[string]any{
					"priority": int64(30), "subject": nsSubject(ns), "egress": []any{egressRule("Deny", world)}}),
				admin(drift.AdminNetworkPolicyKind, ns+"-allow", map[string]any{
					"priority": int64(10), "subject": nsSubject(ns), "egress": []any{egressRule("Allow", world)}}),
			}
		}},
		{"anp-tie", []string{drift.ANPWorld}, false, func(ns string) []any {
			// The same two at one priority: the API leaves their order
			// undefined, and the Deny's name sorts first. Worst case: the
			// Allow is reached.
			return []any{
				admin(drift.AdminNetworkPolicyKind, ns+"-a-deny", map[string]any{
					"priority": int64(10), "subject": nsSubject(ns), "egress": []any{egressRule("Deny", world)}}),
				admin(drift.AdminNetworkPolicyKind, ns+"-b-allow", map[string]any{
					"priority": int64(10), "subject": nsSubject(ns), "egress": []any{egressRule("Allow", world)}}),
			}
		}},
		{"anp-tie-deny-pass", nil, false, func(ns string) []any {
			// A Deny and a Pass of everything tied: at worst the Pass wins and
			// the NetworkPolicy (rendered, strict) decides. Nothing opens.
			return []any{
				admin(drift.AdminNetworkPolicyKind, ns+"-a-deny", map[string]any{
					"priority": int64(10), "subject": nsSubject(ns), "egress": []any{egressRule("Deny", world)}}),
				admin(drift.AdminNetworkPolicyKind, ns+"-b-pass", map[string]any{
					"priority": int64(10), "subject": nsSubject(ns), "egress": []any{egressRule("Pass", world)}}),
			}
		}},
		{"anp-tie-deny-pass-no-netpol", []string{drift.NetpolEgressUnrestricted}, true, func(ns string) []any {
			// The same tie with no NetworkPolicy behind it: if the Pass is
			// taken, nothing restricts the pod.
			return []any{
				admin(drift.AdminNetworkPolicyKind, ns+"-a-deny", map[string]any{
					"priority": int64(10), "subject": nsSubject(ns), "egress": []any{egressRule("Deny", world)}}),
				admin(drift.AdminNetworkPolicyKind, ns+"-b-pass", map[string]any{
					"priority": int64(10), "subject": nsSubject(ns), "egress": []any{egressRule("Pass", world)}}),
			}
		}},
		{"anp-pass", nil, false, func(ns string) []any {
			// Pass hands everything to the NetworkPolicies: the later Allow
			// of the admin tier is never reached.
			return []any{
				admin(drift.AdminNetworkPolicyKind, ns+"-pass", map[string]any{
					"priority": int64(5), "subject": nsSubject(ns), "egress": []any{egressRule("Pass", world)}}),
				admin(drift.AdminNetworkPolicyKind, ns+"-allow", map[string]any{
					"priority": int64(10), "subject": nsSubject(ns), "egress": []any{egressRule("Allow", world)}}),
			}
		}},
		{"anp-cidr", []string{drift.ANPCIDR}, false, func(ns string) []any {
			return []any{admin(drift.AdminNetworkPolicyKind, ns+"-corp", map[string]any{
				"priority": int64(20), "subject": nsSubject(ns), "egress": []any{egressRule("Allow", []any{networks("10.0.0.0/8")}, portNumber(443))}})}
		}},
		{"anp-peer", []string{drift.ANPPeer}, false, func(ns string) []any {
			return []any{admin(drift.AdminNetworkPolicyKind, ns+"-cluster", map[string]any{
				"priority": int64(20), "subject": nsSubject(ns), "egress": []any{egressRule("Allow", []any{map[string]any{"namespaces": map[string]any{}}})}})}
		}},
		{"anp-domain", []string{drift.ANPDomain}, false, func(ns string) []any {
			return []any{admin(drift.AdminNetworkPolicyKind, ns+"-paste", map[string]any{
				"priority": int64(20), "subject": nsSubject(ns), "egress": []any{egressRule("Allow", []any{map[string]any{"domainNames": []any{"*.pastebin.com"}}}, portNumber(443))}})}
		}},
		{"anp-dns", nil, false, func(ns string) []any {
			// Cluster DNS is explained.
			return []any{admin(drift.AdminNetworkPolicyKind, ns+"-dns", map[string]any{
				"priority": int64(20), "subject": nsSubject(ns), "egress": []any{egressRule("Allow",
					[]any{map[string]any{"namespaces": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "kube-system"}}}},
					map[string]any{"portNumber": map[string]any{"protocol": "UDP", "port": int64(53)}})}})}
		}},
		{"cnp-admin-world", []string{drift.ANPWorld}, false, func(ns string) []any {
			// The v1alpha2 successor: tier Admin, action Accept.
			return []any{admin(drift.ClusterNetworkPolicyKind, ns+"-accept", map[string]any{
				"tier": "Admin", "priority": int64(20), "subject": nsSubject(ns), "egress": []any{map[string]any{"action": "Accept", "to": []any{networks("::/0")}}}})}
		}},
		{"banp-world", []string{drift.ANPWorld, drift.NetpolEgressUnrestricted}, true, func(ns string) []any {
			// No NetworkPolicy selects the pod: the baseline decides, and it allows the internet.
			return []any{admin(drift.BaselineAdminNetworkPolicyKind, "default", map[string]any{
				"subject": nsSubject(ns), "egress": []any{egressRule("Allow", []any{networks("0.0.0.0/0")})}})}
		}},
		{"baseline-behind-netpol", nil, false, func(ns string) []any {
			// A NetworkPolicy selects the pod: the baseline is never consulted.
			return []any{admin(drift.ClusterNetworkPolicyKind, ns+"-baseline", map[string]any{
				"tier": "Baseline", "priority": int64(20), "subject": nsSubject(ns), "egress": []any{map[string]any{"action": "Accept", "to": world}}})}
		}},
		{"baseline-deny", nil, true, func(ns string) []any {
			// No NetworkPolicy, but the baseline denies everything: restricted.
			return []any{admin(drift.ClusterNetworkPolicyKind, ns+"-baseline", map[string]any{
				"tier": "Baseline", "priority": int64(20), "subject": nsSubject(ns), "egress": []any{map[string]any{"action": "Deny", "to": world}}})}
		}},
		{"anp-deny-v4-only", []string{drift.NetpolEgressUnrestricted}, true, func(ns string) []any {
			// Denying 0.0.0.0/0 leaves IPv6 open: not a restriction.
			return []any{admin(drift.AdminNetworkPolicyKind, ns+"-deny4", map[string]any{
				"priority": int64(20), "subject": nsSubject(ns), "egress": []any{egressRule("Deny", []any{networks("0.0.0.0/0")})}})}
		}},
	}
}

// declaredNamespaces are the policy's namespaces, which must exist.
func declaredNamespaces(p *policy.Policy) []any {
	var out []any
	for _, ns := range p.Spec.Namespaces {
		out = append(out, namespaceObject(ns, nil))
	}
	return out
}

func anpObjects(p *policy.Policy, prefix string) []any {
	out := declaredNamespaces(p)
	for _, c := range anpCases() {
		ns := prefix + c.name
		out = append(out, namespaceObject(ns, nil))
		if !c.noNetpol {
			out = append(out, render.NetworkPolicy(p, ns))
		}
		out = append(out, c.objects(ns)...)
		pod := hardenedPod(p, ns, c.name)
		pod.Annotations = map[string]string{expectAnnotation: strings.Join(c.expect, ",")}
		out = append(out, pod)
	}
	return out
}

// ciliumReadCases are Cilium policies that only match as Cilium reads them:
// on the namespace's labels, the cluster label, or selectors that do not
// put the pod into default deny. Each pod is in a namespace of its own,
// without a NetworkPolicy, under fixtures/direct-policy.yaml.
func ciliumReadCases() []anpCase {
	ccnp := func(name string, sel map[string]any, egress ...any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "cilium.io/v2", "kind": drift.CiliumClusterwideNetworkPolicyKind, "metadata": map[string]any{"name": name},
			"spec": map[string]any{"endpointSelector": map[string]any{"matchLabels": sel}, "egress": egress},
		}}
	}
	return []anpCase{
		{"cil-ns-label", []string{drift.CiliumWorld}, true, func(ns string) []any {
			// Selected by the namespace's label, as Cilium sees it.
			return []any{ccnp(ns+"-world", map[string]any{"k8s:io.cilium.k8s.namespace.labels." + caseNSLabel: ns},
				map[string]any{"toEntities": []any{"world"}})}
		}},
		{"cil-cluster", []string{drift.CiliumWorld}, true, func(ns string) []any {
			return []any{ccnp(ns+"-world", map[string]any{"k8s:io.cilium.k8s.policy.cluster": "default", "k8s:io.kubernetes.pod.namespace": ns},
				map[string]any{"toEntities": []any{"world"}})}
		}},
		{"cil-no-default-deny", []string{drift.NetpolEgressUnrestricted}, true, func(ns string) []any {
			// Its allows add, but it denies nothing: the pod is unrestricted.
			u := ccnp(ns+"-observe", map[string]any{"k8s:io.kubernetes.pod.namespace": ns},
				map[string]any{"toFQDNs": []any{map[string]any{"matchName": "api.anthropic.com"}}, "toPorts": ciliumPorts("443")})
			u.Object["spec"].(map[string]any)["enableDefaultDeny"] = map[string]any{"egress": false}
			return []any{u}
		}},
		{"cil-to-requires", []string{drift.CiliumAnyDestination}, true, func(ns string) []any {
			return []any{ccnp(ns+"-requires", map[string]any{"k8s:io.kubernetes.pod.namespace": ns},
				map[string]any{"toRequires": []any{map[string]any{"matchLabels": map[string]any{"env": "prod"}}}, "toPorts": ciliumPorts("443")},
				map[string]any{"toFQDNs": []any{map[string]any{"matchName": "api.anthropic.com"}, map[string]any{"matchPattern": "*.github.com"}}, "toPorts": ciliumPorts("443")},
				map[string]any{"toCIDR": []any{"203.0.113.10/32"}, "toPorts": ciliumPorts("8443")})}
		}},
	}
}

func ciliumReadObjects(p *policy.Policy, prefix string) []any {
	out := declaredNamespaces(p)
	for _, c := range ciliumReadCases() {
		ns := prefix + c.name
		out = append(out, namespaceObject(ns, nil))
		out = append(out, c.objects(ns)...)
		pod := hardenedPod(p, ns, c.name)
		pod.Annotations = map[string]string{expectAnnotation: strings.Join(c.expect, ",")}
		out = append(out, pod)
	}
	return out
}

// uidOf is how the live tests resolve owner references written by name.
type uidOf map[string]types.UID

// TestUnlabelledPodIsToldToAddTheLabel: a pod in a sandbox namespace
// without the sandbox label, where the rendered egress NetworkPolicy
// selecting the label exists, is told to add the label (naming the
// policy), not to apply a policy that is already there; the same pod with
// the label in a namespace without any egress policy is told to apply one.
func TestUnlabelledPodIsToldToAddTheLabel(t *testing.T) {
	p := loadPolicy(t, "policy.yaml")
	ns := p.Spec.Namespaces[0]
	unlabelled := hardenedPod(p, ns, "unlabelled")
	delete(unlabelled.Labels, "sandbox")
	fixOf := func(objs []any, target, check string) string {
		t.Helper()
		_, col := checkYAML(t, p, toYAML(t, objs))
		for _, f := range col.Findings {
			if f.Target == target && f.Check == check && f.Status == report.Fail {
				return f.Fix
			}
		}
		t.Fatalf("no %s on %s", check, target)
		return ""
	}
	objs := append(egressBase(p, false), unlabelled)
	fix := fixOf(objs, "pod/"+ns+"/unlabelled", drift.NetpolEgressUnrestricted)
	np := render.NetworkPolicy(p, ns)
	for _, want := range []string{"add labels sandbox=true to metadata.labels", "networkpolicy/" + ns + "/" + np.Name, "sandbox missing"} {
		if !strings.Contains(fix, want) {
			t.Errorf("fix %q lacks %q", fix, want)
		}
	}
	if strings.Contains(fix, "render") {
		t.Errorf("fix %q asks for a policy that exists", fix)
	}
	if sel := fixOf(objs, "pod/"+ns+"/unlabelled", drift.PodSelectorLabels); !strings.Contains(sel, "add labels sandbox=true") {
		t.Errorf("selector-labels fix %q", sel)
	}

	// No egress policy in the namespace (one elsewhere, so the files say
	// what governs egress): the label alone would not help.
	elsewhere := render.NetworkPolicy(p, "elsewhere")
	labelledNoPolicy := hardenedPod(p, ns, "labelled")
	noPolicy := fixOf([]any{elsewhere, labelledNoPolicy}, "pod/"+ns+"/labelled", drift.NetpolEgressUnrestricted)
	unlabelledNoPolicy := fixOf([]any{elsewhere, unlabelled}, "pod/"+ns+"/unlabelled", drift.NetpolEgressUnrestricted)
	for _, fix := range []string{noPolicy, unlabelledNoPolicy} {
		if !strings.Contains(fix, "apply the NetworkPolicy from `sandprobe render --format egress") {
			t.Errorf("without a policy: fix %q", fix)
		}
	}
}
