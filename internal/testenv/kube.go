package testenv

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// DefaultKubeAssets is where hack/k8s/build.sh caches kube-apiserver, etcd,
// kubectl and the kubelet.
const DefaultKubeAssets = "/var/cache/sandprobe/k8s/v1.37.2/bin"

// KubeAssets finds the Kubernetes binaries: $KUBEBUILDER_ASSETS, else the
// cache. Missing ones are Missing.
func KubeAssets(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = DefaultKubeAssets
	}
	for _, b := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			Missing(t, fmt.Sprintf("%s not in %s (set KUBEBUILDER_ASSETS or run hack/k8s/build.sh)", b, dir))
		}
	}
	return dir
}

var apiServer struct {
	mu  sync.Mutex
	env *envtest.Environment
	cfg *rest.Config
	err error
}

// APIServer returns a config for a real kube-apiserver with etcd (envtest),
// started on first use (about 4 s) and shared by the test binary: pods are
// stored, never run, since there is no kubelet, scheduler or controller.
// A package that uses it stops it from TestMain with StopAPIServer.
func APIServer(t testing.TB) *rest.Config {
	t.Helper()
	dir := KubeAssets(t)
	apiServer.mu.Lock()
	defer apiServer.mu.Unlock()
	if apiServer.env == nil && apiServer.err == nil {
		// envtest logs through controller-runtime, which otherwise warns
		// with a stack trace that no logger was set.
		ctrllog.SetLogger(logr.Discard())
		env := &envtest.Environment{BinaryAssetsDirectory: dir}
		apiServer.cfg, apiServer.err = env.Start()
		if apiServer.err == nil {
			apiServer.env = env
		}
	}
	if apiServer.err != nil {
		t.Fatalf("start kube-apiserver and etcd from %s: %v", dir, apiServer.err)
	}
	cfg := rest.CopyConfig(apiServer.cfg)
	cfg.QPS, cfg.Burst = 500, 1000
	return cfg
}

// StopAPIServer stops the shared API server, if one was started.
func StopAPIServer() {
	apiServer.mu.Lock()
	defer apiServer.mu.Unlock()
	if apiServer.env != nil {
		if err := apiServer.env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop kube-apiserver: %v\n", err)
		}
		apiServer.env = nil
	}
}

// APIServerTokenKey is the key the shared API server signs service-account
// tokens with (envtest writes it beside its serving certificate), for a
// test that needs a token no TokenRequest hands out: one already expired.
func APIServerTokenKey(t testing.TB) crypto.Signer {
	t.Helper()
	APIServer(t)
	apiServer.mu.Lock()
	dir := apiServer.env.ControlPlane.APIServer.CertDir
	apiServer.mu.Unlock()
	b, err := os.ReadFile(filepath.Join(dir, "sa-signer.key"))
	if err != nil {
		t.Fatalf("the API server's token signing key: %v", err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s/sa-signer.key: no PEM block", dir)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatalf("%s/sa-signer.key: %v", dir, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		t.Fatalf("%s/sa-signer.key: a %T cannot sign", dir, key)
	}
	return signer
}

// Kubeconfig writes a kubeconfig for cfg (the API server's), for tests
// that run the CLI against it.
func Kubeconfig(t testing.TB, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}
