// Package render turns a SandboxPolicy into the objects that realise it:
// the probe pod (a sandbox look-alike: same runtime class, labels, security
// context, limits and node pool), the policy ConfigMap it reads, a
// NetworkPolicy and a CiliumNetworkPolicy for the declared egress (every
// rule carries its reason as an annotation), and the `docker run` argv of a
// sandbox container. What render produces has zero drift: the drift tests
// render every fixture policy and check the output against it.
//
// The kube runner builds its probe pods with ProbePod; `sandprobe render`
// prints all of it.
package render

import (
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandprobe/sandprobe/policy"
)

// DefaultProbeImage is the sandprobe image when the policy names none.
const DefaultProbeImage = policy.DefaultProbeImage

// Paths inside the probe pod.
const (
	PolicyDir   = "/etc/sandprobe"
	PolicyKey   = "policy.yaml"
	PodInfoDir  = "/etc/podinfo"
	ProbeBinDir = "/opt/sandprobe"
	// ProbeBinary is where the init container puts the small probe binary
	// in a probe pod that runs inside the sandbox's own image.
	ProbeBinary = ProbeBinDir + "/sandprobe-probe"
	// ImageBinary and ImageProbeBinary are where the sandprobe image keeps
	// its two static binaries: sandprobe (the runner, drift, serve …) and
	// sandprobe-probe (only the in-sandbox checks), which every probe pod
	// runs. Both take `probe --policy …`.
	ImageBinary      = "/sandprobe"
	ImageProbeBinary = "/sandprobe-probe"
	ProbeContainer   = "probe"
	InitContainer    = "install-sandprobe"
)

// Labels render adds to everything it produces (besides the selector's).
const (
	LabelName      = "app.kubernetes.io/name"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelPolicy    = "sandprobe.dev/policy"
	// AnnotationReasonPrefix + "egress.N" holds the reason of egress rule N.
	AnnotationReasonPrefix = "sandprobe.dev/reason."
	// AnnotationPolicy carries the policy file, as written, on a probe pod
	// whose options set PolicyInline; a downward-API volume hands it to
	// the probe at PolicyDir/PolicyKey.
	AnnotationPolicy = "sandprobe.dev/policy"
)

// MaxInlinePolicy bounds a policy carried in an annotation: the API server
// refuses more than 256 KiB of annotations per object, and the pod's other
// annotations need room too.
const MaxInlinePolicy = 128 << 10

// ProbePodOptions tune the probe pod; the zero value renders a manifest.
type ProbePodOptions struct {
	Name      string // default sandprobe-probe-<policy>
	Namespace string // default: the policy's first namespace, or "default"
	// ProbeImage holds the static binaries at /sandprobe and
	// /sandprobe-probe (the one probe pods run); default spec.probe.image,
	// then DefaultProbeImage.
	ProbeImage string
	// PolicyConfigMap holds the policy under key policy.yaml; default
	// sandprobe-policy-<policy>.
	PolicyConfigMap string
	// PolicyInline, when set, is the policy file itself: the pod carries it
	// in annotation AnnotationPolicy and mounts it through the downward API,
	// so it needs no ConfigMap (nor the right to create one) in its namespace.
	PolicyInline []byte
	Nonce        string
	// NodeName pins the probe to one node (one probe per node).
	NodeName string
	// Labels are added to the selector's labels (a run id, for sweeping).
	Labels map[string]string
	// ProbeArgs are appended to `sandprobe probe …` (e.g. --no-network).
	ProbeArgs []string
	// InstallCommand copies the binary out of the probe image into the
	// shared emptyDir when the probe runs inside spec.image.ref; it receives
	// the destination path as its last argument.
	InstallCommand []string
}

// DefaultInstallCommand is the init container's command when none is
// given: the sandprobe image's small probe binary copying itself (see
// ProbePodOptions).
func DefaultInstallCommand() []string { return []string{ImageProbeBinary, "install"} }

// DefaultNamespace is where render puts namespaced objects.
func DefaultNamespace(p *policy.Policy) string {
	if len(p.Spec.Namespaces) > 0 {
		return p.Spec.Namespaces[0]
	}
	return "default"
}

func (o ProbePodOptions) withDefaults(p *policy.Policy) ProbePodOptions {
	if o.Name == "" {
		o.Name = "sandprobe-probe-" + p.Metadata.Name
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace(p)
	}
	if o.ProbeImage == "" {
		o.ProbeImage = p.Spec.Probe.Image
	}
	if o.ProbeImage == "" {
		o.ProbeImage = DefaultProbeImage
	}
	if o.PolicyConfigMap == "" {
		o.PolicyConfigMap = "sandprobe-policy-" + p.Metadata.Name
	}
	if len(o.InstallCommand) == 0 {
		o.InstallCommand = DefaultInstallCommand()
	}
	return o
}

// Images lists the images the probe pod runs, for digest checks.
func Images(p *policy.Policy, opts ProbePodOptions) []string {
	opts = opts.withDefaults(p)
	if p.Spec.Image.Ref != "" {
		return []string{opts.ProbeImage, p.Spec.Image.Ref}
	}
	return []string{opts.ProbeImage}
}

// CheckPinned returns an error when the policy requires digests and an
// image of the probe pod is not pinned: the pod would drift from its own
// policy the moment it was created.
func CheckPinned(p *policy.Policy, opts ProbePodOptions) error {
	if !p.Spec.Image.RequireDigest {
		return nil
	}
	for _, img := range Images(p, opts) {
		if !strings.Contains(img, "@sha256:") {
			return &policy.FieldError{Path: "spec.probe.image", Msg: fmt.Sprintf("spec.image.requireDigest is set but image %s is not pinned by digest: set spec.probe.image (or pass the probe image) as REPO@sha256:DIGEST", img)}
		}
	}
	return nil
}

// PodLabels are the probe pod's labels: the selector's, so every policy
// written for sandboxes selects the probe too, plus render's own.
func PodLabels(p *policy.Policy, extra map[string]string) map[string]string {
	l := map[string]string{LabelName: "sandprobe-probe", LabelManagedBy: "sandprobe", LabelPolicy: p.Metadata.Name}
	for k, v := range extra {
		l[k] = v
	}
	for k, v := range p.Spec.Selector.MatchLabels {
		l[k] = v
	}
	return l
}

// ProbePod builds the probe pod: exactly the constraints a sandbox runs
// under, with the sandprobe probe as its only work.
func ProbePod(p *policy.Policy, opts ProbePodOptions) *corev1.Pod {
	opts = opts.withDefaults(p)
	s := &p.Spec
	f := false
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        opts.Name,
			Namespace:   opts.Namespace,
			Labels:      PodLabels(p, opts.Labels),
			Annotations: map[string]string{"sandprobe.dev/purpose": "probe: checks from inside that this pod is as tight as policy " + p.Metadata.Name + " declares"},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:      corev1.RestartPolicyNever,
			EnableServiceLinks: &f, // service variables map the cluster for whoever runs inside
			NodeSelector:       s.Placement.NodeSelector,
			NodeName:           opts.NodeName,
			SecurityContext:    podSecurityContext(p),
		},
	}
	if s.ServiceAccount == policy.TokenAbsent {
		pod.Spec.AutomountServiceAccountToken = &f
	}
	if len(s.Runtime.ClassNames) > 0 {
		rc := s.Runtime.ClassNames[0]
		pod.Spec.RuntimeClassName = &rc
	}
	if d := s.Probe.Deadline.Duration; d > 0 {
		secs := int64((d + time.Second - 1) / time.Second)
		pod.Spec.ActiveDeadlineSeconds = &secs
	}
	pod.Spec.Tolerations = Tolerations(p)
	mounts := probeVolumes(p, opts, pod)
	image, binary := opts.ProbeImage, ImageProbeBinary
	if s.Image.Ref != "" {
		image, binary = s.Image.Ref, ProbeBinary
		mounts = append(mounts, copyProbeIn(p, opts, pod))
	}
	// --pod-info: the probe proves it carries the sandbox labels (pod.labels).
	args := []string{"probe", "--policy", PolicyDir + "/" + PolicyKey, "--pod-info", PodInfoDir}
	if opts.Nonce != "" {
		args = append(args, "--nonce", opts.Nonce)
	}
	args = append(args, opts.ProbeArgs...)
	pod.Spec.Containers = []corev1.Container{{
		Name:                     ProbeContainer,
		Image:                    image,
		ImagePullPolicy:          corev1.PullIfNotPresent,
		Command:                  []string{binary},
		Args:                     args,
		Env:                      append(proxyEnv(p), NodeIPEnvVar()),
		SecurityContext:          containerSecurityContext(p),
		Resources:                resources(p),
		VolumeMounts:             mounts,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}}
	return pod
}

// probeVolumes adds the probe pod's volumes to pod (an emptyDir per
// writable path, the policy, the pod's own labels) and returns their
// mounts for the probe container.
func probeVolumes(p *policy.Policy, opts ProbePodOptions, pod *corev1.Pod) []corev1.VolumeMount {
	size := emptyDirSize(p)
	var mounts []corev1.VolumeMount
	for _, w := range p.Spec.Filesystem.Writable {
		name := volumeName("writable", w)
		q := size
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &q}}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: w})
	}
	policyVolume := corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: opts.PolicyConfigMap},
		Items:                []corev1.KeyToPath{{Key: PolicyKey, Path: PolicyKey}},
	}}
	if opts.PolicyInline != nil {
		pod.Annotations[AnnotationPolicy] = string(opts.PolicyInline)
		policyVolume = corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{{Path: PolicyKey, FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + AnnotationPolicy + "']"}}},
		}}
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes,
		corev1.Volume{Name: "sandprobe-policy", VolumeSource: policyVolume},
		// The probe reads its own labels to prove it carries the sandbox's.
		corev1.Volume{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}},
		}}},
	)
	return append(mounts,
		corev1.VolumeMount{Name: "sandprobe-policy", MountPath: PolicyDir, ReadOnly: true},
		corev1.VolumeMount{Name: "podinfo", MountPath: PodInfoDir, ReadOnly: true},
	)
}

// copyProbeIn is for running inside the real sandbox image: an init
// container copies the small static probe binary out of the probe image
// into a shared emptyDir, which the returned mount gives the probe
// container read-only.
func copyProbeIn(p *policy.Policy, opts ProbePodOptions, pod *corev1.Pod) corev1.VolumeMount {
	size := emptyDirSize(p)
	binSize := resource.MustParse("64Mi")
	if size.Cmp(binSize) < 0 {
		binSize = size
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "sandprobe-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &binSize}}})
	pod.Spec.InitContainers = []corev1.Container{{
		Name:                     InitContainer,
		Image:                    opts.ProbeImage,
		ImagePullPolicy:          corev1.PullIfNotPresent,
		Command:                  append(append([]string(nil), opts.InstallCommand...), ProbeBinary),
		SecurityContext:          containerSecurityContext(p),
		Resources:                resources(p),
		VolumeMounts:             []corev1.VolumeMount{{Name: "sandprobe-bin", MountPath: ProbeBinDir}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}}
	return corev1.VolumeMount{Name: "sandprobe-bin", MountPath: ProbeBinDir, ReadOnly: true}
}

// PolicyConfigMap carries the policy file, as written, to the probe.
func PolicyConfigMap(p *policy.Policy, raw []byte, opts ProbePodOptions) *corev1.ConfigMap {
	opts = opts.withDefaults(p)
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: opts.PolicyConfigMap, Namespace: opts.Namespace,
			Labels: map[string]string{LabelManagedBy: "sandprobe", LabelPolicy: p.Metadata.Name}},
		Data: map[string]string{PolicyKey: string(raw)},
	}
}

func podSecurityContext(p *policy.Policy) *corev1.PodSecurityContext {
	s := &p.Spec
	t := true
	uid, gid := s.Identity.UID, s.Identity.GID
	psc := &corev1.PodSecurityContext{
		RunAsUser:          &uid,
		RunAsGroup:         &gid,
		SupplementalGroups: s.Identity.SupplementalGroups,
		SeccompProfile:     seccompProfile(p),
	}
	// Only a policy that declares root (identity.allowRoot) renders a pod
	// the kubelet may start as root.
	if uid != 0 {
		psc.RunAsNonRoot = &t
	}
	if s.Identity.FSGroup != nil {
		fs := *s.Identity.FSGroup
		psc.FSGroup = &fs
	}
	return psc
}

// seccompProfile follows the policy, except that Unconfined becomes
// RuntimeDefault: a sandbox must pass the restricted standard regardless.
func seccompProfile(p *policy.Policy) *corev1.SeccompProfile {
	if p.Spec.Seccomp == policy.SeccompLocalhost {
		prof := p.Spec.SeccompProfile
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &prof}
	}
	return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
}

func containerSecurityContext(p *policy.Policy) *corev1.SecurityContext {
	s := &p.Spec
	f, t := false, true
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: &f,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	if s.Identity.UID != 0 {
		sc.RunAsNonRoot = &t
	}
	if s.Filesystem.ReadOnlyRoot {
		sc.ReadOnlyRootFilesystem = &t
	}
	for _, c := range s.Capabilities {
		sc.Capabilities.Add = append(sc.Capabilities.Add, corev1.Capability(policy.NormalizeCapability(c)))
	}
	return sc
}

// resources are the probe pod's: the sandbox's limits, so the probe is held
// to what the sandbox is, and small requests (spec.probe.requests, else
// policy.DefaultProbeRequests), each capped at its limit: a probe on every
// node of a busy pool must not reserve a sandbox's worth on each. A limit
// without a request would make the API server copy the limit into the
// request, so every limited resource gets one.
func resources(p *policy.Policy) corev1.ResourceRequirements {
	var r corev1.ResourceRequirements
	for name, v := range p.Spec.Resources.Limits {
		if q, err := resource.ParseQuantity(v); err == nil {
			if r.Limits == nil {
				r.Limits = corev1.ResourceList{}
			}
			r.Limits[corev1.ResourceName(name)] = q
		}
	}
	want := maps.Clone(policy.DefaultProbeRequests)
	maps.Copy(want, p.Spec.Probe.Requests)
	for name, v := range want {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			continue
		}
		if limit, ok := r.Limits[corev1.ResourceName(name)]; ok && q.Cmp(limit) > 0 {
			q = limit
		}
		if r.Requests == nil {
			r.Requests = corev1.ResourceList{}
		}
		r.Requests[corev1.ResourceName(name)] = q
	}
	return r
}

// emptyDirSize bounds each writable emptyDir: the declared size, else the
// ephemeral-storage limit, else 1Gi — an unbounded emptyDir is drift.
func emptyDirSize(p *policy.Policy) resource.Quantity {
	for _, v := range []string{p.Spec.Filesystem.SizeLimit, p.Spec.Resources.Limits["ephemeral-storage"]} {
		if v == "" {
			continue
		}
		if q, err := resource.ParseQuantity(v); err == nil {
			return q
		}
	}
	return resource.MustParse("1Gi")
}

// NodeIPEnv carries the node's address into the probe and the control
// (the downward API's status.hostIP): the neighbour attempts dial the
// kubelet and a runtime's TCP API there (probes.NodeIPEnv reads it).
const NodeIPEnv = "SANDPROBE_NODE_IP"

// NodeIPEnvVar is NodeIPEnv from the downward API.
func NodeIPEnvVar() corev1.EnvVar {
	return corev1.EnvVar{Name: NodeIPEnv, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}}
}

func proxyEnv(p *policy.Policy) []corev1.EnvVar {
	px := p.Spec.Egress.Proxy
	if px == "" {
		return nil
	}
	var out []corev1.EnvVar
	for _, k := range ProxyVariables() {
		out = append(out, corev1.EnvVar{Name: k, Value: px})
	}
	return out
}

// ProxyVariables are the proxy variables, in both spellings tools read.
func ProxyVariables() []string {
	return []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"}
}

var nonName = regexp.MustCompile(`[^a-z0-9]+`)

// volumeName turns a path into a DNS label: "/var/tmp" → "writable-var-tmp".
func volumeName(prefix, p string) string {
	n := strings.Trim(nonName.ReplaceAllString(strings.ToLower(p), "-"), "-")
	if n == "" {
		n = "root"
	}
	n = prefix + "-" + n
	if len(n) > 63 {
		n = strings.TrimRight(n[:63], "-")
	}
	return n
}

// proxyTarget splits the declared proxy into host, port and, for a
// Kubernetes service name, its namespace.
func proxyTarget(p *policy.Policy) (host string, port int, ns string, ok bool) {
	if p.Spec.Egress.Proxy == "" {
		return "", 0, "", false
	}
	u, err := url.Parse(p.Spec.Egress.Proxy)
	if err != nil {
		return "", 0, "", false
	}
	host = policy.NormalizeHost(u.Hostname())
	port, _ = strconv.Atoi(u.Port())
	if port == 0 {
		port = 80
		if u.Scheme == "https" {
			port = 443
		}
	}
	labels := strings.Split(host, ".")
	if len(labels) == 2 || (len(labels) >= 3 && labels[2] == "svc") {
		ns = labels[1]
	}
	return host, port, ns, true
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Tolerations are the policy's spec.placement.tolerations as a pod's: what
// lets a probe (and the control beside it on its node) land on a tainted
// sandbox pool.
func Tolerations(p *policy.Policy) []corev1.Toleration {
	var out []corev1.Toleration
	for _, tol := range p.Spec.Placement.Tolerations {
		out = append(out, corev1.Toleration{
			Key: tol.Key, Operator: corev1.TolerationOperator(tol.Operator), Value: tol.Value, Effect: corev1.TaintEffect(tol.Effect),
		})
	}
	return out
}
