package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// HelmBinary finds helm, built from its module into the cache by
// hack/helm/build.sh (seconds when cached, minutes cold). Missing, it is
// built when the environment is required (make test), else the test skips.
func HelmBinary(t testing.TB) string {
	t.Helper()
	script := filepath.Join(ModuleRoot(t), "hack", "helm", "build.sh")
	out, err := exec.Command("bash", script, "--print-bin").Output()
	if err != nil {
		t.Fatalf("hack/helm/build.sh --print-bin: %v", err)
	}
	bin := strings.TrimSpace(string(out))
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv(RequireEnvVar) != "1" {
			Missing(t, "no helm at "+bin+" (hack/helm/build.sh, make helm-env)")
		}
		t.Logf("building helm (hack/helm/build.sh)")
		if out, err := exec.Command("bash", script).CombinedOutput(); err != nil {
			t.Fatalf("hack/helm/build.sh: %v\n%s", err, out)
		}
	}
	return bin
}
