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
		// /tmp is an emptyDir on the cluster (mode 0777 whatever the image
		// says): the sandbox really can write it, unlike under Docker's runc.
		{"sandprobe/debian-tmp0755:test", report.ExitOK, ""},
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
