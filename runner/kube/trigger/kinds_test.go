package trigger_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/runner/kube/trigger"
)

// TestCRDPolicyKinds: without the CRDs the watch runs and says which kinds
// it does not watch; with them, a namespaced Cilium policy in a sandbox
// namespace is a cycle for that namespace and every cluster-scoped kind a
// full one.
func TestCRDPolicyKinds(t *testing.T) {
	cfg := testenv.APIServer(t)
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	namespace(t, cs, "crd-sbx")
	t.Run("not-installed", func(t *testing.T) {
		r := start(t, cfg, cfg, []string{"crd-sbx"}, []trigger.Agent{}, 0)
		logs := r.logs.String()
		for _, k := range []string{"ciliumnetworkpolicy", "ciliumclusterwidenetworkpolicy", "adminnetworkpolicy", "baselineadminnetworkpolicy", "clusternetworkpolicy"} {
			if !strings.Contains(logs, k) || !strings.Contains(logs, "not watched") {
				t.Errorf("the log does not say %s is not watched:\n%s", k, logs)
			}
		}
		if !strings.Contains(logs, `kinds="[networkpolicy namespace]"`) {
			t.Errorf("the log does not say only networkpolicy (and namespaces) are watched:\n%s", logs)
		}
	})
	crds := filepath.Join(testenv.ModuleRoot(t), "drift", "testdata", "crds")
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{crds}}); err != nil {
		t.Fatalf("install CRDs: %v", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, cfg, cfg, []string{"crd-sbx"}, []trigger.Agent{}, 0)
	if logs := r.logs.String(); !strings.Contains(logs, `kinds="[networkpolicy ciliumnetworkpolicy ciliumclusterwidenetworkpolicy adminnetworkpolicy baselineadminnetworkpolicy clusternetworkpolicy namespace]"`) {
		t.Errorf("the log does not name every kind watched:\n%s", logs)
	}
	for _, c := range []struct {
		gvr        schema.GroupVersionResource
		kind, ns   string
		name, want string
	}{
		{schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"}, "CiliumNetworkPolicy", "crd-sbx", "allow-world", "namespaces=crd-sbx"},
		{schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"}, "CiliumNetworkPolicy", "default", "elsewhere", ""},
		{schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumclusterwidenetworkpolicies"}, "CiliumClusterwideNetworkPolicy", "", "ccnp", "full"},
		{schema.GroupVersionResource{Group: "policy.networking.k8s.io", Version: "v1alpha1", Resource: "adminnetworkpolicies"}, "AdminNetworkPolicy", "", "anp", "full"},
		{schema.GroupVersionResource{Group: "policy.networking.k8s.io", Version: "v1alpha1", Resource: "baselineadminnetworkpolicies"}, "BaselineAdminNetworkPolicy", "", "default", "full"},
		{schema.GroupVersionResource{Group: "policy.networking.k8s.io", Version: "v1alpha2", Resource: "clusternetworkpolicies"}, "ClusterNetworkPolicy", "", "cnp", "full"},
	} {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": c.gvr.GroupVersion().String(), "kind": c.kind,
			"metadata": map[string]any{"name": c.name}, "spec": map[string]any{"priority": int64(10)},
		}}
		res := dyn.Resource(c.gvr)
		var ri dynamic.ResourceInterface = res
		if c.ns != "" {
			obj.SetNamespace(c.ns)
			ri = res.Namespace(c.ns)
		}
		if _, err := ri.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", c.kind, err)
		}
		var want []string
		if c.want != "" {
			want = []string{c.want}
		}
		r.expect("create "+c.kind+" "+c.name, want...)
		if err := ri.Delete(ctx, c.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		r.expect("delete "+c.kind+" "+c.name, want...)
	}
}

// agentPod is a DaemonSet's pod on node, as the DaemonSet controller and
// the kubelet would leave it (there are neither here: the test writes
// their parts).
func agentPod(t *testing.T, cs kubernetes.Interface, ds *appsv1.DaemonSet, name, node string, readyNow bool, restarts int32) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	yes := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ds.Namespace, Labels: ds.Spec.Selector.MatchLabels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "agent", Image: "agent:v2"}}},
	}
	p, err := cs.CoreV1().Pods(ds.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return setReady(t, cs, p, readyNow, restarts)
}

// mkDS is a DaemonSet kube-system/name, as a CNI's install makes it.
func mkDS(t *testing.T, cs kubernetes.Interface, name string) *appsv1.DaemonSet {
	t.Helper()
	labels := map[string]string{"k8s-app": name}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:v1"}}}}}}
	out, err := cs.AppsV1().DaemonSets("kube-system").Create(context.Background(), ds, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func setReady(t *testing.T, cs kubernetes.Interface, p *corev1.Pod, ready bool, restarts int32) *corev1.Pod {
	t.Helper()
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: st}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "agent", Ready: ready, RestartCount: restarts, Image: "agent:v2", ImageID: "x"}}}
	out, err := cs.CoreV1().Pods(p.Namespace).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAgentRestart: the CNI agent's pod on one node is replaced (a rolling
// upgrade): nothing while the new one is not Ready, then exactly one cycle
// for that node as soon as it is, and one more when it has been Ready for
// the grace (Ready is not always enforcing yet); a container restart of a
// Ready agent is the same; an agent that stays not Ready is probed after
// the grace anyway.
// The agent is auto-detected (kube-system/kube-router, as issue-15-detect's
// cluster runs it), and other DaemonSets' pods start nothing.
func TestAgentRestart(t *testing.T) {
	cfg := testenv.APIServer(t)
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	router, other := mkDS(t, cs, "kube-router"), mkDS(t, cs, "node-exporter")
	old1 := agentPod(t, cs, router, "kube-router-old1", "node-1", true, 0)
	agentPod(t, cs, router, "kube-router-n2", "node-2", true, 0)
	exporter := agentPod(t, cs, other, "node-exporter-1", "node-1", true, 0)

	const grace = 3 * time.Second
	r := start(t, cfg, cfg, []string{"sandboxes"}, nil, grace)
	if logs := r.logs.String(); !strings.Contains(logs, "cniAgents=[kube-system/kube-router]") {
		t.Fatalf("the log does not say the agent found:\n%s", logs)
	}
	r.expect("the initial list")

	// The rollout on node-1: the old pod goes, the new one starts, not
	// Ready at first, Ready a moment later.
	if err := cs.CoreV1().Pods("kube-system").Delete(ctx, old1.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	new1 := agentPod(t, cs, router, "kube-router-new1", "node-1", false, 0)
	time.Sleep(testDebounce + 200*time.Millisecond)
	if got := r.seen(); len(got) != 0 {
		t.Fatalf("cycles %v while node-1's new agent is not Ready", got)
	}
	new1 = setReady(t, cs, new1, true, 0)
	r.expect("node-1's new agent Ready", "nodes=node-1")
	r.expect("node-1's new agent settled (the grace after Ready)", "nodes=node-1")

	// The agent's container restarts between two status reports.
	new1 = setReady(t, cs, new1, true, 1)
	r.expect("a restart of node-1's agent", "nodes=node-1")
	r.expect("node-1's restarted agent settled", "nodes=node-1")

	// Another DaemonSet's pod on the same node: nothing.
	setReady(t, cs, exporter, false, 3)
	r.expect("another DaemonSet's pod")

	// node-1's agent crashes and stays down: its node is probed after the
	// grace (the agent being down is itself the window of exposure).
	setReady(t, cs, new1, false, 2)
	time.Sleep(grace - time.Second)
	if got := r.seen(); len(got) != 4 {
		t.Fatalf("cycles %v before the grace ended, want none new", got)
	}
	r.expect("node-1's agent not Ready for the grace", "nodes=node-1")
	r.mu.Lock()
	defer r.mu.Unlock()
	// Down (the old pod deleted), Ready, restarted, down.
	if r.events["cni-agent"] != 4 {
		t.Errorf("cni-agent events %d, want 4", r.events["cni-agent"])
	}
}

// TestAgentAppearsLater: the named agent's DaemonSet does not exist when
// the watch starts (the CNI is installed after sandprobe): once it
// appears, its pods are watched — its first pod Ready on a node is a cycle
// for that node, and so is its replacement.
func TestAgentAppearsLater(t *testing.T) {
	cfg := testenv.APIServer(t)
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, cfg, cfg, []string{"sandboxes"}, []trigger.Agent{{Namespace: "kube-system", Name: "late-agent"}}, 3*time.Second)
	if logs := r.logs.String(); !strings.Contains(logs, "not found yet") {
		t.Fatalf("the log does not say the agent is not there yet:\n%s", logs)
	}
	ds := mkDS(t, cs, "late-agent")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(r.logs.String(), "a CNI agent DaemonSet appeared") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // its pod informer's initial list
	first := agentPod(t, cs, ds, "late-agent-1", "node-7", true, 0)
	r.expect("the new agent's first pod Ready", "nodes=node-7")
	if err := cs.CoreV1().Pods("kube-system").Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	agentPod(t, cs, ds, "late-agent-2", "node-7", true, 0)
	// The replacement at once, and its settle re-check (the first pod's
	// went with it: the node's agent was down in between).
	r.expect("node-7's agent replaced", "nodes=node-7", "nodes=node-7")
}
