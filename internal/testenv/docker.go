package testenv

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// PrivateDockerHost is the test daemon hack/docker/up.sh starts.
const PrivateDockerHost = "unix:///run/sandprobe-docker/docker.sock"

// DockerHost returns the address of a Docker engine that answers: $DOCKER_HOST
// when set, else the private test daemon. A missing engine is Missing.
func DockerHost(t testing.TB) string {
	t.Helper()
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = PrivateDockerHost
	}
	if _, err := dockerGet(host, "/_ping"); err != nil {
		Missing(t, fmt.Sprintf("no Docker engine at %s (%v): run hack/docker/up.sh", host, err))
	}
	return host
}

// DockerImage makes sure an image is on the engine; the Debian test images
// take minutes to build, so a missing one is Missing, with the command.
func DockerImage(t testing.TB, host, ref string) {
	t.Helper()
	if _, err := dockerGet(host, "/images/"+url.PathEscape(ref)+"/json"); err != nil {
		Missing(t, fmt.Sprintf("image %s is not on %s (%v): run hack/images/all.sh", ref, host, err))
	}
}

// DockerRuntime makes sure the engine has a runtime (runsc-nonet is gVisor).
func DockerRuntime(t testing.TB, host, name string) {
	t.Helper()
	body, err := dockerGet(host, "/info")
	if err != nil {
		t.Fatalf("docker info: %v", err)
	}
	if !strings.Contains(body, `"`+name+`":`) {
		Missing(t, fmt.Sprintf("the engine at %s has no runtime %q: start it with hack/docker/up.sh", host, name))
	}
}

// ScratchImage builds (or finds unchanged) a scratch image holding only the
// static sandprobe binary, with hack/images/scratch.sh.
func ScratchImage(t testing.TB, host, ref string) {
	t.Helper()
	script := filepath.Join(ModuleRoot(t), "hack", "images", "scratch.sh")
	if _, err := os.Stat(script); err != nil {
		Missing(t, "hack/images/scratch.sh is missing (merge the env-docker branch)")
	}
	cmd := exec.Command("bash", script, ref, Binary(t))
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+host)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scratch.sh %s: %v\n%s", ref, err, out)
	}
}

// dockerGet sends one GET to the engine's API over its unix socket.
func dockerGet(host, path string) (string, error) {
	sock, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		return "", fmt.Errorf("only unix:// engines are supported by the tests, got %s", host)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	resp, err := c.Get("http://docker" + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(b.String()))
	}
	return b.String(), nil
}
