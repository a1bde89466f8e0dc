// Command randpods writes seeded random sandbox pods (and workloads) as one
// multi-document YAML file, and random containers as one `docker inspect`
// file: every field the pod and Docker rules read, set or left unset at
// random, at the pod and at the container level, with several containers,
// init and ephemeral ones, volumes, annotations and security options in
// random orders. hack/samereports.sh runs two builds of sandprobe over
// them to prove a refactoring changed no report, including the order of
// many findings on one object.
//
//	randpods -n 500 -seed 1 -o pods.yaml -inspect containers.json
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func main() {
	n := flag.Int("n", 500, "pods")
	seed := flag.Uint64("seed", 1, "random seed")
	out := flag.String("o", "-", "the pods' YAML file")
	inspect := flag.String("inspect", "", "also write this many containers as a docker inspect file")
	flag.Parse()
	g := gen{rand.New(rand.NewPCG(*seed, *seed^0x9e3779b97f4a7c15))}
	f := os.Stdout
	if *out != "-" {
		var err error
		if f, err = os.Create(*out); err != nil {
			fail(err)
		}
	}
	w := bufio.NewWriter(f)
	for i := 0; i < *n; i++ {
		pod := g.pod("p" + strconv.Itoa(i))
		var obj any = pod
		if i%9 == 4 {
			obj = &appsv1.Deployment{
				TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
				ObjectMeta: metav1.ObjectMeta{Name: "d" + strconv.Itoa(i), Namespace: pod.Namespace, Labels: pod.Labels},
				Spec: appsv1.DeploymentSpec{
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}},
					Template: corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec},
				},
			}
		}
		b, err := yaml.Marshal(obj)
		if err != nil {
			fail(err)
		}
		w.WriteString("---\n")
		w.Write(b)
	}
	if err := w.Flush(); err != nil {
		fail(err)
	}
	if *inspect != "" {
		var cs []map[string]any
		for i := 0; i < *n/5+1; i++ {
			cs = append(cs, g.container("c"+strconv.Itoa(i)))
		}
		b, err := json.MarshalIndent(cs, "", " ")
		if err != nil {
			fail(err)
		}
		if err := os.WriteFile(*inspect, b, 0o644); err != nil {
			fail(err)
		}
	}
}

type gen struct{ r *rand.Rand }

func (g gen) coin() bool              { return g.r.IntN(2) == 0 }
func (g gen) one(xs ...string) string { return xs[g.r.IntN(len(xs))] }

func (g gen) maybeBool() *bool {
	switch g.r.IntN(3) {
	case 0:
		return nil
	case 1:
		return ptr(true)
	}
	return ptr(false)
}

func (g gen) maybeID() *int64 {
	switch g.r.IntN(4) {
	case 0:
		return nil
	case 1:
		return ptr(int64(0))
	case 2:
		return ptr(int64(1000))
	}
	return ptr(int64(65532))
}

func (g gen) maybeSeccomp() *corev1.SeccompProfile {
	switch g.r.IntN(4) {
	case 0:
		return nil
	case 1:
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	case 2:
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr("profiles/agent.json")}
	}
	return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
}

func (g gen) maybeSELinux() *corev1.SELinuxOptions {
	if g.r.IntN(4) != 0 {
		return nil
	}
	return &corev1.SELinuxOptions{Type: g.one("", "container_t", "spc_t"), User: g.one("", "", "system_u"), Role: g.one("", "", "system_r")}
}

func (g gen) maybeAppArmor() *corev1.AppArmorProfile {
	switch g.r.IntN(4) {
	case 0:
		return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
	case 1:
		return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
	}
	return nil
}

func (g gen) pod(name string) *corev1.Pod {
	labels := map[string]string{"app": name}
	if g.r.IntN(4) != 0 {
		labels["sandbox"] = g.one("true", "true", "false")
	}
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.one("sandboxes", "sandboxes", "agents", "default"), Labels: labels},
	}
	if g.coin() {
		// At most one unconfined: before the rows, several were listed in
		// Go's map order, which no two runs need share.
		pod.Annotations = map[string]string{}
		unconfined := false
		for _, c := range []string{"agent", "browser", "init"} {
			if g.coin() {
				v := g.one("unconfined", "runtime/default")
				if v == "unconfined" && unconfined {
					v = "runtime/default"
				}
				unconfined = unconfined || v == "unconfined"
				pod.Annotations["container.apparmor.security.beta.kubernetes.io/"+c] = v
			}
		}
		if g.coin() {
			pod.Annotations["note"] = "x"
		}
	}
	ps := &pod.Spec
	if g.coin() {
		ps.RuntimeClassName = ptr(g.one("kata", "gvisor", "runc"))
	}
	ps.AutomountServiceAccountToken = g.maybeBool()
	ps.HostNetwork, ps.HostPID, ps.HostIPC = g.r.IntN(6) == 0, g.r.IntN(6) == 0, g.r.IntN(6) == 0
	if g.r.IntN(5) != 0 {
		psc := &corev1.PodSecurityContext{
			RunAsNonRoot: g.maybeBool(), RunAsUser: g.maybeID(), RunAsGroup: g.maybeID(), FSGroup: g.maybeID(),
			SeccompProfile: g.maybeSeccomp(), SELinuxOptions: g.maybeSELinux(), AppArmorProfile: g.maybeAppArmor(),
		}
		for range g.r.IntN(3) {
			psc.SupplementalGroups = append(psc.SupplementalGroups, int64(g.r.IntN(3)*500))
		}
		for range g.r.IntN(3) {
			psc.Sysctls = append(psc.Sysctls, corev1.Sysctl{Name: g.one("net.ipv4.tcp_syncookies", "kernel.msgmax", "net.core.somaxconn"), Value: "1"})
		}
		ps.SecurityContext = psc
	}
	for i := range 1 + g.r.IntN(3) {
		ps.Containers = append(ps.Containers, g.ctr(g.one("agent", "browser", "sidecar")+strconv.Itoa(i)))
	}
	for i := range g.r.IntN(2) {
		ps.InitContainers = append(ps.InitContainers, g.ctr("init"+strconv.Itoa(i)))
	}
	if g.r.IntN(5) == 0 {
		ps.EphemeralContainers = append(ps.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon(g.ctr("debug"))})
	}
	for i := range g.r.IntN(4) {
		ps.Volumes = append(ps.Volumes, g.volume("v"+strconv.Itoa(i)))
	}
	return pod
}

func (g gen) ctr(name string) corev1.Container {
	c := corev1.Container{Name: name, Image: g.one("registry.example/a:1", "registry.example/a@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "busybox")}
	if g.r.IntN(5) != 0 {
		sc := &corev1.SecurityContext{
			RunAsNonRoot: g.maybeBool(), RunAsUser: g.maybeID(), RunAsGroup: g.maybeID(), SeccompProfile: g.maybeSeccomp(),
			AllowPrivilegeEscalation: g.maybeBool(), ReadOnlyRootFilesystem: g.maybeBool(), Privileged: g.maybeBool(),
			SELinuxOptions: g.maybeSELinux(), AppArmorProfile: g.maybeAppArmor(),
		}
		if g.coin() {
			sc.Capabilities = &corev1.Capabilities{}
			if g.coin() {
				sc.Capabilities.Drop = []corev1.Capability{corev1.Capability(g.one("ALL", "all", "NET_RAW"))}
			}
			for range g.r.IntN(3) {
				sc.Capabilities.Add = append(sc.Capabilities.Add, corev1.Capability(g.one("NET_ADMIN", "SYS_ADMIN", "CAP_CHOWN", "NET_BIND_SERVICE")))
			}
		}
		if g.r.IntN(6) == 0 {
			sc.ProcMount = ptr(corev1.UnmaskedProcMount)
		}
		c.SecurityContext = sc
	}
	for i := range g.r.IntN(3) {
		p := corev1.ContainerPort{ContainerPort: int32(8080 + i)}
		if g.coin() {
			p.HostPort = int32(9000 + i)
		}
		c.Ports = append(c.Ports, p)
	}
	if g.coin() {
		c.Resources.Limits = corev1.ResourceList{}
		if g.coin() {
			c.Resources.Limits["memory"] = resource.MustParse(g.one("1Gi", "6Gi", "8Gi"))
		}
		if g.coin() {
			c.Resources.Limits["ephemeral-storage"] = resource.MustParse(g.one("1Gi", "8Gi", "20Gi"))
		}
	}
	for range g.r.IntN(4) {
		ev := corev1.EnvVar{Name: g.one("GITHUB_TOKEN", "DB_PASSWORD", "HOME", "API_KEY", "PLAIN")}
		switch g.r.IntN(4) {
		case 0:
			ev.Value = g.one("broker", "s3cr3t", "")
		case 1:
			ev.ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}
		case 2:
			ev.ValueFrom = &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "k"}}
		default:
			ev.Value = "v"
		}
		c.Env = append(c.Env, ev)
	}
	if g.r.IntN(5) == 0 {
		c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "all"}}}}
	}
	return c
}

func (g gen) volume(name string) corev1.Volume {
	v := corev1.Volume{Name: name}
	switch g.r.IntN(4) {
	case 0:
		v.HostPath = &corev1.HostPathVolumeSource{Path: g.one("/var/run/docker.sock", "/etc", "/data")}
	case 1:
		v.EmptyDir = &corev1.EmptyDirVolumeSource{}
		if g.coin() {
			v.EmptyDir.SizeLimit = ptr(resource.MustParse(g.one("1Gi", "8Gi", "64Gi")))
		}
		if g.coin() {
			v.EmptyDir.Medium = corev1.StorageMediumMemory
		}
	case 2:
		v.Projected = &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}
	default:
		v.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}
	}
	return v
}

// container is one `docker inspect` entry with the fields the rules read.
func (g gen) container(name string) map[string]any {
	var opts []string
	for range g.r.IntN(4) {
		opts = append(opts, g.one("seccomp=unconfined", "apparmor=unconfined", "no-new-privileges", "no-new-privileges:true", "seccomp:unconfined", "label=disable"))
	}
	var env []string
	for range g.r.IntN(5) {
		env = append(env, g.one("HTTP_PROXY=http://egress-proxy.sandbox-system:3128", "http_proxy=http://other:3128", "HTTPS_PROXY=http://egress-proxy.sandbox-system:3128/",
			"https_proxy=http://egress-proxy.sandbox-system:3128", "GITHUB_TOKEN=ghp_x", "API_KEY=broker", "PATH=/bin"))
	}
	var binds []string
	for range g.r.IntN(3) {
		binds = append(binds, g.one("/var/run/docker.sock:/var/run/docker.sock", "/home/u/.aws:/root/.aws:ro", "/etc:/host/etc", "data:/data", "/srv/creds:/run/creds:ro", "/root/.ssh/id:/k:ro"))
	}
	hc := map[string]any{
		"Binds": binds, "NetworkMode": g.one("none", "bridge", "default", "sandprobe-drift-internal", "host"),
		"CapAdd": g.some("NET_ADMIN", "CAP_SYS_ADMIN", "chown"), "CapDrop": g.some("ALL", "all", "NET_RAW"), "SecurityOpt": opts,
		"Privileged": g.r.IntN(5) == 0, "ReadonlyRootfs": g.coin(),
		"PidMode": g.one("", "", "host"), "IpcMode": g.one("", "private", "host", "container:x"), "UTSMode": g.one("", "host"), "UsernsMode": g.one("", "host"),
		"Runtime": g.one("runc", "runsc", "kata", ""), "Memory": g.r.IntN(3) * (3 << 30), "NanoCpus": g.r.IntN(3) * 500000000,
		"CpuQuota": g.r.IntN(2) * 150000, "CpuPeriod": 0,
		"Tmpfs": map[string]string{g.one("/tmp", "/workspace", "/x"): g.one("", "size=64m", "rw,size=1g")},
	}
	if g.coin() {
		hc["PidsLimit"] = g.r.IntN(3) * 256
	}
	if g.coin() {
		hc["Devices"] = []map[string]string{{"PathOnHost": "/dev/kvm", "PathInContainer": "/dev/kvm"}}
	}
	networks := map[string]any{}
	for range g.r.IntN(3) {
		networks[g.one("bridge", "sandprobe-drift-internal", "other")] = map[string]any{}
	}
	return map[string]any{
		"Id": fmt.Sprintf("%064x", g.r.Uint64()), "Name": "/" + name, "Image": "sha256:abc",
		"Config": map[string]any{
			"User": g.one("", "0", "root", "65532", "65532:65532", "1000:1000"), "Env": env,
			"Image": g.one("registry.example/a:1", "registry.example/a@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
		},
		"HostConfig":      hc,
		"NetworkSettings": map[string]any{"Networks": networks},
	}
}

func (g gen) some(xs ...string) []string {
	var out []string
	for _, x := range xs {
		if g.r.IntN(3) == 0 {
			out = append(out, x)
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "randpods:", err)
	os.Exit(1)
}
