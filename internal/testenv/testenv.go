// Package testenv gives tests the real things they run against — root, the
// sandprobe binary, the network lab, a Docker engine, a kube-apiserver — and
// decides what happens when one is missing: a skip on a developer's laptop,
// a failure in CI (SANDPROBE_REQUIRE_ENV=1), so no test silently stops
// testing.
package testenv

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// RequireEnvVar names the variable that, set to "1", turns every
// missing-environment skip into a failure.
const RequireEnvVar = "SANDPROBE_REQUIRE_ENV"

// UnitVar names the variable `make unit` sets to "1": the quick loop
// brings up no network lab (which, by design, stays up for the next test),
// so a root shell with the lab's tools is left as it was found.
const UnitVar = "SANDPROBE_UNIT"

// Missing skips the test, or fails it when the environment is required.
func Missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireEnvVar) == "1" {
		t.Fatalf("%s=1 but the test environment is missing: %s", RequireEnvVar, why)
	}
	t.Skip(why)
}

// RequireRoot skips (or fails in CI) unless the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "needs root (namespaces, mounts, network namespaces)")
	}
}

// ModuleRoot returns the repository root (the directory holding go.mod).
func ModuleRoot(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  string
)

// Binary builds the static sandprobe binary once per test process, with
// the small probe binary sandprobe-probe beside it (ProbeBinary), where
// the backends look for it. With SANDPROBE_BIN set (make test), both are
// `make build`'s.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if p := os.Getenv("SANDPROBE_BIN"); p != "" {
			binPath = p
			return
		}
		dir, err := os.MkdirTemp("", "sandprobe-test-bin-")
		if err != nil {
			buildErr = err.Error()
			return
		}
		binPath = filepath.Join(dir, "sandprobe")
		for _, c := range [][2]string{{binPath, "./cmd/sandprobe"}, {filepath.Join(dir, "sandprobe-probe"), "./cmd/sandprobe-probe"}} {
			cmd := exec.Command("go", "build", "-trimpath", "-o", c[0], c[1])
			cmd.Dir = ModuleRoot(t)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = string(out) + err.Error()
				return
			}
		}
	})
	if buildErr != "" {
		t.Fatalf("build sandprobe: %s", buildErr)
	}
	return binPath
}

// ProbeBinary is the small probe binary beside Binary (sandprobe-probe).
func ProbeBinary(t testing.TB) string {
	t.Helper()
	p := filepath.Join(filepath.Dir(Binary(t)), "sandprobe-probe")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no probe binary beside %s (make build builds both): %v", Binary(t), err)
	}
	return p
}

// LabDir is where the network lab keeps its state (hack/lab).
func LabDir() string {
	if d := os.Getenv("SANDPROBE_LAB_DIR"); d != "" {
		return d
	}
	return "/run/sandprobe-lab"
}

// Lab makes sure the network lab is up and healthy and holds an exclusive
// lock on it until the test ends: the lab's broken states are global, so
// tests that use it (in any package) take turns. It returns the lab script.
func Lab(t testing.TB) string {
	t.Helper()
	if os.Getenv(UnitVar) == "1" {
		t.Skip("make unit brings up no network lab: make test runs this")
	}
	RequireRoot(t)
	script := filepath.Join(ModuleRoot(t), "hack", "lab", "lab")
	for _, tool := range []string{"nft", "dnsmasq", "tinyproxy", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			Missing(t, "the network lab needs "+tool+" (make deps)")
		}
	}
	lock, err := os.OpenFile("/run/sandprobe-lab.test-lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Leave the lab healthy for the next test, then let it go.
		exec.Command(script, "heal").Run()
		syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
		lock.Close()
	})
	if out, err := exec.Command(script, "status").CombinedOutput(); err != nil || !strings.Contains(string(out), "lab: up") || !sameSource(filepath.Join(LabDir(), "source-hash"), script, "source-hash") {
		if out, err := exec.Command(script, "up").CombinedOutput(); err != nil {
			t.Fatalf("lab up: %v\n%s", err, out)
		}
	}
	if out, err := exec.Command(script, "heal").CombinedOutput(); err != nil {
		t.Fatalf("lab heal: %v\n%s", err, out)
	}
	return script
}

// sameSource tells whether what is up was built from this checkout: the
// hash that `up` recorded in stampFile equals what hashCmd prints now.
// Several checkouts (branches) on one machine share one lab and one
// cluster; a test must never judge its code against another version's.
func sameSource(stampFile string, hashCmd ...string) bool {
	want, err := os.ReadFile(stampFile)
	if err != nil {
		return false
	}
	got, err := exec.Command(hashCmd[0], hashCmd[1:]...).Output()
	return err == nil && strings.TrimSpace(string(got)) == strings.TrimSpace(string(want))
}

// Exec runs a binary and returns its exit code, stdout and stderr; a binary
// that cannot be started at all fails the test.
func Exec(t testing.TB, bin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	}
	t.Fatal(err)
	return -1, "", ""
}
