package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/joshdk/go-junit"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

// TestVerifyImageExitCodes runs the built binary the way a pipeline does and
// checks the exit code, the JUnit file and that nothing but the report
// reaches stdout.
func TestVerifyImageExitCodes(t *testing.T) {
	testenv.RequireRoot(t)
	host := testenv.DockerHost(t)
	bin := testenv.Binary(t)
	testenv.ScratchImage(t, host, "sandprobe/verify-scratch:test")
	root := testenv.ModuleRoot(t)
	scratchPolicy := filepath.Join(root, "fixtures", "scratch-policy.yaml")
	imagePolicy := filepath.Join(root, "fixtures", "image-policy.yaml")
	cases := []struct {
		name     string
		args     []string
		needs    string // an image from hack/images/all.sh
		code     int
		junitHas string // a testcase name, failure or error text in the JUnit file
	}{
		{"conformant scratch image", []string{"--image", "sandprobe/verify-scratch:test", "--policy", scratchPolicy, "--runtime", "runc", "--entrypoint-timeout", "0"}, "", 0, "fs.root-readonly"},
		{"gvisor policy under runc", []string{"--image", "sandprobe/debian-chromium:test", "--policy", imagePolicy, "--runtime", "runc", "--runtime-class", "gvisor", "--env", "HOME=/tmp"},
			"sandprobe/debian-chromium:test", 1, "it is a plain container, not isolated"},
		{"image missing", []string{"--image", "sandprobe/no-such-image:test", "--policy", scratchPolicy}, "", 3, "image-missing"},
		{"no image", []string{"--policy", scratchPolicy}, "", 2, ""},
		{"bad --env", []string{"--image", "x", "--policy", scratchPolicy, "--env", "NOEQUALS"}, "", 2, ""},
		// run --backend docker reuses the backend (network checks included: none here).
		{"run --backend docker", []string{"--backend", "docker", "--image", "sandprobe/verify-scratch:test", "--policy", scratchPolicy, "--runtime", "runc", "--entrypoint-timeout", "0"}, "", 0, "caps.sets"},
		// --join a sandbox that is not there: could not run, never a pass.
		{"run --join a missing container", []string{"--backend", "docker", "--join", "sp-no-such-sandbox", "--policy", scratchPolicy}, "", 3, "sp-no-such-sandbox to join does not exist"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.needs != "" {
				testenv.DockerImage(t, host, c.needs)
			}
			junitFile := filepath.Join(t.TempDir(), "out.xml")
			sub := "verify-image"
			if c.args[0] == "--backend" {
				sub = "run"
			}
			cmd := exec.Command(bin, append([]string{sub, "--junit", junitFile}, c.args...)...)
			cmd.Env = append(os.Environ(), "DOCKER_HOST="+host)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, c.code, stdout.String(), stderr.String())
			}
			if c.junitHas == "" {
				return
			}
			data, err := os.ReadFile(junitFile)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := junit.Ingest(data); err != nil {
				t.Fatalf("JUnit does not parse: %v", err)
			}
			if !strings.Contains(string(data), c.junitHas) {
				t.Errorf("JUnit lacks %q:\n%s", c.junitHas, data)
			}
			if strings.Contains(stdout.String(), "\r") {
				t.Error("progress leaked to stdout")
			}
		})
	}
}
