package drift_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
)

// k8sVersion is the Kubernetes release hack/k8s/build.sh builds; its
// binaries are cached under $SANDPROBE_CACHE/k8s/<version>/bin.
const k8sVersion = "v1.37.2"

// One real kube-apiserver with etcd per test binary, started on first use
// (about 4 s) and stopped by TestMain. Pods are stored, never run: there is
// no kubelet.
var apiServer struct {
	once sync.Once
	env  *envtest.Environment
	cfg  *rest.Config
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if apiServer.env != nil {
		if err := apiServer.env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop kube-apiserver: %v\n", err)
		}
	}
	os.Exit(code)
}

// assetsDir finds kube-apiserver and etcd: $KUBEBUILDER_ASSETS, else the
// build cache (SANDPROBE_CACHE, default /var/cache/sandprobe).
func assetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		cache := os.Getenv("SANDPROBE_CACHE")
		if cache == "" {
			cache = "/var/cache/sandprobe"
		}
		dir = filepath.Join(cache, "k8s", k8sVersion, "bin")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s not in %s (set KUBEBUILDER_ASSETS or run hack/k8s/build.sh)", b, dir)
		}
	}
	return dir, nil
}

// needAPIServer returns a config for the shared API server.
func needAPIServer(t testing.TB) *rest.Config {
	t.Helper()
	dir, err := assetsDir()
	if err != nil {
		testenv.Missing(t, err.Error())
	}
	apiServer.once.Do(func() {
		apiServer.env = &envtest.Environment{BinaryAssetsDirectory: dir}
		apiServer.cfg, apiServer.err = apiServer.env.Start()
		if apiServer.err != nil {
			apiServer.env = nil
		}
	})
	if apiServer.err != nil {
		t.Fatalf("start kube-apiserver and etcd from %s: %v", dir, apiServer.err)
	}
	cfg := rest.CopyConfig(apiServer.cfg)
	cfg.QPS, cfg.Burst = 500, 1000
	return cfg
}

// writeKubeconfig writes a kubeconfig for cfg, for the CLI.
func writeKubeconfig(t testing.TB, cfg *rest.Config) string { return testenv.Kubeconfig(t, cfg) }

var (
	selectorLine   = regexp.MustCompile(`(?m)^  selector:.*$`)
	namespacesLine = regexp.MustCompile(`(?m)^  namespaces:.*$`)
)

// variantPolicy rewrites a fixture policy so one set of test objects keeps
// to itself in a shared API server: its namespaces get a prefix and its
// selector a drift-set label. It returns the policy and its file.
func variantPolicy(t testing.TB, file, set string) (*policy.Policy, string) {
	t.Helper()
	base := loadPolicy(t, file)
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "fixtures", file))
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for k, v := range base.Spec.Selector.MatchLabels {
		labels = append(labels, fmt.Sprintf("%q: %q", k, v))
	}
	labels = append(labels, fmt.Sprintf("%q: %q", "drift-set", set))
	var nss []string
	for _, ns := range base.Spec.Namespaces {
		nss = append(nss, set+"-"+ns)
	}
	text := selectorLine.ReplaceAllString(string(raw), "  selector: {matchLabels: {"+strings.Join(labels, ", ")+"}}")
	text = namespacesLine.ReplaceAllString(text, "  namespaces: ["+strings.Join(nss, ", ")+"]")
	path := filepath.Join(t.TempDir(), set+"-"+file)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p, _, err := policy.LoadFile(path)
	if err != nil {
		t.Fatalf("variant of %s: %v", file, err)
	}
	if len(p.Spec.Namespaces) != len(base.Spec.Namespaces) || p.Spec.Selector.MatchLabels["drift-set"] != set {
		t.Fatalf("variant of %s did not take: %+v", file, p.Spec)
	}
	return p, path
}
