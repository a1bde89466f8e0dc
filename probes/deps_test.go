package probes

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestDependencies holds the line STYLE.md draws: the probe runs in a
// hostile, read-only box, so the package pulls in no Kubernetes client, no
// Docker client, no cron (creds.scope speaks to the API server
// with net/http and encoding/json).
func TestDependencies(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"k8s.io/", "sigs.k8s.io/", "github.com/moby/", "github.com/docker/", "github.com/robfig/cron"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("probes depends on %s", dep)
			}
		}
	}
}
