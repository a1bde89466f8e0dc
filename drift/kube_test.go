package drift_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// countingAPI records the list calls, to prove the scan pages.
type countingAPI struct {
	drift.KubeAPI
	mu       sync.Mutex
	podCalls int
	limits   []int64
	cont     int
}

func (c *countingAPI) ListPods(ctx context.Context, ns string, opts metav1.ListOptions) (*corev1.PodList, error) {
	c.mu.Lock()
	c.podCalls++
	c.limits = append(c.limits, opts.Limit)
	if opts.Continue != "" {
		c.cont++
	}
	c.mu.Unlock()
	return c.KubeAPI.ListPods(ctx, ns, opts)
}

// clusterClients are the typed and dynamic clients the tests create objects with.
type clusterClients struct {
	kube *kubernetes.Clientset
	dyn  dynamic.Interface
}

func newClusterClients(t *testing.T, cfg *rest.Config) *clusterClients {
	t.Helper()
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &clusterClients{kube: k, dyn: d}
}

var crdGVR = map[string]schema.GroupVersionResource{
	drift.CiliumNetworkPolicyKind:            {Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"},
	drift.CiliumClusterwideNetworkPolicyKind: {Group: "cilium.io", Version: "v2", Resource: "ciliumclusterwidenetworkpolicies"},
	drift.SandboxKind:                        drift.SandboxGVR("v1alpha1"),
	drift.SandboxTemplateKind:                drift.SandboxTemplateGVR("v1alpha1"),
	drift.SandboxClaimKind:                   drift.SandboxClaimGVR("v1alpha1"),
	drift.SandboxWarmPoolKind:                drift.SandboxWarmPoolGVR("v1alpha1"),
	drift.AdminNetworkPolicyKind:             {Group: drift.PolicyAPIGroup, Version: "v1alpha1", Resource: "adminnetworkpolicies"},
	drift.BaselineAdminNetworkPolicyKind:     {Group: drift.PolicyAPIGroup, Version: "v1alpha1", Resource: "baselineadminnetworkpolicies"},
	drift.ClusterNetworkPolicyKind:           {Group: drift.PolicyAPIGroup, Version: "v1alpha2", Resource: "clusternetworkpolicies"},
}

// create stores the objects (namespaces first), filling in the UIDs of
// owner references written by name. Pods are stored, never run: there are
// no controllers, so a Deployment makes no ReplicaSet on its own.
func (c *clusterClients) create(t *testing.T, objs []any) {
	t.Helper()
	ctx := context.Background()
	nss := map[string]bool{}
	for _, o := range objs {
		if m, ok := o.(metav1.Object); ok && m.GetNamespace() != "" {
			nss[m.GetNamespace()] = true
		}
		if ns, ok := o.(*corev1.Namespace); ok {
			if _, err := c.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
				t.Fatalf("create namespace %s: %v", ns.Name, err)
			}
		}
	}
	// The RuntimeClass admission plugin refuses pods whose class does not
	// exist, as a real cluster does.
	for _, rc := range []string{"kata", "gvisor", "runc"} {
		_, err := c.kube.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: rc}, Handler: rc}, metav1.CreateOptions{})
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatalf("create runtimeclass %s: %v", rc, err)
		}
	}
	for ns := range nss {
		_, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	uids := uidOf{}
	for _, o := range objs {
		if m, ok := o.(metav1.Object); ok {
			refs := m.GetOwnerReferences()
			for i := range refs {
				refs[i].UID = uids[refs[i].Kind+"/"+m.GetNamespace()+"/"+refs[i].Name]
			}
			m.SetOwnerReferences(refs)
		}
		if _, isNS := o.(*corev1.Namespace); isNS {
			continue
		}
		created, err := c.createObject(ctx, t, o)
		if err != nil {
			t.Fatalf("create %T %s: %v", o, o.(metav1.Object).GetName(), err)
		}
		kind := reflectKind(o)
		uids[kind+"/"+created.GetNamespace()+"/"+created.GetName()] = created.GetUID()
	}
}

// createObject creates one object (not a namespace) through its typed
// client, or the dynamic one for a custom resource.
func (c *clusterClients) createObject(ctx context.Context, t *testing.T, o any) (metav1.Object, error) {
	t.Helper()
	switch o := o.(type) {
	case *corev1.Pod:
		return c.kube.CoreV1().Pods(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *networkingv1.NetworkPolicy:
		return c.kube.NetworkingV1().NetworkPolicies(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *appsv1.Deployment:
		return c.kube.AppsV1().Deployments(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *appsv1.ReplicaSet:
		return c.kube.AppsV1().ReplicaSets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *appsv1.StatefulSet:
		return c.kube.AppsV1().StatefulSets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *appsv1.DaemonSet:
		return c.kube.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *batchv1.Job:
		return c.kube.BatchV1().Jobs(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *batchv1.CronJob:
		return c.kube.BatchV1().CronJobs(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *unstructured.Unstructured:
		gvr, ok := crdGVR[o.GetKind()]
		if !ok {
			t.Fatalf("no resource for kind %s", o.GetKind())
		}
		return c.dyn.Resource(gvr).Namespace(o.GetNamespace()).Create(ctx, o, metav1.CreateOptions{})
	}
	t.Fatalf("cannot create %T", o)
	return nil, nil
}

// reflectKind is an object's kind: its TypeMeta's, or its Go type's name.
func reflectKind(o any) string {
	if u, ok := o.(*unstructured.Unstructured); ok {
		return u.GetKind()
	}
	if ta, ok := o.(interface{ GetObjectKind() schema.ObjectKind }); ok {
		if k := ta.GetObjectKind().GroupVersionKind().Kind; k != "" {
			return k
		}
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", o), "*v1.")
}

// expectationsOf reads the annotated expectations straight from objects.
func expectationsOf(objs []any) map[string][]string {
	want := map[string][]string{}
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Pod:
			want["pod/"+o.Namespace+"/"+o.Name] = splitChecks(o.Annotations[expectAnnotation])
		case *unstructured.Unstructured:
			switch o.GetKind() {
			case drift.SandboxKind, drift.SandboxTemplateKind, drift.SandboxClaimKind:
				want[strings.ToLower(o.GetKind())+"/"+o.GetNamespace()+"/"+o.GetName()] = splitChecks(o.GetAnnotations()[expectAnnotation])
			}
		default:
			if t := drift.WorkloadTemplate(o); t != nil {
				if exp, ok := t.Meta.Annotations[expectAnnotation]; ok {
					want[t.Target()] = splitChecks(exp)
				}
			}
		}
	}
	return want
}

func scan(t *testing.T, api drift.KubeAPI, p *policy.Policy, pageSize int64) *drift.Collector {
	t.Helper()
	e, err := drift.NewEngine(p)
	if err != nil {
		t.Fatal(err)
	}
	col := drift.NewCollector()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := (&drift.KubeScan{API: api, Engine: e, PageSize: pageSize}).Run(ctx, col); err != nil {
		t.Fatal(err)
	}
	return col
}

// TestKubeLive stores every fixture set in a real kube-apiserver (etcd
// behind it) and scans it the way `sandprobe drift --kubeconfig` does:
// the same findings as offline, page by page, CRDs absent and present.
func TestKubeLive(t *testing.T) {
	cfg := needAPIServer(t)
	cc := newClusterClients(t, cfg)
	api, err := drift.NewKubeAPI(cfg)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("crds-absent", func(t *testing.T) {
		p, _ := variantPolicy(t, "policy.yaml", "absent")
		objs := append(egressBase(p, false), hardenedPod(p, p.Spec.Namespaces[0], "agent"))
		cc.create(t, objs)
		col := scan(t, api, p, 0)
		if col.Scanned != 1 || len(col.Findings) != 0 {
			t.Fatalf("scanned %d, findings %+v", col.Scanned, col.Findings)
		}
		notes := strings.Join(col.Notes, "\n")
		for _, want := range []string{"Cilium CRDs are not installed", "AdminNetworkPolicy CRDs are not installed", "Sandbox CRD is not installed", "SandboxTemplate CRD is not installed"} {
			if !strings.Contains(notes, want) || strings.Count(notes, want) != 1 {
				t.Errorf("notes do not say %q once: %q", want, col.Notes)
			}
		}
		if len(col.Notes) != 4 {
			t.Fatalf("notes %q", col.Notes)
		}
	})

	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{filepath.Join("testdata", "crds")}}); err != nil {
		t.Fatalf("install CRDs: %v", err)
	}

	for _, set := range fixtureSets() {
		t.Run(set.file, func(t *testing.T) {
			kubeLiveFixtureSet(t, cc, api, set)
		})
	}

	t.Run("ephemeral-container", func(t *testing.T) {
		// Ephemeral containers can only be added through their subresource,
		// as `kubectl debug` does; they are checked like any container.
		p, _ := variantPolicy(t, "policy.yaml", "ephemeral")
		pod := hardenedPod(p, p.Spec.Namespaces[0], "debugged")
		cc.create(t, append(egressBase(p, false), pod))
		ctx := context.Background()
		stored, err := cc.kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stored.Spec.EphemeralContainers = append(stored.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: "busybox" + digest,
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true)},
		}})
		if _, err := cc.kube.CoreV1().Pods(pod.Namespace).UpdateEphemeralContainers(ctx, pod.Name, stored, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		col := scan(t, api, p, 0)
		if len(col.Findings) != 1 || col.Findings[0].Check != drift.PodCapDrop ||
			col.Findings[0].Subject != "spec.ephemeralContainers[debugger].securityContext.capabilities.drop" {
			t.Fatalf("findings %+v", col.Findings)
		}
	})

	t.Run("cli", func(t *testing.T) {
		kubeLiveCLI(t, cfg)
	})
}

// kubeLiveFixtureSet: a fixture set stored on the API server is judged as
// its expectations say, read in pages of 5 that follow continue tokens.
func kubeLiveFixtureSet(t *testing.T, cc *clusterClients, api drift.KubeAPI, set fixtureSet) {
	t.Helper()
	name := strings.TrimSuffix(set.file, ".yaml")
	p, _ := variantPolicy(t, set.policy, name)
	objs := set.objects(p, name+"-")
	cc.create(t, objs)
	counting := &countingAPI{KubeAPI: api}
	// A small page proves the scan follows continue tokens.
	col := scan(t, counting, p, 5)
	want := expectationsOf(objs)
	if col.Scanned != len(want) {
		t.Errorf("scanned %d sandboxes, want %d", col.Scanned, len(want))
	}
	assertExpected(t, want, col.Findings)
	for _, l := range counting.limits {
		if l != 5 {
			t.Errorf("a pod list ran with limit %d", l)
		}
	}
	pods := 0
	for _, o := range objs {
		if _, ok := o.(*corev1.Pod); ok {
			pods++
		}
	}
	if pods > 10 && counting.cont == 0 {
		t.Errorf("%d pods in %d list calls without a continue token", pods, counting.podCalls)
	}
	if strings.Contains(strings.Join(col.Notes, " "), "not installed") {
		t.Errorf("CRDs are installed, but notes say %q", col.Notes)
	}
}

// kubeLiveCLI: sandprobe drift --kubeconfig over the stored sets exits as
// each set's findings say and reports them.
func kubeLiveCLI(t *testing.T, cfg *rest.Config) {
	t.Helper()
	bin := testenv.Binary(t)
	kubeconfig := writeKubeconfig(t, cfg)
	for _, c := range []struct {
		set, policy string
		code        int
	}{
		{"hardened", "policy.yaml", 0},
		{"pods", "policy.yaml", 1},
		{"cilium", "direct-policy.yaml", 1},
	} {
		t.Run(c.set, func(t *testing.T) {
			// The sets were stored above; reuse their policy variants.
			_, path := variantPolicy(t, c.policy, c.set)
			code, stdout, stderr := testenv.Exec(t, bin, "drift", "--kubeconfig", kubeconfig, "--policy", path, "-o", "json", "--page-size", "7")
			if code != c.code {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, c.code, stdout, stderr)
			}
			var run report.Run
			if err := json.Unmarshal([]byte(stdout), &run); err != nil {
				t.Fatalf("%v\n%s", err, stdout)
			}
			if run.Scanned == 0 || run.Backend != "drift" {
				t.Fatalf("run %+v", run)
			}
			var set fixtureSet
			for _, s := range fixtureSets() {
				if s.file == c.set+".yaml" {
					set = s
				}
			}
			p, _ := variantPolicy(t, c.policy, c.set)
			assertExpected(t, expectationsOf(set.objects(p, c.set+"-")), run.Findings)
		})
	}
}

// TestKubeUnreachable: a cluster that cannot be reached is exit 3 with one
// line on stderr, and the report carries an error finding, never a pass.
func TestKubeUnreachable(t *testing.T) {
	bin := testenv.Binary(t)
	// Port 1 on loopback: nothing listens, the connection is refused at once.
	kubeconfig := writeKubeconfig(t, &rest.Config{Host: "https://127.0.0.1:1"})
	junit := filepath.Join(t.TempDir(), "drift.xml")
	code, stdout, stderr := testenv.Exec(t, bin, "drift", "--kubeconfig", kubeconfig, "--policy", filepath.Join(repoRoot(), "fixtures", "policy.yaml"), "--junit", junit, "--timeout", "20s")
	if code != report.ExitCouldNotRun {
		t.Fatalf("exit %d, want 3\n%s\n%s", code, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "127.0.0.1:1") || !strings.Contains(lines[0], "namespaces") {
		t.Fatalf("stderr is not one line naming the server: %q", stderr)
	}
	if !strings.Contains(stdout, "COULD NOT CHECK") {
		t.Fatalf("report does not say it could not check:\n%s", stdout)
	}
	data, err := os.ReadFile(junit)
	if err != nil || !strings.Contains(string(data), "<error") {
		t.Fatalf("JUnit report lacks the error: %v\n%s", err, data)
	}
}

// scanCase is a live cluster where the policy finds nothing to judge.
type scanCase struct {
	name, check string
	// namespaces: "" keeps the policy's namespaces (created, empty);
	// "missing" replaces them with one that does not exist.
	namespaces string
}

func scanCases() []scanCase {
	return []scanCase{
		{"nothing-found", drift.ScanSandboxesFound, ""},
		{"namespace-missing", drift.ScanNamespaceExists, "missing"},
	}
}

// TestKubeNothingFound: a selector that matches nothing (the label was
// renamed, the wrong context) or a declared namespace that does not exist
// is a failing finding and exit 1, never a clean run that judged nothing.
func TestKubeNothingFound(t *testing.T) {
	cfg := needAPIServer(t)
	cc := newClusterClients(t, cfg)
	api, err := drift.NewKubeAPI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bin := testenv.Binary(t)
	kubeconfig := writeKubeconfig(t, cfg)
	for _, c := range scanCases() {
		t.Run(c.name, func(t *testing.T) {
			p, path := variantPolicy(t, "policy.yaml", c.name)
			if c.namespaces == "missing" {
				raw, _ := os.ReadFile(path)
				doc := namespacesLine.ReplaceAllString(string(raw), "  namespaces: ["+c.name+"-nowhere]")
				if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
					t.Fatal(err)
				}
				p, _, err = policy.LoadFile(path)
				if err != nil {
					t.Fatal(err)
				}
			} else {
				// The namespaces exist and hold a pod that is not a sandbox's
				// (other labels, another namespace): nothing matches.
				stray := hardenedPod(p, c.name+"-elsewhere", "stray")
				delete(stray.Labels, "drift-set")
				cc.create(t, []any{namespaceObject(p.Spec.Namespaces[0], nil), stray})
			}
			col := scan(t, api, p, 0)
			var failed []string
			for _, f := range col.Findings {
				if f.Status == report.Fail {
					failed = append(failed, f.Check+" "+f.Subject)
					if f.Expected == "" || f.Actual == "" || f.Fix == "" || f.Evidence == "" {
						t.Errorf("%s lacks expected/actual/fix/evidence: %+v", f.Check, f)
					}
				}
				if f.Status == report.Pass {
					t.Errorf("a pass with nothing found: %s %s", f.Check, f.Actual)
				}
			}
			joined := strings.Join(failed, "\n")
			if !strings.Contains(joined, c.check) || !strings.Contains(joined, drift.ScanSandboxesFound) {
				t.Fatalf("failing findings %q, want %s and %s", failed, c.check, drift.ScanSandboxesFound)
			}
			if c.check == drift.ScanNamespaceExists && !strings.Contains(joined, "spec.namespaces[0]") {
				t.Errorf("the missing namespace is not named: %q", failed)
			}
			metrics := filepath.Join(t.TempDir(), "drift.prom")
			code, stdout, stderr := testenv.Exec(t, bin, "drift", "--kubeconfig", kubeconfig, "--policy", path, "--metrics-file", metrics)
			if code != report.ExitNonConformant {
				t.Fatalf("exit %d, want 1\n%s\n%s", code, stdout, stderr)
			}
			prom, err := os.ReadFile(metrics)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"sandprobe_sandboxes_scanned 0", "sandprobe_policy_namespaces 1", `sandprobe_drift_findings{namespace="",rule="drift.scan.sandboxes-found",severity="high"} 1`} {
				if !strings.Contains(string(prom), want) {
					t.Errorf("metrics lack %q:\n%s", want, prom)
				}
			}
		})
	}
}
