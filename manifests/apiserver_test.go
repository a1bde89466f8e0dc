package manifests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

// defaultAssets is where hack/k8s/build.sh caches kube-apiserver, etcd and kubectl.
const defaultAssets = "/var/cache/sandprobe/k8s/v1.37.2/bin"

// The base applied to one real kube-apiserver (RBAC authorizer, the default
// admission chain with Pod Security, RuntimeClass and
// ValidatingAdmissionPolicy) with `kubectl apply -k`, once per test binary.
// There is no kubelet: pods are admitted and stored, never run.
var cluster struct {
	once      sync.Once
	env       *envtest.Environment
	cfg       *rest.Config
	client    kubernetes.Interface
	vanilla   string // kubectl apply -k manifests/'s output, on the bare API server
	applied   string // kubectl apply's output for the base with its components
	full      string // that overlay's directory
	err       error
	kubectl   string
	kubeconfg string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cluster.env != nil {
		if err := cluster.env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop kube-apiserver: %v\n", err)
		}
		os.RemoveAll(filepath.Dir(cluster.kubeconfg))
	}
	os.Exit(code)
}

// assetsDir finds kube-apiserver, etcd and kubectl: $KUBEBUILDER_ASSETS, else the cache.
func assetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = defaultAssets
	}
	for _, b := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s not in %s (set KUBEBUILDER_ASSETS or run hack/k8s/build.sh)", b, dir)
		}
	}
	return dir, nil
}

// kubectl returns the kubectl that comes with the test binaries.
func kubectl(t testing.TB) string {
	t.Helper()
	dir, err := assetsDir()
	if err != nil {
		testenv.Missing(t, err.Error())
	}
	return filepath.Join(dir, "kubectl")
}

// kustomizeKubectl is the kubectl whose built-in kustomize builds the
// kustomizations: the cached one, else one on PATH (building needs no API
// server).
func kustomizeKubectl(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = defaultAssets
	}
	if p := filepath.Join(dir, "kubectl"); fileExists(p) {
		return p
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	testenv.Missing(t, "no kubectl in "+dir+" or on PATH (hack/k8s/build.sh)")
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// kustomize builds a kustomization with kubectl's built-in kustomize.
func kustomize(t testing.TB, dir string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(kustomizeKubectl(t), "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.String())
	}
	return out
}

// appliedBase returns a client for an API server on which `kubectl apply -k
// manifests/` has succeeded.
func appliedBase(t testing.TB) kubernetes.Interface {
	t.Helper()
	dir, err := assetsDir()
	if err != nil {
		testenv.Missing(t, err.Error())
	}
	cluster.once.Do(func() { cluster.err = startAndApply(dir) })
	if cluster.err != nil {
		t.Fatal(cluster.err)
	}
	return cluster.client
}

func startAndApply(dir string) error {
	cluster.kubectl = filepath.Join(dir, "kubectl")
	cluster.env = &envtest.Environment{BinaryAssetsDirectory: dir}
	cfg, err := cluster.env.Start()
	if err != nil {
		cluster.env = nil
		return fmt.Errorf("start kube-apiserver and etcd from %s: %w", dir, err)
	}
	cluster.cfg = cfg
	if cluster.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "sandprobe-manifests-")
	if err != nil {
		return err
	}
	cluster.kubeconfg = filepath.Join(tmp, "kubeconfig")
	if err := writeKubeconfig(cfg, cluster.kubeconfg); err != nil {
		return err
	}
	// First the base alone on a vanilla API server: no sandbox namespace,
	// no Prometheus Operator CRD.
	out, err := kubectlRun("apply", "-k", ".")
	cluster.vanilla = out
	if err != nil {
		return fmt.Errorf("kubectl apply -k manifests/ on a vanilla API server: %w\n%s", err, out)
	}
	// Then as a cluster with sandboxes has it: RuntimeClass objects before
	// pods naming them are admitted, the sandbox namespace before the
	// runner's rights in it (it is where the sandboxes already run,
	// sandprobe never creates it), the Operator's CRD (hack/e2e/crds
	// stands in) before the PrometheusRule, then the base with those
	// components.
	if out, err := kubectlRun("apply", "-f", "testdata/runtimeclasses.yaml"); err != nil {
		return fmt.Errorf("apply runtime classes: %w\n%s", err, out)
	}
	if out, err := kubectlRun("create", "namespace", sandboxNamespace); err != nil {
		return fmt.Errorf("create namespace %s: %w\n%s", sandboxNamespace, err, out)
	}
	if out, err := kubectlRun("apply", "-f", "../hack/e2e/crds"); err != nil {
		return fmt.Errorf("apply the PrometheusRule CRD: %w\n%s", err, out)
	}
	if out, err := kubectlRun("wait", "--for=condition=Established", "crd/prometheusrules.monitoring.coreos.com", "--timeout=30s"); err != nil {
		return fmt.Errorf("wait for the PrometheusRule CRD: %w\n%s", err, out)
	}
	full, err := overlayDir(tmp, "sandbox-namespaces", "prometheus-rule")
	if err != nil {
		return err
	}
	cluster.full = full
	out, err = kubectlRun("apply", "-k", full)
	cluster.applied = out
	if err != nil {
		return fmt.Errorf("kubectl apply -k (the base, components sandbox-namespaces and prometheus-rule): %w\n%s", err, out)
	}
	return nil
}

// overlayDir writes, under parent, an overlay of the base with the named
// components, as a user writes one (kustomize refuses an overlay inside
// its base, and takes no absolute paths).
func overlayDir(parent string, components ...string) (string, error) {
	base, err := filepath.Abs(".")
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(parent, "overlay-")
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		return "", err
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" + rel + "]\ncomponents:\n"
	for _, c := range components {
		k += "  - " + filepath.Join(rel, "components", c) + "\n"
	}
	return dir, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644)
}

func kubectlRun(args ...string) (string, error) {
	cmd := exec.Command(cluster.kubectl, append([]string{"--kubeconfig", cluster.kubeconfg}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}

// TestApplyBase: `kubectl apply -k manifests/` succeeds on a vanilla API
// server (no sandbox namespace, no Prometheus Operator CRD) and creates every
// object of the base; with the sandbox-namespaces and prometheus-rule
// components it adds the runner's rights in the sandbox namespace and the
// PrometheusRule. The API server has no Pod Security warning for the
// CronJob's pod template (the namespace enforces "restricted"), and
// applying again changes nothing.
func TestApplyBase(t *testing.T) {
	appliedBase(t)
	base := []string{
		"namespace/sandprobe-system", "serviceaccount/sandprobe", "role.rbac.authorization.k8s.io/sandprobe-runner",
		"clusterrole.rbac.authorization.k8s.io/sandprobe-reader", "rolebinding.rbac.authorization.k8s.io/sandprobe-runner",
		"clusterrolebinding.rbac.authorization.k8s.io/sandprobe-reader", "configmap/sandprobe-policy",
		"cronjob.batch/sandprobe", "validatingadmissionpolicy.admissionregistration.k8s.io/sandprobe-sandbox-runtime",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/sandprobe-sandbox-runtime",
		"validatingadmissionpolicy.admissionregistration.k8s.io/sandprobe-runner-scope",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/sandprobe-runner-scope",
		"validatingadmissionpolicy.admissionregistration.k8s.io/sandprobe-created-by",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/sandprobe-created-by",
	}
	components := []string{
		"role.rbac.authorization.k8s.io/sandprobe-probe", "rolebinding.rbac.authorization.k8s.io/sandprobe-probe",
		"prometheusrule.monitoring.coreos.com/sandprobe",
	}
	for _, want := range base {
		if !strings.Contains(cluster.vanilla, want+" created") {
			t.Errorf("kubectl apply -k on a vanilla API server did not create %s:\n%s", want, cluster.vanilla)
		}
	}
	for _, want := range components {
		if strings.Contains(cluster.vanilla, want+" ") {
			t.Errorf("the base applies %s: it belongs in a component", want)
		}
		if !strings.Contains(cluster.applied, want+" created") {
			t.Errorf("kubectl apply -k with the components did not create %s:\n%s", want, cluster.applied)
		}
	}
	for _, out := range []string{cluster.vanilla, cluster.applied} {
		if strings.Contains(strings.ToLower(out), "warning") {
			t.Errorf("kubectl apply -k warned (Pod Security?):\n%s", out)
		}
	}
	// Applying again changes nothing: the install is stable under apply.
	out, err := kubectlRun("apply", "-k", cluster.full)
	if err != nil {
		t.Fatalf("second apply: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasSuffix(line, " unchanged") {
			t.Errorf("second apply changed something: %q", line)
		}
	}
}

// eventually retries f until it returns nil or the time is up: admission
// policies take effect a moment after they are created.
func eventually(t testing.TB, within time.Duration, f func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("after %s: %v", within, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
