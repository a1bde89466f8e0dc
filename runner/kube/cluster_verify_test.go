package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/report"
)

// verify-image --backend kube on the real cluster: the image runs as a pod
// shaped like a sandbox of the policy (runtime class, security context,
// volumes, limits, labels, no token) in the namespace the pipeline names,
// with the probe copied in by the init container, and reports as the
// Docker backend does.

// verifyResult is one `sandprobe verify-image --backend kube`.
type verifyResult struct {
	runResult
	// verdicts is check subject → status, over the whole report.
	verdicts map[string]report.Status
}

func (e *clusterEnv) verify(t testing.TB, policyDoc, image string, args ...string) verifyResult {
	t.Helper()
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(policyDoc), 0o644); err != nil {
		t.Fatal(err)
	}
	jsonFile := filepath.Join(dir, "report.json")
	argv := append([]string{"verify-image", "--backend", "kube", "--kubeconfig", e.kubeconfig, "--namespace", clusterNS, "--policy", pol,
		"--image", image, "--probe-image", probeImageRef, "--image-pull-policy", "Never", "--json", jsonFile, "-o", "text"}, args...)
	cmd := exec.Command(e.bin, argv...)
	out, err := cmd.CombinedOutput()
	r := verifyResult{runResult: runResult{stderr: string(out)}, verdicts: map[string]report.Status{}}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatal(err)
	}
	if b, err := os.ReadFile(jsonFile); err == nil {
		if err := json.Unmarshal(b, &r.report); err != nil {
			t.Fatalf("JSON report: %v", err)
		}
	}
	for _, f := range r.report.Findings {
		r.verdicts[f.Name()] = f.Status
	}
	return r
}

// failing lists a report's failing and error findings with their fix.
func (r verifyResult) failing() []string {
	var out []string
	for _, f := range r.report.Findings {
		if f.Status == report.Fail || f.Status == report.Error {
			out = append(out, fmt.Sprintf("%s %s: %s (fix: %s)", f.Name(), f.Status, f.Actual, f.Fix))
		}
	}
	slices.Sort(out)
	return out
}

// verifyPolicy is a gVisor sandbox whose image must run git by name.
const verifyPolicy = `apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: verify-test}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  runtime: {classNames: [gvisor]}
  identity: {uid: 65532, gid: 65532, fsGroup: 65532}
  filesystem: {readOnlyRoot: true, writable: [/workspace, /tmp], emptyAtStart: [/workspace]}
  capabilities: []
  noNewPrivileges: true
  seccomp: RuntimeDefault
  serviceAccountToken: absent
  image: {tools: [{name: git, args: [version], timeout: 20s}]}
  resources: {limits: {memory: 256Mi, ephemeral-storage: 64Mi}}
  probe: {deadline: 90s}
`

// TestClusterVerifyImage: an image that holds its tool passes under gVisor,
// one without it fails naming the tool, a runtime class the policy does not
// declare is a could-not-run, and no pod is left behind either way. Here
// "git" is the sandprobe binary itself (`version` exits 0): what matters
// is that the pod finds it by name under the sandbox's constraints.
func TestClusterVerifyImage(t *testing.T) {
	e := newClusterEnv(t)
	const (
		good  = "sandprobe.local/verify-good:kube-test"
		nogit = "sandprobe.local/verify-nogit:kube-test"
	)
	testenv.ClusterImage(t, good, rootfs(t, map[string]string{"/usr/bin/git": e.bin}, map[string]string{"/etc/os-release": "ID=verify-good"}))
	testenv.ClusterImage(t, nogit, rootfs(t, nil, map[string]string{"/etc/os-release": "ID=verify-nogit"}))
	// Images whose ENTRYPOINT verify-image reads from a registry: one that
	// exits 0, one that writes to the read-only root.
	reg := registryHost(t)
	entryOK := e.registryImage(t, reg, "verify-entry-ok", map[string]string{"/usr/bin/git": e.bin}, []string{"/usr/bin/git", "version"})
	entryRO := e.registryImage(t, reg, "verify-entry-ro", map[string]string{"/usr/bin/git": e.bin}, []string{"/usr/bin/git", "cache", "seal", "/tmp", "--manifest", "/app.seal"})
	// An image whose registry has gone: its entrypoint cannot be read.
	gone := registryHost(t)
	noRegistry := e.registryImage(t, gone, "verify-no-registry", map[string]string{"/usr/bin/git": e.bin}, []string{"/usr/bin/git", "version"})
	closeRegistry(t, gone)
	// The other images are in no registry: their entrypoint is left out, so
	// that verify-image asks nothing of the network but loopback.
	noEntry := []string{"--entrypoint-timeout", "0"}
	cases := []struct {
		name, image string
		args        []string
		code        int
		want        map[string]report.Status
		says        string // in the report's text
	}{
		{"conformant under gvisor", good, noEntry, report.ExitOK,
			map[string]report.Status{"tools.run git": report.Pass, "runtime.isolation gvisor": report.Pass}, ""},
		{"tool missing", nogit, noEntry, report.ExitNonConformant,
			map[string]report.Status{"tools.run git": report.Fail}, "install git in the image"},
		{"entrypoint starts", entryOK, nil, report.ExitOK,
			map[string]report.Status{"image.entrypoint /usr/bin/git": report.Pass, "tools.run git": report.Pass}, ""},
		{"entrypoint writes the read-only root", entryRO, nil, report.ExitNonConformant,
			map[string]report.Status{"image.entrypoint /usr/bin/git": report.Fail}, "/app.seal"},
		{"entrypoint left out", entryRO, []string{"--entrypoint-timeout", "0"}, report.ExitOK, nil, ""},
		{"no registry to read the entrypoint from", noRegistry, nil, report.ExitOK, nil, "image.entrypoint not tried"},
		{"runtime class not declared", good, append([]string{"--runtime-class", "runc"}, noEntry...), report.ExitCouldNotRun, nil, "not one of the policy's spec.runtime.classNames"},
		{"no namespace is bad input", good, append([]string{"--namespace", ""}, noEntry...), report.ExitBadInput, nil, "--namespace is required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			r := e.verify(t, verifyPolicy, c.image, c.args...)
			t.Logf("exit %d in %.1fs", r.code, time.Since(start).Seconds())
			if r.code != c.code {
				t.Errorf("exit %d, want %d:\n%s\n%s", r.code, c.code, strings.Join(r.failing(), "\n"), r.stderr)
			}
			for check, want := range c.want {
				if got := r.verdicts[check]; got != want {
					t.Errorf("%s: %q, want %q\n%s", check, got, want, strings.Join(r.failing(), "\n"))
				}
			}
			if c.says != "" && !strings.Contains(r.stderr, c.says) {
				t.Errorf("the report does not say %q:\n%s", c.says, r.stderr)
			}
			if left := e.probeObjects(t); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

// clusterCopy puts an image of the test Docker engine into the cluster's
// containerd (which reaches no registry), once per image id: its file
// system, exported from a container of it, becomes a one-layer image.
func (e *clusterEnv) clusterCopy(t testing.TB, host, image string) string {
	t.Helper()
	docker := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("docker", args...)
		cmd.Env = append(os.Environ(), "DOCKER_HOST="+host)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("docker %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	id := strings.TrimPrefix(docker("image", "inspect", "-f", "{{.Id}}", image), "sha256:")
	name := strings.SplitN(strings.TrimPrefix(image, "sandprobe/"), ":", 2)[0]
	ref := "sandprobe.local/" + name + ":" + id[:12]
	ls, _ := exec.Command("ctr", "--address", "/run/sandprobe-cluster/containerd/containerd.sock", "-n", "k8s.io", "images", "ls", "-q").Output()
	if slices.Contains(strings.Fields(string(ls)), ref) {
		return ref
	}
	tar := filepath.Join(t.TempDir(), name+".tar")
	cid := docker("create", image, "/bin/true")
	defer docker("rm", cid)
	docker("export", "-o", tar, cid)
	testenv.ClusterImage(t, ref, tar)
	return ref
}

// TestClusterVerifyImageDebian: the Debian + Chromium test image and its
// sabotaged variants (hack/images), verified under gVisor both on the
// cluster (--backend kube, runtime class gvisor) and on the Docker engine
// (runsc), with fixtures/image-policy.yaml. Each variant fails naming its
// cause on the cluster; every verdict that differs between the two
// backends is listed, and only the known differences are allowed.
func TestClusterVerifyImageDebian(t *testing.T) {
	e := newClusterEnv(t)
	host := testenv.DockerHost(t)
	testenv.DockerRuntime(t, host, "runsc-nonet")
	policyDoc, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "fixtures", "image-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		image string
		code  int
		fails string // a check that must fail on the cluster
	}{
		{"sandprobe/debian-chromium:test", report.ExitOK, ""},
		{"sandprobe/debian-nogit:test", report.ExitNonConformant, "tools.run git"},
		{"sandprobe/debian-nochromium:test", report.ExitNonConformant, "browser.screenshot"},
	}
	for _, c := range cases {
		t.Run(strings.TrimPrefix(c.image, "sandprobe/"), func(t *testing.T) {
			testenv.DockerImage(t, host, c.image)
			ref := e.clusterCopy(t, host, c.image)
			start := time.Now()
			// Their entrypoint is Docker's to try: they are in no registry.
			k := e.verify(t, string(policyDoc), ref, "--env", "HOME=/tmp", "--entrypoint-timeout", "0")
			t.Logf("kube: exit %d in %.1fs", k.code, time.Since(start).Seconds())
			if k.code != c.code {
				t.Errorf("kube: exit %d, want %d:\n%s\n%s", k.code, c.code, strings.Join(k.failing(), "\n"), k.stderr)
			}
			if c.fails != "" && !slices.ContainsFunc(k.failing(), func(s string) bool { return strings.HasPrefix(s, c.fails) }) {
				t.Errorf("kube: %s does not fail:\n%s", c.fails, strings.Join(k.failing(), "\n"))
			}
			if left := e.probeObjects(t); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
			d := e.verifyDocker(t, host, string(policyDoc), c.image)
			for _, diff := range verdictDiff(d.verdicts, k.verdicts) {
				t.Logf("docker vs kube: %s", diff)
			}
		})
	}
}

// verifyDocker is the same verification on the Docker engine under runsc.
func (e *clusterEnv) verifyDocker(t testing.TB, host, policyDoc, image string) verifyResult {
	t.Helper()
	dir := t.TempDir()
	pol, jsonFile := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "report.json")
	if err := os.WriteFile(pol, []byte(policyDoc), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(e.bin, "verify-image", "--policy", pol, "--image", image, "--runtime", "runsc-nonet", "--runtime-class", "gvisor",
		"--env", "HOME=/tmp", "--docker-host", host, "--json", jsonFile, "-o", "text")
	out, _ := cmd.CombinedOutput()
	r := verifyResult{runResult: runResult{stderr: string(out)}, verdicts: map[string]report.Status{}}
	b, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatalf("docker: no report: %v\n%s", err, out)
	}
	if err := json.Unmarshal(b, &r.report); err != nil {
		t.Fatal(err)
	}
	for _, f := range r.report.Findings {
		r.verdicts[f.Name()] = f.Status
	}
	return r
}

// verdictDiff lists the checks whose verdicts differ between two reports.
func verdictDiff(docker, kube map[string]report.Status) []string {
	var out []string
	for name, d := range docker {
		if k := kube[name]; k != d {
			out = append(out, fmt.Sprintf("%s: docker %s, kube %q", name, d, k))
		}
	}
	for name, k := range kube {
		if _, ok := docker[name]; !ok {
			out = append(out, fmt.Sprintf("%s: docker (none), kube %s", name, k))
		}
	}
	slices.Sort(out)
	return out
}

// registryHost serves a registry on loopback (go-containerregistry's, in
// memory) for the test's lifetime: verify-image --backend kube reads an
// image's ENTRYPOINT and CMD from its registry.
func registryHost(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(registry.New())
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	registries.Store(host, srv)
	return host
}

// registries are the test registries by host, for closeRegistry.
var registries sync.Map

// closeRegistry stops a registry: its port then refuses.
func closeRegistry(t testing.TB, host string) {
	t.Helper()
	if srv, ok := registries.LoadAndDelete(host); ok {
		srv.(*httptest.Server).Close()
	}
}

// registryImage makes an image under reg/NAME:kube-test twice over: its
// root (files copied from the host) in the cluster's containerd, which the
// pod runs, and its configuration (the ENTRYPOINT) in the registry, which
// verify-image reads. The cluster reaches no registry, so the pod's image
// comes from containerd (pull policy Never).
func (e *clusterEnv) registryImage(t testing.TB, reg, imageName string, files map[string]string, entrypoint []string) string {
	t.Helper()
	ref := reg + "/" + imageName + ":kube-test"
	img, err := mutate.Config(empty.Image, v1.Config{Entrypoint: entrypoint, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	testenv.ClusterImage(t, ref, rootfs(t, files, map[string]string{"/etc/os-release": "ID=" + imageName}))
	return ref
}
