package drift_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/report"
)

// TestRuleRows: every row of the catalogue has a unique ID of a known
// kind, what it proves, a usual fix and a severity.
func TestRuleRows(t *testing.T) {
	seen := map[string]bool{}
	kinds := []string{"pod", "netpol", "cilium", "anp", "claim", "scan", "docker"}
	for _, r := range drift.Rules() {
		if seen[r.ID] {
			t.Errorf("%s: listed twice", r.ID)
		}
		seen[r.ID] = true
		if !strings.HasPrefix(r.ID, "drift.") || !slices.Contains(kinds, r.Kind()) {
			t.Errorf("%s: not drift.<%s>.<rule>", r.ID, strings.Join(kinds, "|"))
		}
		if r.Proves == "" || r.Fix == "" {
			t.Errorf("%s: what it proves and its fix must be said", r.ID)
		}
		switch r.Severity {
		case report.Critical, report.High, report.Medium, report.Low:
		default:
			t.Errorf("%s: severity %q", r.ID, r.Severity)
		}
	}
}

// TestFindingOrder: a pod's findings read the pod from top to bottom —
// placement, each container in turn (init containers after the others),
// the pod's securityContext and host namespaces, its volumes, the Pod
// Security Standard — whatever order the rules run in, and a field the
// pod sets for its containers is reported where it is decided.
func TestFindingOrder(t *testing.T) {
	p := loadPolicy(t, "policy.yaml")
	pod := hardenedPod(p, p.Spec.Namespaces[0], "order")
	pod.Spec.HostPID = true
	pod.Spec.AutomountServiceAccountToken = nil
	pod.Spec.SecurityContext.RunAsUser = ptr(int64(0))
	pod.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "kernel.msgmax", Value: "1"}}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "docker", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/run/docker.sock"}}})
	setup := &pod.Spec.InitContainers[0]
	setup.SecurityContext.Privileged = ptr(true)
	setup.SecurityContext.RunAsUser = ptr(int64(1000))
	agent := &pod.Spec.Containers[0]
	agent.Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}}
	agent.SecurityContext.Privileged = ptr(true)
	agent.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	agent.Image = "registry.example/agent:latest"

	e, err := drift.NewEngine(p)
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, f := range e.CheckPod(pod) {
		have = append(have, f.Check+" "+f.Subject)
	}
	want := []string{
		drift.PodSAToken + " spec.automountServiceAccountToken",
		drift.PodSeccomp + " spec.containers[agent].securityContext.seccompProfile",
		drift.PodPrivileged + " spec.containers[agent].securityContext.privileged",
		drift.PodHostPorts + " spec.containers[agent].ports[0].hostPort",
		drift.PodImageDigest + " spec.containers[agent].image",
		drift.PodRunAsUser + " spec.initContainers[setup].securityContext.runAsUser",
		drift.PodPrivileged + " spec.initContainers[setup].securityContext.privileged",
		drift.PodRunAsUser + " spec.securityContext.runAsUser",
		drift.PodSysctls + " spec.securityContext.sysctls[kernel.msgmax]",
		drift.PodHostPID + " spec.hostPID",
		drift.PodHostPath + " spec.volumes[docker].hostPath",
	}
	if !slices.Equal(have, want) {
		t.Fatalf("findings in this order:\n  %s\nwant:\n  %s", strings.Join(have, "\n  "), strings.Join(want, "\n  "))
	}
	// The pod-level runAsUser decides for the two containers that set none.
	for _, f := range e.CheckPod(pod) {
		if f.Subject == "spec.securityContext.runAsUser" && !strings.Contains(f.Evidence, "inherited by containers[agent], containers[browser]") {
			t.Errorf("pod-level runAsUser: evidence %q does not name the containers that inherit it", f.Evidence)
		}
	}
}

// TestAppArmorAnnotationsInKeyOrder: several unconfined AppArmor
// annotations on one pod are listed in key order, run after run (they were
// listed in Go's map order once).
func TestAppArmorAnnotationsInKeyOrder(t *testing.T) {
	p := loadPolicy(t, "policy.yaml")
	pod := hardenedPod(p, p.Spec.Namespaces[0], "annotated")
	const prefix = "container.apparmor.security.beta.kubernetes.io/"
	pod.Annotations = map[string]string{prefix + "setup": "unconfined", prefix + "agent": "unconfined", prefix + "browser": "runtime/default", prefix + "x": "unconfined"}
	e, err := drift.NewEngine(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"metadata.annotations[" + prefix + "agent]", "metadata.annotations[" + prefix + "setup]", "metadata.annotations[" + prefix + "x]"}
	for range 20 {
		var have []string
		for _, f := range e.CheckPod(pod) {
			if f.Check == drift.PodAppArmor {
				have = append(have, f.Subject)
			}
		}
		if !slices.Equal(have, want) {
			t.Fatalf("apparmor findings %v, want %v", have, want)
		}
	}
}
