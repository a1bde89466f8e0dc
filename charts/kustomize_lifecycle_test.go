package charts

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

// TestKustomizeApplyDelete: the kustomize install's lifecycle on a real
// kube-apiserver of its own (the chart's test leaves its namespace
// Terminating: no namespace controller runs): kubectl apply -k of the base
// with the sandbox-namespaces and prometheus-rule components, then kubectl
// delete -k leaves no admission policy, cluster RBAC, sandbox Role or
// PrometheusRule, and deletes the namespace.
func TestKustomizeApplyDelete(t *testing.T) {
	dir := testenv.KubeAssets(t)
	env := &envtest.Environment{BinaryAssetsDirectory: dir}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kc := testenv.Kubeconfig(t, cfg)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(dir, "kubectl"), append([]string{"--kubeconfig", kc}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sandboxes"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "-f", "../hack/e2e/crds")
	kubectl("wait", "--for=condition=Established", "crd/prometheusrules.monitoring.coreos.com", "--timeout=30s")
	ov := overlay(t, "components:\n  - BASE/components/sandbox-namespaces\n  - BASE/components/prometheus-rule\n")
	kubectl("apply", "-k", ov)
	if _, err := client.RbacV1().Roles("sandboxes").Get(ctx, "sandprobe-probe", metav1.GetOptions{}); err != nil {
		t.Fatalf("apply -k made no Role sandboxes/sandprobe-probe: %v", err)
	}
	// No namespace controller: --wait=false, or kubectl waits for the
	// namespace to go away forever.
	kubectl("delete", "-k", ov, "--wait=false")
	left := kubectl("get", "validatingadmissionpolicies,validatingadmissionpolicybindings,clusterroles,clusterrolebindings,prometheusrules", "-A", "-o", "name")
	for _, l := range strings.Fields(left) {
		if strings.Contains(l, "sandprobe") {
			t.Errorf("left after kubectl delete -k: %s", l)
		}
	}
	if _, err := client.RbacV1().Roles("sandboxes").Get(ctx, "sandprobe-probe", metav1.GetOptions{}); err == nil {
		t.Errorf("left after kubectl delete -k: Role sandboxes/sandprobe-probe")
	}
	if n, err := client.CoreV1().Namespaces().Get(ctx, "sandprobe-system", metav1.GetOptions{}); err == nil && n.DeletionTimestamp == nil {
		t.Errorf("namespace sandprobe-system is still there after kubectl delete -k, not being deleted")
	}
	if _, err := client.CoreV1().Namespaces().Get(ctx, "sandboxes", metav1.GetOptions{}); err != nil {
		t.Errorf("kubectl delete -k removed the sandbox namespace, which sandprobe never owned: %v", err)
	}
}
