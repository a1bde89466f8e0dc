package kube

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// The control vantage: one pod per run in ControlNamespace (the runner's
// own by default), carrying none of the sandbox labels, so no policy
// written for sandboxes selects it. It dials every must-fail, metadata and
// proxy-bypass destination (`sandprobe probe --control`) while the probes
// run, and each probe's deny counts only where the control got an answer.
// A control that is itself restricted (a default-deny in its namespace)
// gets fewer answers and so proves fewer denies; it can never prove one
// falsely, since a proof is an answer.

// CheckControl is the run's summary of what the control vantage saw.
const CheckControl = "control.vantage"

// controlNamespace is where the control pod runs.
func (b *Backend) controlNamespace() string { return cmp.Or(b.ControlNamespace, RunnerNamespace) }

// wantsControl says whether a run dials from a control vantage at all: not
// without network checks, and not when every deny goes through the proxy.
func (b *Backend) wantsControl(spec runner.ProbeSpec) bool {
	return !b.noControl && wantsControl(spec)
}

func wantsControl(spec runner.ProbeSpec) bool {
	return !spec.NoNetwork && len(probes.ControlPlan(spec.Policy.Spec.Egress)) > 0
}

// controlPod is the control vantage: the probe image running
// `sandprobe probe --control`, as restricted as Pod Security's "restricted"
// standard asks (its namespace enforces it) and as the runner-scope
// admission policy allows (no token, downward-API policy, the run's labels).
func (b *Backend) controlPod(r *run, pl placement) *corev1.Pod {
	p := r.spec.Policy
	image := render.Images(p, render.ProbePodOptions{ProbeImage: b.ProbeImage})[0]
	f, t := false, true
	uid := int64(65532)
	secs := int64((r.deadline + time.Second - 1) / time.Second)
	pol := strings.Trim(nonLabel(strings.ToLower(p.Metadata.Name)), "-")
	if len(pol) > 24 {
		pol = strings.TrimRight(pol[:24], "-")
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: strings.ReplaceAll("sandprobe-control-"+pol+"-"+r.id+nodeSuffix(pl.node), "--", "-"), Namespace: pl.ns,
			Labels: map[string]string{
				render.LabelName: "sandprobe-control", render.LabelManagedBy: "sandprobe", render.LabelPolicy: p.Metadata.Name,
				LabelRun: r.id, LabelNonce: r.spec.Nonce,
			},
			Annotations: map[string]string{
				"sandprobe.dev/purpose": "control: dials the destinations sandboxes must not reach, from where no sandbox policy applies, so a deny counts only if the destination answers someone",
				render.AnnotationPolicy: string(r.spec.PolicyBytes),
				AnnotationNonce:         r.spec.Nonce,
				AnnotationDeadline:      r.deadline.String(),
			},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			EnableServiceLinks:           &f,
			AutomountServiceAccountToken: &f,
			ActiveDeadlineSeconds:        &secs,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: &t, RunAsUser: &uid, RunAsGroup: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Volumes: []corev1.Volume{{Name: "sandprobe-policy", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
				Items: []corev1.DownwardAPIVolumeFile{{Path: render.PolicyKey, FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + render.AnnotationPolicy + "']"}}},
			}}}},
			Containers: []corev1.Container{{
				Name:    render.ProbeContainer,
				Image:   image,
				Command: []string{render.ImageProbeBinary},
				Args:    []string{"probe", "--control", "--policy", render.PolicyDir + "/" + render.PolicyKey, "--nonce", r.spec.Nonce},
				Env:     []corev1.EnvVar{render.NodeIPEnvVar()}, // the neighbours from its node
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &f, ReadOnlyRootFilesystem: &t, RunAsNonRoot: &t,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
				},
				VolumeMounts:             []corev1.VolumeMount{{Name: "sandprobe-policy", MountPath: render.PolicyDir, ReadOnly: true}},
				ImagePullPolicy:          corev1.PullIfNotPresent,
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
		},
	}
	if r.createdBy != "" {
		pod.Annotations[AnnotationCreatedBy] = r.createdBy
	}
	if pl.node != "" {
		// Beside a probe pinned to its node: the sandbox pool's taints are
		// the policy's to tolerate, and the control needs them too.
		pod.Spec.Tolerations = render.Tolerations(p)
		pinTo(pod, pl)
	}
	b.adaptContainer(&pod.Spec.Containers[0], false)
	return pod
}

// controlSummary is the control's own line in the report: where it stood,
// which egress policies (if any) govern it, and what each destination did.
func (b *Backend) controlSummary(r *run, target, ns string, ctl report.ProbeResult, pod *corev1.Pod) report.Finding {
	f := report.Finding{Check: CheckControl, Target: target, Namespace: ns, Status: report.Pass,
		Expected: "a control vantage outside every sandbox policy dials each must-fail destination"}
	answered, dialled := 0, 0
	var seen []string
	for _, c := range ctl.Findings {
		seen = append(seen, c.Subject+": "+cmp.Or(c.Class, string(c.Status)))
		// The must-fail names it resolves for the DNS channel are no
		// destinations: a resolver that refuses them (the lab's, a
		// filtering one) says nothing about the control's reach.
		if c.Role == report.RoleDNSChannel {
			continue
		}
		dialled++
		if c.Class == report.ClassAnswered {
			answered++
		}
	}
	where := "the control pod in namespace " + ns
	var restricted []string
	if s := r.survey; s != nil && s.err == nil && pod != nil {
		if restricted = s.engine.EgressPolicies(ns, pod.Labels, "default"); len(restricted) > 0 {
			where += " (restricted by " + strings.Join(restricted, ", ") + ": it may prove fewer denies)"
		} else {
			where += " (no egress policy selects it)"
		}
	}
	f.Actual = fmt.Sprintf("%s dialled %d destinations; %d answered, so only their denies are proven", where, dialled, answered)
	// The way a control breaks in the real world: a default-deny in its
	// namespace (a cluster that denies egress everywhere) stops it as it
	// stops the sandboxes. Its misses then say nothing about the targets;
	// the vantage itself is what needs fixing, and its line says so.
	if len(restricted) > 0 && answered < dialled {
		f.Status = report.Inconclusive
		f.Fix = fmt.Sprintf("let the control pod (label %s=sandprobe-control) reach the must-fail destinations: an egress NetworkPolicy in namespace %s that allows it, or a --control-namespace no egress policy restricts", render.LabelName, ns)
	}
	slices.Sort(seen)
	f.Evidence = strings.Join(seen, "; ")
	return f
}
