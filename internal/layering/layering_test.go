package layering

import (
	"bufio"
	"bytes"
	"encoding/json"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// row is one row of the layering table: the packages it names (a trailing
// /... names a subtree) and what they may import besides the standard
// library. An allowance without a dot in its first element is one of this
// module's packages (runner/... is a subtree); one with a dot is a module
// path prefix (k8s.io/api allows k8s.io/api/core/v1). `*` allows anything.
type row struct {
	line     int
	packages []string
	allow    []string
}

// goPackage is what go list says of a package.
type goPackage struct {
	ImportPath string
	Standard   bool
	Module     *struct{ Path string }
	Imports    []string
}

// TestLayering checks every non-test import of every package of the module
// against the layering table in docs/architecture.md.
func TestLayering(t *testing.T) {
	root := moduleRoot(t)
	rows := readTable(t, filepath.Join(root, "docs", "architecture.md"))
	pkgs, mod := listPackages(t, root)
	if len(pkgs) < 20 {
		t.Fatalf("go list -deps ./...: only %d packages of %s", len(pkgs), mod)
	}
	for _, p := range pkgs {
		rel := relative(p.ImportPath, mod)
		r := rowFor(rows, rel)
		if r == nil {
			t.Errorf("%s is in no row of the layering table in docs/architecture.md: add it, with what it may import", rel)
			continue
		}
		for _, imp := range p.Imports {
			if isStandard(imp) || r.allows(relative(imp, mod), imp != relative(imp, mod)) {
				continue
			}
			t.Errorf("%s imports %s, which its row (docs/architecture.md line %d) does not allow", rel, relative(imp, mod), r.line)
		}
	}
}

// TestTableNamesRealPackages keeps the table honest the other way: every
// package a row names exists (a renamed package leaves no stale row).
func TestTableNamesRealPackages(t *testing.T) {
	root := moduleRoot(t)
	rows := readTable(t, filepath.Join(root, "docs", "architecture.md"))
	pkgs, mod := listPackages(t, root)
	for _, r := range rows {
		for _, name := range r.packages {
			found := false
			for _, p := range pkgs {
				found = found || match(name, relative(p.ImportPath, mod))
			}
			if !found {
				t.Errorf("docs/architecture.md line %d names %s, which is no package of %s", r.line, name, mod)
			}
		}
	}
}

var cell = regexp.MustCompile("`([^`]+)`")

// readTable parses the table under the "## Layering" heading.
func readTable(t *testing.T, path string) []row {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows []row
	in := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Layering"
		case in && strings.HasPrefix(line, "| `"):
			cols := strings.Split(line, "|")
			if len(cols) != 5 {
				t.Fatalf("%s:%d: a layering row has three columns: package | owns | may import", path, n)
			}
			rows = append(rows, row{line: n, packages: ticked(cols[1]), allow: ticked(cols[3])})
		}
	}
	if len(rows) < 10 {
		t.Fatalf("%s: no layering table under \"## Layering\" (%d rows)", path, len(rows))
	}
	return rows
}

func ticked(s string) []string {
	var out []string
	for _, m := range cell.FindAllStringSubmatch(s, -1) {
		out = append(out, strings.TrimSuffix(m[1], "/"))
	}
	return out
}

// rowFor is the row naming pkg; an exact name wins over a subtree.
func rowFor(rows []row, pkg string) *row {
	var best *row
	for i := range rows {
		for _, name := range rows[i].packages {
			if name == pkg {
				return &rows[i]
			}
			if match(name, pkg) && best == nil {
				best = &rows[i]
			}
		}
	}
	return best
}

// allows says whether the row allows importing imp (relative to the
// module when internal).
func (r *row) allows(imp string, internal bool) bool {
	for _, a := range r.allow {
		external := strings.Contains(strings.SplitN(a, "/", 2)[0], ".")
		switch {
		case a == "*":
			return true
		case internal && !external && match(a, imp):
			return true
		case !internal && external && (imp == a || strings.HasPrefix(imp, a+"/")):
			return true
		}
	}
	return false
}

// match says whether pattern (a package, or a subtree ending /...) names pkg.
func match(pattern, pkg string) bool {
	if sub, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == sub || strings.HasPrefix(pkg, sub+"/")
	}
	return pattern == pkg
}

func relative(pkg, mod string) string {
	if rel, ok := strings.CutPrefix(pkg, mod+"/"); ok {
		return rel
	}
	return pkg
}

// isStandard: the standard library's import paths have no dot in their
// first element (vendored golang.org/x packages of the standard library
// are reported as vendor/…).
func isStandard(imp string) bool {
	return !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".")
}

// listPackages lists the module's packages (not their tests) with
// `go list -deps`, and the module path.
func listPackages(t *testing.T, root string) ([]goPackage, string) {
	t.Helper()
	cmd := exec.Command(goBin(), "list", "-deps", "-json=ImportPath,Standard,Module,Imports", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./...: %v", err)
	}
	mod := modulePath(t, root)
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list -deps ./...: %v", err)
		}
		if !p.Standard && p.Module != nil && p.Module.Path == mod {
			pkgs = append(pkgs, p)
		}
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].ImportPath < pkgs[j].ImportPath })
	return pkgs, mod
}

func modulePath(t *testing.T, root string) string {
	t.Helper()
	cmd := exec.Command(goBin(), "list", "-m")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("no go.mod two levels above internal/layering: %v", err)
	}
	return dir
}

// goBin is the go command on PATH, else the one of the Go that built the test.
func goBin() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(build.Default.GOROOT, "bin", "go")
}
