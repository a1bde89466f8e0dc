package version

import (
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestUnstamped: a plain build says dev, never an empty version, and
// names its Go version and platform.
func TestUnstamped(t *testing.T) {
	i := Get()
	if i.Version == "" {
		t.Fatal("empty version")
	}
	if i.GoVersion != runtime.Version() || i.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("Get() = %+v", i)
	}
	if s := (Info{Version: "dev", GoVersion: "go1.26.8", Platform: "linux/amd64"}).String(); s != "dev (commit unknown, built unknown, go1.26.8 linux/amd64)" {
		t.Errorf("String() = %q", s)
	}
}

// TestStamped builds a program with the linker flags make build and make
// release use and checks it reports exactly them.
func TestStamped(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "stamped")
	const pkg = "github.com/sandprobe/sandprobe/internal/version"
	ldflags := "-X " + pkg + ".version=v9.8.7 -X " + pkg + ".commit=0123456789abcdef0123456789abcdef01234567 -X " + pkg + ".date=2026-01-02T03:04:05Z"
	build := exec.Command(goBin(), "build", "-trimpath", "-ldflags", ldflags, "-o", bin, "./testdata/stamped")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "v9.8.7 (commit 0123456789abcdef0123456789abcdef01234567, built 2026-01-02T03:04:05Z, "
	if !strings.HasPrefix(string(out), want) {
		t.Errorf("stamped binary says %q, want %q…", out, want)
	}
}

func goBin() string {
	if p := filepath.Join(build.Default.GOROOT, "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
