package probes

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/result"
)

// TestCacheReadOnly: a missing cache and a writable one fail; a cache
// this uid cannot write only for lack of permission (EACCES) fails too,
// since another uid or a chmod writes it. The read-only mount that passes
// is built by runner/local's TestPhasesCache (a real bind mount).
func TestCacheReadOnly(t *testing.T) {
	dir := t.TempDir()
	writable := filepath.Join(dir, "npm")
	os.Mkdir(writable, 0o777)
	locked := filepath.Join(dir, "locked")
	os.Mkdir(locked, 0o555)
	p := mustPolicy(t, "  phases: {caches: ["+filepath.Join(dir, "missing")+", "+writable+", "+locked+"]}\n")
	fs := checkCacheReadOnly(context.Background(), &Env{Policy: p, Nonce: "n"})
	if len(fs) != 3 {
		t.Fatalf("%+v", fs)
	}
	for _, f := range fs {
		if f.Status != result.Fail || f.Expected == "" {
			t.Errorf("%s: %s %s", f.Subject, f.Status, f.Actual)
		}
		t.Logf("%s: %s (%s)", f.Subject, f.Actual, f.Evidence)
	}
	if !strings.Contains(fs[1].Actual, "writable") {
		t.Errorf("writable cache: %q", fs[1].Actual)
	}
	if os.Geteuid() != 0 && !strings.Contains(fs[2].Actual, "permission error") {
		t.Errorf("EACCES is not read-only: %q", fs[2].Actual)
	}
	if entries, _ := os.ReadDir(writable); len(entries) != 0 {
		t.Errorf("the write test left %v", entries)
	}
}

func TestMountOf(t *testing.T) {
	ms := []mountEntry{{point: "/"}, {point: "/cache"}, {point: "/cache/npm"}, {point: "/cachet"}}
	for path, want := range map[string]string{"/cache": "/cache", "/cache/x": "/cache", "/cache/npm/y": "/cache/npm", "/cachex": "/", "/cachet/a": "/cachet"} {
		if got := mountOf(path, ms).point; got != want {
			t.Errorf("mountOf(%s) = %s, want %s", path, got, want)
		}
	}
}
