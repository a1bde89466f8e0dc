package hack

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

// TestRelease runs make release's script for a test version into a temp
// dir, as a user checks a download: `sha256sum -c sha256sums.txt` passes,
// the CLI's SBOM lists k8s.io/client-go at the version go.mod resolves,
// `sandprobe version` prints the version and the commit, and the image's
// digest is recorded. Only linux/amd64 is built here (about 15 s warm; the
// four-platform release takes minutes more, cold; TestReleaseDarwinBuilds
// covers macOS); a version that is not vX.Y.Z is refused with exit 2
// before anything is built.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries and an image")
	}
	for _, tool := range []string{"git", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, tool+" is missing")
		}
	}
	root := testenv.ModuleRoot(t)
	const version = "v0.0.0-test.1"
	out := t.TempDir()
	// The chart needs helm: built into the cache by make test (helm-env);
	// without it (and not required) the release goes without its chart.
	helm, _ := exec.Command("bash", filepath.Join(root, "hack", "helm", "build.sh"), "--print-bin").Output()
	withChart := fileExists(strings.TrimSpace(string(helm))) || os.Getenv(testenv.RequireEnvVar) == "1"
	run := func(v string) ([]byte, error) {
		cmd := exec.Command(filepath.Join(root, "hack", "release.sh"))
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "VERSION="+v, "RELEASE_OUT="+out, "PLATFORMS=linux/amd64")
		if !withChart {
			cmd.Env = append(cmd.Env, "NO_CHART=1")
		}
		return cmd.CombinedOutput()
	}

	if b, err := run("main"); exitCode(err) != 2 || !strings.Contains(string(b), "VERSION must be a semantic version") {
		t.Errorf("VERSION=main: exit %d, want 2 and a one-line reason:\n%s", exitCode(err), b)
	}
	b, err := run(version)
	if err != nil {
		t.Fatalf("hack/release.sh: %v\n%s", err, b)
	}
	dir := filepath.Join(out, version)

	sums := exec.Command("sha256sum", "-c", "sha256sums.txt")
	sums.Dir = dir
	if b, err := sums.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c sha256sums.txt: %v\n%s", err, b)
	}
	listed, err := os.ReadFile(filepath.Join(dir, "sha256sums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{
		"sandprobe-" + version + "-linux-amd64", "sandprobe-probe-" + version + "-linux-amd64",
		"sandprobe-" + version + "-linux-amd64.cdx.json", "sandprobe-" + version + "-image.tar", "image-digest.txt",
	} {
		if !regexp.MustCompile(`(?m)^[0-9a-f]{64}  ` + regexp.QuoteMeta(f) + `$`).Match(listed) {
			t.Errorf("sha256sums.txt does not list %s:\n%s", f, listed)
		}
	}

	checkReleaseSBOM(t, filepath.Join(dir, "sandprobe-"+version+"-linux-amd64.cdx.json"))

	commit, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	got, err := exec.Command(filepath.Join(dir, "sandprobe-"+version+"-linux-amd64"), "version").Output()
	if err != nil {
		t.Fatalf("sandprobe version: %v", err)
	}
	if !strings.Contains(string(got), version) || !strings.Contains(string(got), strings.TrimSpace(string(commit))) {
		t.Errorf("sandprobe version printed %q, want %s and commit %s", got, version, commit)
	}

	digest, err := os.ReadFile(filepath.Join(dir, "image-digest.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^ghcr\.io/sandprobe/sandprobe:` + regexp.QuoteMeta(version) + `@sha256:[0-9a-f]{64}\n$`).Match(digest) {
		t.Errorf("image-digest.txt = %q, want REPO:VERSION@sha256:…", digest)
	}

	// The packaged chart installs this release's image by digest.
	if !withChart {
		t.Logf("no helm (hack/helm/build.sh): the release's chart is not checked")
		return
	}
	checkReleaseChart(t, strings.TrimSpace(string(helm)), dir, version, listed, digest)
}

// checkReleaseSBOM: the release's SBOM at path is CycloneDX and lists the
// client-go the module requires.
func checkReleaseSBOM(t *testing.T, path string) {
	t.Helper()
	wantClientGo, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "k8s.io/client-go").Output()
	if err != nil {
		t.Fatalf("go list -m k8s.io/client-go: %v", err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var bom struct {
		BOMFormat  string `json:"bomFormat"`
		Components []struct{ Name, Version, Purl string }
	}
	if err := json.Unmarshal(raw, &bom); err != nil {
		t.Fatalf("the SBOM is not JSON: %v", err)
	}
	found := ""
	for _, c := range bom.Components {
		if c.Name == "k8s.io/client-go" {
			found = c.Version
		}
	}
	if bom.BOMFormat != "CycloneDX" || found != strings.TrimSpace(string(wantClientGo)) {
		t.Errorf("SBOM (%s, %d components) lists k8s.io/client-go at %q, want %q", bom.BOMFormat, len(bom.Components), found, strings.TrimSpace(string(wantClientGo)))
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestReleaseDarwinBuilds: the CLI the release ships for macOS (the
// offline commands) compiles there: the Linux-only parts (the checks'
// syscalls, the local backend) sit behind build tags.
func TestReleaseDarwinBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the CLI")
	}
	cmd := exec.Command("go", "build", "-trimpath", "-o", os.DevNull, "./cmd/sandprobe")
	cmd.Dir = testenv.ModuleRoot(t)
	cmd.Env = append(os.Environ(), "GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOOS=darwin go build ./cmd/sandprobe: %v\n%s", err, out)
	}
}

func exitCode(err error) int {
	var e *exec.ExitError
	if errors.As(err, &e) {
		return e.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// checkReleaseChart: the release in dir lists its packaged chart, which
// installs the release's image by digest.
func checkReleaseChart(t *testing.T, helm, dir, version string, listed, digest []byte) {
	t.Helper()
	tgz := "sandprobe-" + strings.TrimPrefix(version, "v") + ".tgz"
	if !regexp.MustCompile(`(?m)^[0-9a-f]{64}  ` + regexp.QuoteMeta(tgz) + `$`).Match(listed) {
		t.Errorf("sha256sums.txt does not list the chart %s", tgz)
	}
	rendered, err := exec.Command(helm, "template", "sandprobe", filepath.Join(dir, tgz)).CombinedOutput()
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", tgz, err, rendered)
	}
	if want := "image: " + strings.TrimSpace(string(digest)); !strings.Contains(string(rendered), want) {
		t.Errorf("the released chart does not run %s", want)
	}
}
