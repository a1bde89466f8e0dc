package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

// TestMakeImageTwice: hack/image.sh (make image) run twice from the same
// commit, into two directories, builds the binaries twice and gives one
// digest. linux/amd64 only: the two-platform index is held to the same
// property with stand-in binaries (internal/image TestReproducible), and
// an arm64 compile of every dependency would cost CI minutes.
func TestMakeImageTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries twice")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var digests, outs []string
	for i := 0; i < 2; i++ {
		out := t.TempDir()
		outs = append(outs, out)
		cmd := exec.Command("bash", filepath.Join(root, "hack/image.sh"))
		cmd.Env = append(os.Environ(), "IMAGE_OUT="+out, "PLATFORMS=linux/amd64", "VERSION=v0.0.0-test", "IMAGE_NAME=sandprobe.test/sandprobe")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hack/image.sh: %v\n%s", err, b)
		}
		d, err := os.ReadFile(filepath.Join(out, "digest"))
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, strings.TrimSpace(string(d)))
		for _, f := range []string{"image.tar", "oci/index.json", "oci/oci-layout", "bin/linux_amd64/sandprobe", "bin/linux_amd64/sandprobe-probe"} {
			if _, err := os.Stat(filepath.Join(out, f)); err != nil {
				t.Errorf("make image left no %s: %v", f, err)
			}
		}
		ver, err := exec.Command(filepath.Join(out, "bin/linux_amd64/sandprobe"), "version").Output()
		if err != nil || !strings.HasPrefix(string(ver), "sandprobe v0.0.0-test (commit ") {
			t.Errorf("the image's sandprobe says %q (%v)", ver, err)
		}
	}
	if !strings.HasPrefix(digests[0], "sha256:") || digests[0] != digests[1] {
		t.Errorf("two builds of one commit: %s and %s", digests[0], digests[1])
	}
	t.Run("docker load", func(t *testing.T) { dockerLoad(t, filepath.Join(outs[0], "image.tar")) })
	t.Run("ctr import", func(t *testing.T) { ctrImport(t, filepath.Join(outs[0], "image.tar"), digests[0]) })
}

const testRef = "sandprobe.test/sandprobe:v0.0.0-test"

// dockerLoad loads the archive into the test Docker engine (Debian's
// 20.10: the manifest.json path) and runs both binaries as the image's
// user, read-only, with no capability and no network.
func dockerLoad(t *testing.T, archive string) {
	host := testenv.DockerHost(t)
	docker := "docker"
	if _, err := os.Stat("/usr/bin/docker"); err == nil {
		docker = "/usr/bin/docker" // the CLI that matches the engine (hack/docker/lib.sh)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(docker, args...)
		cmd.Env = append(os.Environ(), "DOCKER_HOST="+host)
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				stderr = ee.Stderr
			}
			t.Fatalf("docker %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		}
		return string(out)
	}
	if out := run("load", "-i", archive); !strings.Contains(out, testRef) {
		t.Fatalf("docker load: %s", out)
	}
	t.Cleanup(func() { exec.Command(docker, "-H", host, "rmi", "-f", testRef).Run() })
	if got := strings.TrimSpace(run("image", "inspect", testRef, "--format", "{{.Config.User}} {{.Config.Entrypoint}} {{.Os}}/{{.Architecture}}")); got != "65532:65532 [/sandprobe] linux/amd64" {
		t.Errorf("docker image inspect: %s", got)
	}
	for _, bin := range []string{"/sandprobe", "/sandprobe-probe"} {
		out := run("run", "--rm", "--read-only", "--cap-drop", "ALL", "--network", "none", "--entrypoint", bin, testRef, "version")
		if !strings.Contains(out, " v0.0.0-test (commit ") {
			t.Errorf("%s version in the image: %q", bin, out)
		}
	}
}

// ctrImport imports the archive with ctr into a scratch namespace of the
// test Docker engine's containerd: the OCI layout path, named by its
// annotation, stored under the index's digest.
func ctrImport(t *testing.T, archive, digest string) {
	testenv.DockerHost(t)
	const sock = "/run/sandprobe-docker/containerd/containerd.sock"
	if _, err := exec.LookPath("ctr"); err != nil {
		testenv.Missing(t, "no ctr on PATH")
	}
	ctr := func(args ...string) (string, error) {
		out, err := exec.Command("ctr", append([]string{"--address", sock, "-n", "sandprobe-imagetest"}, args...)...).CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		ctr("images", "rm", testRef)
		exec.Command("ctr", "--address", sock, "namespaces", "rm", "sandprobe-imagetest").Run()
	})
	if out, err := ctr("images", "import", archive); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
	out, err := ctr("images", "ls")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, testRef) || !strings.Contains(out, digest) {
		t.Errorf("ctr images ls does not list %s at %s:\n%s", testRef, digest, out)
	}
}
