package charts

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopAPIServer()
	os.Exit(code)
}

// helmOn runs helm against the kubeconfig and fails the test if it fails.
func helmOn(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	cmd := exec.Command(testenv.HelmBinary(t), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestChartInstallUpgrade: the chart on a real kube-apiserver (no
// kubelet: Jobs are not run; make e2e runs them with
// hack/e2e/lifecycle.sh). helm install --namespace sandprobe-system
// --create-namespace (without it helm finds no namespace for its release)
// takes the namespace over with the chart's Pod Security labels, the
// runner's Role goes into the sandbox namespace, and an upgrade moves the
// CronJob and its probe image to the new image together. helm uninstall
// then leaves no admission policy (the sandbox one fails closed), no
// cluster RBAC, no Role in a sandbox namespace, nothing in the namespace,
// which stays (Helm's convention for a --create-namespace namespace); it
// used to fail: the runner-scope policy, which refuses every request it
// matches once its CronJob is gone (parameterNotFoundAction: Deny, decided
// before its matchConditions), matched ConfigMaps too.
func TestChartInstallUpgradeUninstall(t *testing.T) {
	cfg := testenv.APIServer(t)
	kc := testenv.Kubeconfig(t, cfg)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sandboxes"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const ns = "sandprobe-system"
	helmOn(t, kc, "install", "sandprobe", chart, "--namespace", ns, "--create-namespace", "--set", "sandboxNamespaces={sandboxes}")

	n, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("namespace %s labels %v: Pod Security restricted is not enforced", ns, n.Labels)
	}
	cj, err := client.BatchV1().CronJobs(ns).Get(ctx, "sandprobe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image; !strings.Contains(img, "@sha256:") {
		t.Errorf("the installed CronJob runs %s, want an image pinned by digest", img)
	}
	if _, err := client.RbacV1().Roles("sandboxes").Get(ctx, "sandprobe-probe", metav1.GetOptions{}); err != nil {
		t.Errorf("no Role sandprobe-probe in sandboxes: %v", err)
	}

	const next = "registry.example/sandprobe:v9.9.9@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	helmOn(t, kc, "upgrade", "sandprobe", chart, "--namespace", ns, "--reuse-values",
		"--set", "image.repository=registry.example/sandprobe", "--set", "image.tag=v9.9.9",
		"--set", "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	cj, err = client.BatchV1().CronJobs(ns).Get(ctx, "sandprobe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0]
	probe := ""
	for _, e := range c.Env {
		if e.Name == "SANDPROBE_PROBE_IMAGE" {
			probe = e.Value
		}
	}
	if c.Image != next || probe != next {
		t.Errorf("after the upgrade the CronJob runs %s and probes with %s, want %s for both", c.Image, probe, next)
	}

	helmOn(t, kc, "uninstall", "sandprobe", "--namespace", ns)
	vaps, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vaps.Items {
		t.Errorf("left after helm uninstall: ValidatingAdmissionPolicy %s", v.Name)
	}
	bindings, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bindings.Items {
		t.Errorf("left after helm uninstall: ValidatingAdmissionPolicyBinding %s", b.Name)
	}
	if _, err := client.RbacV1().ClusterRoles().Get(ctx, "sandprobe-reader", metav1.GetOptions{}); err == nil {
		t.Errorf("left after helm uninstall: ClusterRole sandprobe-reader")
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Get(ctx, "sandprobe-reader", metav1.GetOptions{}); err == nil {
		t.Errorf("left after helm uninstall: ClusterRoleBinding sandprobe-reader")
	}
	if _, err := client.RbacV1().Roles("sandboxes").Get(ctx, "sandprobe-probe", metav1.GetOptions{}); err == nil {
		t.Errorf("left after helm uninstall: Role sandboxes/sandprobe-probe")
	}
	// The release namespace stays, empty, as every --create-namespace
	// namespace does: deleting it under Helm's feet made the purge of its
	// release record fail on a real cluster ("release: not found"; make e2e).
	if n, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil || n.DeletionTimestamp != nil {
		t.Errorf("namespace %s was deleted by helm uninstall (err %v): Helm's release record lives there", ns, err)
	}
	for _, list := range []func() (int, error){
		func() (int, error) {
			l, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name"})
			return len(l.Items), err
		},
		func() (int, error) {
			l, err := client.BatchV1().CronJobs(ns).List(ctx, metav1.ListOptions{})
			return len(l.Items), err
		},
		func() (int, error) {
			l, err := client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
			return len(l.Items), err
		},
	} {
		if n, err := list(); err != nil || n > 0 {
			t.Errorf("left in %s after helm uninstall: %d objects (err %v)", ns, n, err)
		}
	}
}
