package probes

import (
	"go/build"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// banned are never linked into the probe, whatever allows them: the probe
// runs in a hostile, read-only box, so it carries no Kubernetes or Docker
// client, no Prometheus client, no report writer and no cron (creds.scope
// speaks to the API server with net/http and encoding/json).
var banned = []string{
	"k8s.io/", "sigs.k8s.io/", "github.com/moby/", "github.com/docker/", "github.com/containerd/",
	"github.com/prometheus/", "github.com/owenrumney/go-sarif", "github.com/xeipuuv/", "github.com/robfig/cron",
	"google.golang.org/", "github.com/sandprobe/sandprobe/report", "github.com/sandprobe/sandprobe/runner",
	"github.com/sandprobe/sandprobe/render", "github.com/sandprobe/sandprobe/drift",
}

// TestProbeBinaryDependencies holds the line around the small probe
// binary (cmd/sandprobe-probe), the one copied into every sandbox: besides
// the standard library it may link only this package, the result model,
// policy and what policy needs, conc, chromedp and what chromedp needs, and
// golang.org/x/net and x/sys (DNS messages, raw syscalls). Anything else —
// a Prometheus or Kubernetes client pulled in through report, a new
// library — fails here, naming the import chain to cut.
func TestProbeBinaryDependencies(t *testing.T) {
	const mod = "github.com/sandprobe/sandprobe/"
	entry := mod + "cmd/sandprobe-probe"
	allowed := map[string]bool{}
	for _, pkg := range []string{mod + "probes", mod + "result", mod + "internal/probecmd", mod + "internal/version", entry} {
		allowed[pkg] = true
	}
	for _, root := range []string{mod + "policy", "github.com/chromedp/chromedp", "github.com/sourcegraph/conc/..."} {
		for _, dep := range nonStandardDeps(t, root) {
			allowed[dep] = true
		}
	}
	deps := nonStandardDeps(t, entry)
	graph := importGraph(t, entry)
	if len(deps) < 5 {
		t.Fatalf("go list -deps %s: only %v", entry, deps)
	}
	for _, dep := range deps {
		ok := allowed[dep] || strings.HasPrefix(dep, "golang.org/x/net/") || strings.HasPrefix(dep, "golang.org/x/sys/")
		for _, b := range banned {
			if strings.HasPrefix(dep, b) {
				ok = false
			}
		}
		if !ok {
			t.Errorf("the probe binary links %s (via %s); the probe may import the standard library, result, policy, conc and chromedp only",
				dep, strings.Join(graph[dep], ", "))
		}
	}
	// The allow-list itself must not have grown something banned through
	// policy or chromedp (it would then be allowed above, and banned too).
	if t.Failed() {
		return
	}
	for dep := range allowed {
		for _, b := range banned {
			if strings.HasPrefix(dep, b) && !strings.HasPrefix(b, mod) {
				t.Errorf("policy, chromedp or conc now pull in %s: the probe would link it", dep)
			}
		}
	}
}

// nonStandardDeps lists what pattern links outside the standard library.
func nonStandardDeps(t *testing.T, pattern string) []string {
	t.Helper()
	out, err := exec.Command(goBin(), "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pattern).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pattern, err)
	}
	return strings.Fields(string(out))
}

// importGraph maps each of entry's dependencies to the packages that import it.
func importGraph(t *testing.T, entry string) map[string][]string {
	t.Helper()
	out, err := exec.Command(goBin(), "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, entry).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", entry, err)
	}
	by := map[string][]string{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		for _, imp := range f[min(1, len(f)):] {
			by[imp] = append(by[imp], f[0])
		}
	}
	return by
}

// goBin is the go command of the Go that built the test.
func goBin() string { return filepath.Join(build.Default.GOROOT, "bin", "go") }
