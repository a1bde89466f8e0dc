package cache

import (
	"archive/zip"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func zipOf(t *testing.T, files map[string][]byte, order []string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, name := range order {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(files[name])
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// nugetFolder builds a NuGet global packages folder the way NuGet restores
// into it: ID/VERSION/ with the .nupkg, .nupkg.sha512, .nupkg.metadata,
// the lower-case .nuspec and every package file extracted (but the OPC
// parts: _rels/, package/, [Content_Types].xml).
func nugetFolder(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "packages")
	for _, pkg := range []struct{ id, ver string }{{"Contoso.Json", "13.0.3"}, {"Contoso.Build", "2.1.0"}} {
		files := map[string][]byte{
			"_rels/.rels":                                          []byte("<Relationships/>"),
			pkg.id + ".nuspec":                                     []byte("<package><metadata><id>" + pkg.id + "</id><version>" + pkg.ver + "</version></metadata></package>"),
			"lib/net8.0/" + pkg.id + ".dll":                        random(64 << 10),
			"lib/net8.0/" + pkg.id + ".xml":                        []byte("<doc/>"),
			"build/" + pkg.id + ".props":                           []byte("<Project/>"),
			"[Content_Types].xml":                                  []byte("<Types/>"),
			"package/services/metadata/core-properties/abc.psmdcp": []byte("<coreProperties/>"),
			"content/read%20me.txt":                                []byte("hello"),
		}
		order := []string{"_rels/.rels", pkg.id + ".nuspec", "lib/net8.0/" + pkg.id + ".dll", "lib/net8.0/" + pkg.id + ".xml", "build/" + pkg.id + ".props", "content/read%20me.txt", "package/services/metadata/core-properties/abc.psmdcp", "[Content_Types].xml"}
		nupkg := zipOf(t, files, order)
		id, ver := strings.ToLower(pkg.id), pkg.ver
		dir := filepath.Join(root, id, ver)
		os.MkdirAll(dir, 0o755)
		sum := sha512.Sum512(nupkg)
		b64 := base64.StdEncoding.EncodeToString(sum[:])
		write := func(rel string, b []byte) {
			p := filepath.Join(dir, filepath.FromSlash(rel))
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write(id+"."+ver+".nupkg", nupkg)
		write(id+"."+ver+".nupkg.sha512", []byte(b64))
		write(id+"."+ver+".nupkg.metadata", []byte(fmt.Sprintf(`{"version":2,"contentHash":%q,"source":"https://api.nuget.org/v3/index.json"}`, b64)))
		write(id+".nuspec", files[pkg.id+".nuspec"])
		for _, name := range order {
			if nugetExtracted(name) && name != pkg.id+".nuspec" {
				write(strings.ReplaceAll(name, "%20", " "), files[name])
			}
		}
	}
	return root
}

// TestNuGetFolder: a flipped byte in an extracted DLL or in the .nupkg, a
// planted build/*.targets, a removed file — each named; untouched, clean.
func TestNuGetFolder(t *testing.T) {
	root := nugetFolder(t)
	manifest := seal(t, root)
	fs, sum := collect(t, root, manifest)
	if len(failing(fs)) > 0 || len(sum.Stores) != 1 || sum.Stores[0].Kind != "nuget" {
		t.Fatalf("the untouched folder: %+v %+v", failing(fs), sum)
	}
	cases := []struct {
		name, rel string
		break_    func(p string)
		sealed    string
		ca        string
	}{
		{"flipped byte in a DLL", "lib/net8.0/Contoso.Json.dll", func(p string) { flip(t, p) }, "content changed since the seal", "differs from the package's own file"},
		{"flipped byte in the nupkg", "contoso.json.13.0.3.nupkg", func(p string) { flip(t, p) }, "content changed since the seal", "does not match .nupkg.sha512"},
		{"planted targets", "build/Contoso.Json.targets", func(p string) {
			os.WriteFile(p, []byte("<Project><Target Name='x' BeforeTargets='Build'><Exec Command='curl x.invalid'/></Target></Project>"), 0o644)
		},
			"added since the seal (file", "added: the package holds no such file"},
		{"removed file", "lib/net8.0/Contoso.Json.xml", func(p string) { os.Remove(p) }, "removed since the seal (file)", "removed: the package holds it"},
		{"nuspec edited", "contoso.json.nuspec", func(p string) { os.WriteFile(p, []byte("<package/>"), 0o644) }, "content changed since the seal", "differs from the package's own file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			broken := copyTree(t, root)
			p := filepath.Join(broken, "contoso.json", "13.0.3", filepath.FromSlash(c.rel))
			c.break_(p)
			fs, _ := collect(t, broken, manifest)
			var sealedHit, caHit bool
			for _, f := range failing(fs) {
				t.Logf("%s %s: %s", f.Check, f.Subject, f.Actual)
				if f.Fix == "" || f.Expected == "" {
					t.Errorf("no fix or expected: %+v", f)
				}
				sealedHit = sealedHit || f.Check == CheckSealed && f.Subject == p && strings.Contains(f.Actual, c.sealed)
				caHit = caHit || f.Check == CheckIntegrity && f.Subject == p && strings.Contains(f.Actual, c.ca)
			}
			if !sealedHit || !caHit {
				t.Errorf("%s: named by the seal %v, by the package itself %v", c.rel, sealedHit, caHit)
			}
		})
	}
}

func flip(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	os.WriteFile(p, b, 0o644)
}

// TestPipWheels: each member re-hashed against the wheel's RECORD.
func TestPipWheels(t *testing.T) {
	root := filepath.Join(t.TempDir(), "pip")
	rec := func(files map[string][]byte, order []string) []byte {
		var b strings.Builder
		for _, n := range order {
			h := sha256.Sum256(files[n])
			fmt.Fprintf(&b, "%s,sha256=%s,%d\n", n, base64.RawURLEncoding.EncodeToString(h[:]), len(files[n]))
		}
		b.WriteString("demo-1.0.dist-info/RECORD,,\n")
		return []byte(b.String())
	}
	files := map[string][]byte{"demo/__init__.py": []byte("x = 1\n"), "demo-1.0.dist-info/METADATA": []byte("Name: demo\n")}
	order := []string{"demo/__init__.py", "demo-1.0.dist-info/METADATA"}
	mk := func(files map[string][]byte, order []string, record []byte) []byte {
		f := map[string][]byte{"demo-1.0.dist-info/RECORD": record}
		for k, v := range files {
			f[k] = v
		}
		return zipOf(t, f, append(append([]string{}, order...), "demo-1.0.dist-info/RECORD"))
	}
	good := mk(files, order, rec(files, order))
	evil := map[string][]byte{"demo/__init__.py": []byte("import os; os.system('curl x.invalid')\n"), "demo-1.0.dist-info/METADATA": files["demo-1.0.dist-info/METADATA"]}
	changed := mk(evil, order, rec(files, order))
	added := mk(map[string][]byte{"demo/__init__.py": files["demo/__init__.py"], "demo-1.0.dist-info/METADATA": files["demo-1.0.dist-info/METADATA"], "demo_hook.pth": []byte("import os\n")},
		append(append([]string{}, order...), "demo_hook.pth"), rec(files, order))
	for name, whl := range map[string][]byte{"aa/bb/cc/good/demo-1.0-py3-none-any.whl": good, "aa/bb/dd/changed/demo-1.0-py3-none-any.whl": changed, "aa/bb/ee/added/demo-1.0-py3-none-any.whl": added} {
		p := filepath.Join(root, "wheels", filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, whl, 0o644)
	}
	fs, sum := collect(t, root, nil)
	if len(sum.Stores) != 1 || sum.Stores[0].Kind != "pip" {
		t.Fatalf("%+v", sum)
	}
	bad := failing(fs)
	want := map[string]string{"changed": "demo/__init__.py: does not match its RECORD hash", "added": "demo_hook.pth: not in RECORD"}
	if len(bad) != 2 {
		t.Fatalf("%+v", bad)
	}
	for _, f := range bad {
		dir := filepath.Base(filepath.Dir(f.Subject))
		if !strings.Contains(f.Actual, want[dir]) || f.Fix == "" {
			t.Errorf("%s: %q, want %q", f.Subject, f.Actual, want[dir])
		}
	}
}

// TestGoModuleCache: a copy of real modules from this machine's module
// cache (conc, which this repository uses) verifies clean; a flipped byte
// in an extracted file, an added file, a removed file and a changed zip
// are each named.
func TestGoModuleCache(t *testing.T) {
	out, err := exec.Command(filepath.Join(build.Default.GOROOT, "bin", "go"), "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	src := strings.TrimSpace(string(out))
	const mod, ver = "github.com/sourcegraph/conc", "v0.3.0"
	root := filepath.Join(t.TempDir(), "gomod")
	for _, rel := range []string{"cache/download/" + mod + "/@v/" + ver + ".zip", "cache/download/" + mod + "/@v/" + ver + ".ziphash", "cache/download/" + mod + "/@v/" + ver + ".mod", mod + "@" + ver} {
		dst := filepath.Join(root, filepath.FromSlash(rel))
		os.MkdirAll(filepath.Dir(dst), 0o755)
		if out, err := exec.Command("cp", "-r", filepath.Join(src, filepath.FromSlash(rel)), dst).CombinedOutput(); err != nil {
			t.Skipf("conc %s is not in %s: %v %s", ver, src, err, out)
		}
	}
	exec.Command("chmod", "-R", "u+w", root).Run()
	manifest := seal(t, root)
	fs, sum := collect(t, root, manifest)
	if len(failing(fs)) > 0 || len(sum.Stores) != 1 || sum.Stores[0].Kind != "go" || sum.Stores[0].Entries < 20 {
		t.Fatalf("the untouched module cache: %+v %+v", failing(fs), sum)
	}
	extracted := filepath.Join(root, mod+"@"+ver)
	cases := []struct {
		name, path string
		break_     func(p string)
		ca         string
	}{
		{"flipped byte in extracted source", filepath.Join(extracted, "pool/pool.go"), func(p string) { flip(t, p) }, "differs from the module's zip"},
		{"added file", filepath.Join(extracted, "pool/init.go"), func(p string) { os.WriteFile(p, []byte("package pool\nfunc init() {}\n"), 0o644) }, "added: the module's zip holds no such file"},
		{"removed file", filepath.Join(extracted, "waitgroup.go"), func(p string) { os.Remove(p) }, "removed: the module's zip holds it"},
		{"changed zip", filepath.Join(root, "cache/download", mod, "@v", ver+".zip"), func(p string) { rezip(t, p) }, "does not match its .ziphash"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			broken := copyTree(t, root)
			p := strings.Replace(c.path, root, broken, 1)
			c.break_(p)
			fs, _ := collect(t, broken, nil)
			hit := false
			for _, f := range failing(fs) {
				t.Logf("%s %s: %s", f.Check, f.Subject, f.Actual)
				hit = hit || f.Subject == p && strings.Contains(f.Actual, c.ca)
			}
			if !hit {
				t.Errorf("%s is not named (%q)", p, c.ca)
			}
		})
	}
}

// rezip rewrites a module zip with one file's content changed: a valid
// zip, a different h1.
func rezip(t *testing.T, p string) {
	t.Helper()
	zr, err := zip.OpenReader(p)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	var order []string
	for _, f := range zr.File {
		r, _ := f.Open()
		var b bytes.Buffer
		b.ReadFrom(r)
		r.Close()
		files[f.Name] = b.Bytes()
		order = append(order, f.Name)
	}
	zr.Close()
	files[order[0]] = append(files[order[0]], '\n')
	os.WriteFile(p, zipOf(t, files, order), 0o644)
}
