package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCacheSealVerify: seal, verify clean (exit 0), change, add and remove
// (exit 1, each named), in every format; the seal's digest pins it.
func TestCacheSealVerify(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	os.MkdirAll(filepath.Join(dir, "pkgs/left-pad/1.3.0"), 0o755)
	os.WriteFile(filepath.Join(dir, "pkgs/left-pad/1.3.0/index.js"), []byte("module.exports = pad;\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "pkgs/left-pad/1.3.0/package.json"), []byte(`{"name":"left-pad"}`), 0o644)
	out := t.TempDir()
	manifest := filepath.Join(out, "seal.txt")
	code, stdout, stderr := runApp(t, "", "cache", "seal", dir, "--manifest", manifest)
	m := regexp.MustCompile(`sha256:([0-9a-f]{64})`).FindStringSubmatch(stdout)
	if code != 0 || m == nil {
		t.Fatalf("seal: exit %d\n%s%s", code, stdout, stderr)
	}
	digest := m[1]
	if code, stdout, stderr = runApp(t, "", "cache", "verify", dir, "--manifest", manifest, "--manifest-sha256", "sha256:"+digest); code != 0 {
		t.Fatalf("clean: exit %d\n%s%s", code, stdout, stderr)
	}
	os.WriteFile(filepath.Join(dir, "pkgs/left-pad/1.3.0/index.js"), []byte("require('child_process').exec('x')\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "pkgs/left-pad/1.3.0/postinstall.js"), []byte("x"), 0o644)
	os.Remove(filepath.Join(dir, "pkgs/left-pad/1.3.0/package.json"))
	junit := filepath.Join(out, "r.xml")
	for _, format := range []string{"text", "json", "junit"} {
		code, stdout, stderr = runApp(t, "", "cache", "verify", dir, "--manifest", manifest, "-o", format, "--junit", junit)
		if code != 1 {
			t.Fatalf("-o %s: exit %d\n%s%s", format, code, stdout, stderr)
		}
		for _, want := range []string{"index.js", "postinstall.js", "package.json", "cache.sealed"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("-o %s does not name %s:\n%s", format, want, stdout)
			}
		}
		if strings.Contains(stdout, "child_process") {
			t.Errorf("-o %s shows a file's content", format)
		}
	}
	if _, err := os.Stat(junit); err != nil {
		t.Error(err)
	}
}

// TestCacheBadInput: one line naming the field, exit 2, nothing written.
func TestCacheBadInput(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	out := t.TempDir()
	good := filepath.Join(out, "seal.txt")
	if code, _, stderr := runApp(t, "", "cache", "seal", dir, "--manifest", good); code != 0 {
		t.Fatal(stderr)
	}
	bad := filepath.Join(out, "bad.txt")
	os.WriteFile(bad, []byte("sandprobe.dev/cache-seal/v1\nf - 1 0644 \"f\"\n"), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"cache", "seal", dir}, "--manifest is required"},
		{[]string{"cache", "seal", filepath.Join(out, "nope"), "--manifest", filepath.Join(out, "m")}, "DIR: " + filepath.Join(out, "nope") + ": no such file or directory"},
		{[]string{"cache", "seal", dir, "--manifest", filepath.Join(dir, "m")}, "--manifest: " + filepath.Join(dir, "m") + " is inside " + dir},
		{[]string{"cache", "verify", dir}, "holds no content-addressed store"},
		{[]string{"cache", "verify", dir, "--manifest", bad}, "--manifest: " + bad + ": after line 2: no end line"},
		{[]string{"cache", "verify", dir, "--manifest", good, "--manifest-sha256", strings.Repeat("0", 64)}, "--manifest-sha256: " + good + " has sha256:"},
		{[]string{"cache", "verify", dir, "--manifest-sha256", strings.Repeat("0", 64)}, "--manifest-sha256: only with --manifest"},
		{[]string{"cache", "verify", dir, "--manifest", good, "-o", "xml"}, "-o: want text, json or junit"},
		{[]string{"cache", "verify"}, "want DIR"},
	}
	for _, c := range cases {
		code, stdout, stderr := runApp(t, "", c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v: exit %d, stderr %q (want one line with %q), stdout %q", c.args, code, stderr, c.want, stdout)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("a refused seal wrote into DIR: %v", entries)
	}
}

// TestDriftCache: drift --cache verifies the node's cache in the same run
// as the sandboxes (here, none: the cache alone) and names what changed.
func TestDriftCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	os.MkdirAll(filepath.Join(dir, "a"), 0o755)
	os.WriteFile(filepath.Join(dir, "a/x.js"), []byte("ok"), 0o644)
	manifest := filepath.Join(t.TempDir(), "seal.txt")
	if code, _, stderr := runApp(t, "", "cache", "seal", dir, "--manifest", manifest); code != 0 {
		t.Fatal(stderr)
	}
	code, stdout, stderr := runApp(t, "", "drift", "--policy", "../../fixtures/policy.yaml", "--cache", dir, "--cache-manifest", manifest)
	if code != 0 || strings.Contains(stdout, "no sandbox found") {
		t.Fatalf("clean: exit %d\n%s%s", code, stdout, stderr)
	}
	os.WriteFile(filepath.Join(dir, "a/x.js"), []byte("evil"), 0o644)
	code, stdout, stderr = runApp(t, "", "drift", "--policy", "../../fixtures/policy.yaml", "--cache", dir, "--cache-manifest", manifest, "-o", "json")
	if code != 1 || !strings.Contains(stdout, `"check": "cache.sealed"`) || !strings.Contains(stdout, "x.js") {
		t.Fatalf("changed: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, bad := range [][]string{
		{"--cache", dir, "--cache-manifest", manifest, "--cache-manifest", manifest},
		{"--cache", filepath.Join(dir, "nope")},
		{"--cache", dir, "--cache-manifest", filepath.Join(dir, "a/x.js")},
	} {
		code, _, stderr := runApp(t, "", append([]string{"drift", "--policy", "../../fixtures/policy.yaml"}, bad...)...)
		if code != 2 || !strings.HasPrefix(stderr, "sandprobe drift: --cache") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v: exit %d, stderr %q", bad, code, stderr)
		}
	}
}
