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
			out = append(out, fmt.Sprintf("%s %s: %s (evidence: %s; fix: %s)", f.Name(), f.Status, f.Actual, f.Evidence, f.Fix))
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

// TestClusterVerifyImageRuntimeClass: an image whose tool starts under
// runc but not under gVisor (built for a newer kernel than gVisor's 4.4.0:
// "FATAL: kernel too old") passes on the runc class and fails, naming the
// cause, on the class the sandboxes run under.
func TestClusterVerifyImageRuntimeClass(t *testing.T) {
	e := newClusterEnv(t)
	misbehave := filepath.Join(t.TempDir(), "misbehave")
	build := exec.Command("go", "build", "-o", misbehave, "./runner/kube/testdata/misbehave")
	build.Dir = testenv.ModuleRoot(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build misbehave: %v\n%s", err, out)
	}
	const image = "sandprobe.local/verify-newkernel:kube-test"
	testenv.ClusterImage(t, image, rootfs(t, map[string]string{"/usr/bin/git": misbehave}, map[string]string{"/misbehave.mode": "newkernel 5.4"}))
	doc := strings.Replace(verifyPolicy, "runtime: {classNames: [gvisor]}", "runtime: {classNames: [gvisor, runc], isolation: {runc: none}}", 1)
	for _, c := range []struct {
		class string
		code  int
		git   report.Status
	}{
		{"runc", report.ExitOK, report.Pass},
		{"gvisor", report.ExitNonConformant, report.Fail},
	} {
		t.Run(c.class, func(t *testing.T) {
			r := e.verify(t, doc, image, "--runtime-class", c.class, "--entrypoint-timeout", "0")
			if r.code != c.code || r.verdicts["tools.run git"] != c.git {
				t.Errorf("exit %d, tools.run git %q; want %d, %s:\n%s\n%s", r.code, r.verdicts["tools.run git"], c.code, c.git, strings.Join(r.failing(), "\n"), r.stderr)
			}
			if c.git == report.Fail && !strings.Contains(strings.Join(r.failing(), "\n"), "kernel too old") {
				t.Errorf("the failure does not name the cause:\n%s", strings.Join(r.failing(), "\n"))
			}
			if left := e.probeObjects(t); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}
