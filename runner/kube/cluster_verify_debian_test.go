package kube

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/report"
)

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
	exported, root := filepath.Join(t.TempDir(), "export.tar"), t.TempDir()
	cid := docker("create", image, "/bin/true")
	defer docker("rm", cid)
	docker("export", "-o", exported, cid)
	unpack(t, exported, root)
	os.Remove(exported)
	testenv.ClusterImage(t, ref, root)
	return ref
}

// unpack extracts a file system tar into a directory, leaving out /dev
// (docker export's device nodes: the runtime gives every container its
// own /dev). The image builder takes a directory with hard links (as
// separate files) and streams it from disk; owners are not kept.
func unpack(t testing.TB, src, dir string) {
	t.Helper()
	if out, err := exec.Command("tar", "-C", dir, "-xf", src, "--exclude=dev/*").CombinedOutput(); err != nil {
		t.Fatalf("unpack %s: %v\n%s", src, err, out)
	}
}

// TestClusterVerifyImageDebian: the Debian + Chromium test image and its
// sabotaged variants (hack/images), verified under gVisor both on the
// cluster (--backend kube, runtime class gvisor) and on the Docker engine
// (runsc), with fixtures/image-policy.yaml. On the cluster each image fails
// exactly the checks its sabotage breaks, plus one the cluster's runtime
// breaks for all of them: hack/cluster's runsc (20221219) runs with
// --oci-seccomp, which answers clone3 with EPERM where the RuntimeDefault
// profile says ENOSYS (google/gvisor#14688), so glibc's posix_spawn fails
// and Chromium cannot start its crash handler: a true verdict (a sandbox
// of this policy there cannot run the browser), named with that cause.
// Under gVisor's default (RuntimeClass gvisor-default, no --oci-seccomp)
// the Debian + Chromium image passes every check.
// Every verdict that differs between the backends is listed; a difference
// outside the known ones fails the test.
func TestClusterVerifyImageDebian(t *testing.T) {
	e := newClusterEnv(t)
	host := testenv.DockerHost(t)
	testenv.DockerRuntime(t, host, "runsc-nonet")
	policyDoc, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "fixtures", "image-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const browserEPERM = "browser.screenshot launch" // clone3 answered EPERM: the cluster's runsc
	cases := []struct {
		image string
		fails []string // exactly the checks that fail on the cluster
	}{
		{"sandprobe/debian-chromium:test", []string{browserEPERM}},
		{"sandprobe/debian-nogit:test", []string{browserEPERM, "tools.run git"}},
		{"sandprobe/debian-nochromium:test", []string{"browser.screenshot locate"}},
		// built for root: git is mode 0700 root:root, uid 65532 cannot run it
		{"sandprobe/debian-rootonly:test", []string{browserEPERM, "tools.run git"}},
		// /tmp is an emptyDir on the cluster (mode 0777 whatever the image
		// says): the sandbox really can write it.
		{"sandprobe/debian-tmp0755:test", []string{browserEPERM}},
	}
	for _, c := range cases {
		t.Run(strings.TrimPrefix(c.image, "sandprobe/"), func(t *testing.T) {
			testenv.DockerImage(t, host, c.image)
			ref := e.clusterCopy(t, host, c.image)
			start := time.Now()
			// Their entrypoint is Docker's to try: they are in no registry.
			k := e.verify(t, string(policyDoc), ref, "--env", "HOME=/tmp", "--entrypoint-timeout", "0")
			t.Logf("kube: exit %d in %.1fs", k.code, time.Since(start).Seconds())
			var failed []string
			for _, f := range k.failing() {
				failed = append(failed, f[:strings.Index(f, ": ")])
			}
			want := slices.Clone(c.fails)
			for i := range want {
				want[i] += " fail"
			}
			slices.Sort(want)
			if k.code != report.ExitNonConformant || !slices.Equal(failed, want) {
				t.Errorf("kube: exit %d, failing %v; want exit 1, failing %v:\n%s", k.code, failed, want, strings.Join(k.failing(), "\n"))
			}
			if slices.Contains(c.fails, browserEPERM) && !strings.Contains(strings.Join(k.failing(), "\n"), "clone3") {
				t.Errorf("kube: the browser failure does not name clone3:\n%s", strings.Join(k.failing(), "\n"))
			}
			if left := e.probeObjects(t); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
			d := e.verifyDocker(t, host, string(policyDoc), c.image, "gvisor")
			for _, diff := range verdictDiff(d.verdicts, k.verdicts) {
				t.Logf("docker vs kube: %s", diff)
				if !knownDifference(diff) {
					t.Errorf("docker vs kube: %s is no known difference between the backends", diff)
				}
			}
		})
	}
	t.Run("debian-chromium:test under gvisor-default", func(t *testing.T) {
		e.verifyGVisorDefault(t, host, string(policyDoc))
	})
}

// verifyGVisorDefault: the same image under gVisor's default, as GKE
// Sandbox runs it (RuntimeClass gvisor-default: runsc without
// --oci-seccomp, the Sentry's own host filter as the boundary), with the
// policy saying so (spec.seccomp: Unconfined, the fix caps.seccomp names
// there). Nothing turns clone3's ENOSYS into EPERM, so Chromium starts and
// writes its screenshot: every check passes, and the two backends agree
// but for what only a pod or only the engine can say.
func (e *clusterEnv) verifyGVisorDefault(t *testing.T, host, policyDoc string) {
	const image = "sandprobe/debian-chromium:test"
	doc := strings.NewReplacer("classNames: [gvisor]", "classNames: [gvisor-default]", "seccomp: RuntimeDefault", "seccomp: Unconfined").Replace(policyDoc)
	if !strings.Contains(doc, "[gvisor-default]") || !strings.Contains(doc, "seccomp: Unconfined") {
		t.Fatalf("fixtures/image-policy.yaml changed shape:\n%s", policyDoc)
	}
	testenv.DockerImage(t, host, image)
	ref := e.clusterCopy(t, host, image)
	k := e.verify(t, doc, ref, "--env", "HOME=/tmp", "--entrypoint-timeout", "0")
	if k.code != report.ExitOK {
		t.Errorf("kube: exit %d, want 0; failing:\n%s\n%s", k.code, strings.Join(k.failing(), "\n"), k.stderr)
	}
	if v := k.verdicts["browser.screenshot /tmp"]; v != report.Pass {
		t.Errorf("kube: browser.screenshot /tmp %q, want pass (Chromium wrote its screenshot)", v)
	}
	if left := e.probeObjects(t); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	d := e.verifyDocker(t, host, doc, image, "gvisor-default")
	for _, diff := range verdictDiff(d.verdicts, k.verdicts) {
		t.Logf("docker vs kube: %s", diff)
		if !strings.HasPrefix(diff, "image.entrypoint ") && !strings.HasPrefix(diff, "pod.labels ") {
			t.Errorf("docker vs kube: %s differs under gVisor's default on both", diff)
		}
	}
}

// knownDifference says whether a verdict difference between the Docker
// test engine and the cluster is one the platforms explain: the cluster's
// runsc loads the pod's seccomp profile (--oci-seccomp; the engine's does
// not, so caps.seccomp fails there) and with it refuses clone3 with EPERM
// (the browser); the image's entrypoint is read from the engine, not from
// a registry these images are not in; only a pod carries labels; the
// engine's runc gives /tmp the image directory's mode, an emptyDir does not.
func knownDifference(diff string) bool {
	for _, prefix := range []string{"caps.seccomp:", "browser.screenshot ", "image.entrypoint ", "pod.labels ", "fs.writable /tmp:"} {
		if strings.HasPrefix(diff, prefix) {
			return true
		}
	}
	return false
}

// verifyDocker is the same verification on the Docker engine under runsc.
func (e *clusterEnv) verifyDocker(t testing.TB, host, policyDoc, image, class string) verifyResult {
	t.Helper()
	dir := t.TempDir()
	pol, jsonFile := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "report.json")
	if err := os.WriteFile(pol, []byte(policyDoc), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(e.bin, "verify-image", "--policy", pol, "--image", image, "--runtime", "runsc-nonet", "--runtime-class", class,
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
