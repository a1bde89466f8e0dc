package drift_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/policy"
)

// The phases of an attempt (fixtures/phases-policy.yaml): each phase pod
// mounts the attempt's workspace claim at /workspace, and HOME is an
// emptyDir of its own. The cases put HOME, or another variable tools read
// their start-up configuration from, on the shared volume the ways a pod
// spec does.

const (
	workspaceVolume = "w-workspace" // hardenedPod's volume for /workspace
	workspaceClaim  = "attempt-42-workspace"
	phaseHome       = "/home/agent"
)

// phasePod is a hardened phase pod: the workspace volume is the attempt's
// claim, and every container has HOME=/home/agent on an emptyDir.
func phasePod(p *policy.Policy, ns, name string) *corev1.Pod {
	pod := hardenedPod(p, ns, name)
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == workspaceVolume {
			pod.Spec.Volumes[i].VolumeSource = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: workspaceClaim}}
		}
	}
	size := resource.MustParse("64Mi")
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "home", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &size}}})
	for _, c := range allContainers(pod) {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "home", MountPath: phaseHome})
		setEnv(c, "HOME", phaseHome)
	}
	return pod
}

func allContainers(pod *corev1.Pod) []*corev1.Container {
	var out []*corev1.Container
	for i := range pod.Spec.InitContainers {
		out = append(out, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

// setEnv sets a variable of c, in place when c has it.
func setEnv(c *corev1.Container, name, value string) {
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i] = corev1.EnvVar{Name: name, Value: value}
			return
		}
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
}

// phaseCases break drift.pod.home-on-workspace, and show what it leaves
// alone, for fixtures/phases-policy.yaml.
func phaseCases() []podCase {
	return []podCase{
		{"phase-clean", nil, "", func(*corev1.Pod) {}},
		{"phase-home-on-workspace", []string{drift.PodHomeOnWorkspace}, "", func(p *corev1.Pod) {
			// The image's entrypoint expects HOME=/workspace "so the agent
			// can keep its dotfiles": the next phase's shell reads them.
			setEnv(agent(p), "HOME", "/workspace")
		}},
		{"phase-init-home", []string{drift.PodHomeOnWorkspace}, "", func(p *corev1.Pod) {
			// An init container counts: it runs git in the same pod.
			setEnv(&p.Spec.InitContainers[0], "HOME", "/workspace/.home")
		}},
		{"phase-xdg-second-mount", []string{drift.PodHomeOnWorkspace}, "", func(p *corev1.Pod) {
			// The workspace volume again, at a second path: still the
			// volume the phases share.
			agent(p).VolumeMounts = append(agent(p).VolumeMounts, corev1.VolumeMount{Name: workspaceVolume, MountPath: "/srv/dotfiles", SubPath: "dotfiles"})
			setEnv(agent(p), "XDG_CONFIG_HOME", "/srv/dotfiles/config")
		}},
		{"phase-config-in-home", []string{drift.PodHomeOnWorkspace}, "", func(p *corev1.Pod) {
			// HOME is an emptyDir, but ~/.config in it is the workspace.
			agent(p).VolumeMounts = append(agent(p).VolumeMounts, corev1.VolumeMount{Name: workspaceVolume, MountPath: phaseHome + "/.config", SubPath: ".agent-config"})
		}},
		{"phase-same-claim", []string{drift.PodHomeOnWorkspace}, "", func(p *corev1.Pod) {
			// A second volume of the same claim is the same storage.
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "attempt", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: workspaceClaim}}})
			agent(p).VolumeMounts = append(agent(p).VolumeMounts, corev1.VolumeMount{Name: "attempt", MountPath: "/attempt"})
			setEnv(agent(p), "GIT_CONFIG_GLOBAL", "/attempt/gitconfig")
		}},
		{"phase-expanded", []string{drift.PodHomeOnWorkspace}, "", func(p *corev1.Pod) {
			// The kubelet expands $(WORK) from the entry before it.
			setEnv(agent(p), "WORK", "/workspace")
			setEnv(agent(p), "npm_config_userconfig", "$(WORK)/.npmrc")
		}},
		{"phase-not-judged", []string{drift.PodHomeOnWorkspace}, "", func(p *corev1.Pod) {
			// Where $(ROOT) points only the ConfigMap knows: inconclusive.
			agent(p).Env = append([]corev1.EnvVar{{Name: "ROOT", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "layout"}, Key: "root"}}}}, agent(p).Env...)
			setEnv(agent(p), "XDG_CACHE_HOME", "$(ROOT)/cache")
		}},
		{"phase-repo-under-home", nil, "", func(p *corev1.Pod) {
			// The workspace again under HOME, as ~/src: a checkout, no
			// dotfile; and variables that are not start-up configuration.
			agent(p).VolumeMounts = append(agent(p).VolumeMounts, corev1.VolumeMount{Name: workspaceVolume, MountPath: phaseHome + "/src"})
			setEnv(agent(p), "XDG_CONFIG_HOME", phaseHome+"/.config")
			setEnv(agent(p), "XDG_STATE_HOME", "/workspace/.state")
			setEnv(agent(p), "GOPATH_NOTE", "/workspace")
		}},
		{"phase-escaped", nil, "", func(p *corev1.Pod) {
			// $$ is a literal $: HOME is "$(WORK)", not /workspace.
			setEnv(agent(p), "WORK", "/workspace")
			setEnv(agent(p), "ZDOTDIR", "$$(WORK)")
		}},
	}
}

func phaseObjects(p *policy.Policy, prefix string) []any {
	out := egressBase(p, false)
	for _, c := range phaseCases() {
		pod := phasePod(p, caseNamespace(p, prefix, c.ns), c.name)
		c.mutate(pod)
		pod.Annotations = map[string]string{expectAnnotation: strings.Join(c.expect, ",")}
		out = append(out, pod)
	}
	return out
}

// TestHomeOnWorkspaceNeedsPhases: a policy that declares no workspace
// never judges HOME, whatever volume it is on (every hardened pod of
// fixtures/policy.yaml has HOME=/workspace).
func TestHomeOnWorkspaceNeedsPhases(t *testing.T) {
	p := loadPolicy(t, "policy.yaml")
	pod := phasePod(p, p.Spec.Namespaces[0], "unphased")
	setEnv(agent(pod), "HOME", "/workspace")
	e, err := drift.NewEngine(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range e.CheckPod(pod) {
		if f.Check == drift.PodHomeOnWorkspace {
			t.Errorf("fired without spec.phases: %+v", f)
		}
	}
	p.Spec.Phases.Workspace = "/workspace"
	if e, err = drift.NewEngine(p); err != nil {
		t.Fatal(err)
	}
	if fs := e.CheckPod(pod); len(fs) != 1 || fs[0].Check != drift.PodHomeOnWorkspace || fs[0].Subject != "spec.containers[agent].env[HOME]" {
		t.Errorf("with spec.phases.workspace: %+v", fs)
	}
}
