package render_test

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
)

func load(t *testing.T, name string) *policy.Policy {
	t.Helper()
	p, _, err := policy.LoadFile("../fixtures/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestProbePod: the probe pod looks like a sandbox — and, when the policy
// names the real image, runs inside it with the binary copied in by an
// init container and mounted read-only.
func TestProbePod(t *testing.T) {
	cases := []struct {
		policy       string
		opts         render.ProbePodOptions
		image, bin   string
		init         bool
		runtimeClass string
	}{
		{"policy.yaml", render.ProbePodOptions{Nonce: "n1", NodeName: "worker-3", Labels: map[string]string{"sandprobe.dev/run": "r1"}},
			render.DefaultProbeImage, render.ImageProbeBinary, false, "kata"},
		{"direct-policy.yaml", render.ProbePodOptions{InstallCommand: []string{"/sandprobe", "copy-self"}},
			"registry.example/agents/agent@sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae", render.ProbeBinary, true, "gvisor"},
	}
	for _, c := range cases {
		t.Run(c.policy, func(t *testing.T) {
			p := load(t, c.policy)
			pod := render.ProbePod(p, c.opts)
			for k, v := range p.Spec.Selector.MatchLabels {
				if pod.Labels[k] != v {
					t.Errorf("label %s=%q, want %q", k, pod.Labels[k], v)
				}
			}
			for k, v := range c.opts.Labels {
				if pod.Labels[k] != v {
					t.Errorf("extra label %s missing", k)
				}
			}
			if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != c.runtimeClass {
				t.Errorf("runtimeClassName %v", pod.Spec.RuntimeClassName)
			}
			if pod.Spec.NodeName != c.opts.NodeName || pod.Spec.RestartPolicy != corev1.RestartPolicyNever || pod.Spec.ActiveDeadlineSeconds == nil {
				t.Errorf("scheduling fields %+v", pod.Spec)
			}
			probe := pod.Spec.Containers[0]
			if probe.Image != c.image || probe.Command[0] != c.bin {
				t.Errorf("probe runs %s %v", probe.Image, probe.Command)
			}
			if c.opts.Nonce != "" && !slices.Contains(probe.Args, c.opts.Nonce) {
				t.Errorf("nonce missing from %v", probe.Args)
			}
			if (len(pod.Spec.InitContainers) == 1) != c.init {
				t.Fatalf("init containers %v", pod.Spec.InitContainers)
			}
			if c.init {
				checkProbeCopiedIn(t, pod, c.opts.InstallCommand)
			}
			checkProbeVolumes(t, pod)
		})
	}
}

// checkProbeCopiedIn: the init container copies the probe in with the
// install command, and the probe container mounts it read-only.
func checkProbeCopiedIn(t *testing.T, pod *corev1.Pod, install []string) {
	t.Helper()
	ic := pod.Spec.InitContainers[0]
	probe := pod.Spec.Containers[0]
	if ic.Command[len(ic.Command)-1] != render.ProbeBinary || !strings.HasPrefix(strings.Join(ic.Command, " "), strings.Join(install, " ")) {
		t.Errorf("install command %v", ic.Command)
	}
	var ro bool
	for _, m := range probe.VolumeMounts {
		if m.MountPath == render.ProbeBinDir {
			ro = m.ReadOnly
		}
	}
	if !ro {
		t.Error("the copied binary is not mounted read-only in the probe container")
	}
}

// checkProbeVolumes: the pod has the downward-API volume with its labels,
// and every emptyDir has a size limit.
func checkProbeVolumes(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	var podinfo bool
	for _, v := range pod.Spec.Volumes {
		if v.DownwardAPI != nil {
			podinfo = true
		}
		if v.EmptyDir != nil && v.EmptyDir.SizeLimit == nil {
			t.Errorf("emptyDir %s without sizeLimit", v.Name)
		}
	}
	if !podinfo {
		t.Error("no downward-API volume with the pod's labels")
	}
}

// TestDockerArgv: the argv carries every constraint, and a sandbox image
// without sandprobe gets the static binary bound in read-only.
func TestDockerArgv(t *testing.T) {
	p := load(t, "docker-policy.yaml")
	cmd := render.Docker(p, render.DockerOptions{Nonce: "n", ProbeImage: "sandprobe:test"})
	flags := strings.Join(cmd.Flags, " ")
	for _, want := range []string{"--read-only", "--user 65532:65532", "--cap-drop ALL", "--security-opt no-new-privileges",
		"--pids-limit 256", "--memory 512m", "--cpus 1", "--network sandprobe-drift-internal",
		"--tmpfs /workspace:rw,mode=1777,size=64m", "-e https_proxy=http://10.213.7.2:3128",
		"--mount type=bind,src=/var/lib/sandprobe-creds/git-token,dst=/run/secrets/git-token,readonly", "--label sandbox=true"} {
		if !strings.Contains(flags, want) {
			t.Errorf("flags lack %q:\n%s", want, flags)
		}
	}
	if cmd.Image != "sandprobe:test" || strings.Contains(flags, "--entrypoint") {
		t.Errorf("image %s, flags %s", cmd.Image, flags)
	}
	p.Spec.Image.Ref = "registry.example/agent@sha256:abc"
	cmd = render.Docker(p, render.DockerOptions{ProbeBinary: "/opt/bin/sandprobe"})
	flags = strings.Join(cmd.Flags, " ")
	if cmd.Image != p.Spec.Image.Ref || !strings.Contains(flags, "--mount type=bind,src=/opt/bin/sandprobe,dst="+render.ProbeBinary+",readonly --entrypoint "+render.ProbeBinary) {
		t.Errorf("image %s, flags %s", cmd.Image, flags)
	}
}

// TestShellQuote: the printed command line runs as is in sh.
func TestShellQuote(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	words := []string{"plain", "with space", "it's", `"double"`, "$HOME", "a;b", "", "*", "--tmpfs=/tmp:rw,size=1"}
	var quoted []string
	for _, w := range words {
		quoted = append(quoted, render.ShellQuote(w))
	}
	cmd := exec.Command(sh, "-c", `for a in `+strings.Join(quoted, " ")+`; do printf '%s\0' "$a"; done`)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if !slices.Equal(got, words) {
		t.Fatalf("sh read back %q, want %q", got, words)
	}
}

// TestWriteYAML: typed objects lose their empty creationTimestamp and status.
func TestWriteYAML(t *testing.T) {
	p := load(t, "docker-policy.yaml")
	var buf bytes.Buffer
	if err := render.WriteYAML(&buf, render.ProbePod(p, render.ProbePodOptions{}), render.NetworkPolicy(p, "x")); err != nil {
		t.Fatal(err)
	}
	s := buf.String()
	if strings.Count(s, "---\n") != 2 || strings.Contains(s, "creationTimestamp") || strings.Contains(s, "status:") {
		t.Fatalf("output:\n%s", s)
	}
}

// TestProbePodResources: the probe pod carries the sandbox's limits but
// small requests, so a probe on each node of a busy pool does not reserve a
// sandbox's worth there: the defaults, or spec.probe.requests, each capped
// at its limit, and a request for every limited resource (the API server
// would copy the limit into a missing one). The sandbox's own requests are
// not copied.
func TestProbePodResources(t *testing.T) {
	cases := []struct {
		name                    string
		limits, requests, probe map[string]string
		want                    map[corev1.ResourceName]string
	}{
		{"a large sandbox", map[string]string{"cpu": "4", "memory": "6Gi", "ephemeral-storage": "10Gi"}, map[string]string{"cpu": "2", "memory": "6Gi"}, nil,
			map[corev1.ResourceName]string{"cpu": "50m", "memory": "64Mi", "ephemeral-storage": "64Mi"}},
		{"limits below the defaults", map[string]string{"cpu": "20m", "memory": "32Mi"}, nil, nil,
			map[corev1.ResourceName]string{"cpu": "20m", "memory": "32Mi", "ephemeral-storage": "64Mi"}},
		{"the knob", map[string]string{"memory": "6Gi"}, nil, map[string]string{"memory": "256Mi", "cpu": "100m"},
			map[corev1.ResourceName]string{"cpu": "100m", "memory": "256Mi", "ephemeral-storage": "64Mi"}},
		{"the knob above a limit", map[string]string{"memory": "1Gi"}, nil, map[string]string{"memory": "8Gi"},
			map[corev1.ResourceName]string{"cpu": "50m", "memory": "1Gi", "ephemeral-storage": "64Mi"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := load(t, "direct-policy.yaml")
			p.Spec.Resources.Limits, p.Spec.Resources.Requests, p.Spec.Probe.Requests = c.limits, c.requests, c.probe
			pod := render.ProbePod(p, render.ProbePodOptions{})
			for _, ct := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
				r := ct.Resources
				for name, v := range c.limits {
					if got := r.Limits[corev1.ResourceName(name)]; got.String() != v {
						t.Errorf("%s: limit %s %s, want the sandbox's %s", ct.Name, name, got.String(), v)
					}
				}
				if len(r.Requests) != len(c.want) {
					t.Errorf("%s: requests %v, want %v", ct.Name, r.Requests, c.want)
				}
				for name, v := range c.want {
					if got := r.Requests[name]; got.String() != v {
						t.Errorf("%s: request %s %s, want %s", ct.Name, name, got.String(), v)
					}
				}
			}
		})
	}
}
