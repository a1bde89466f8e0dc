package testenv

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// SimulatedNodes are kwok's fake nodes beside the real nodes of a real
// cluster (the single-node cluster of hack/cluster) — SIMULATED: no
// container runs on them. kwok's controller, pointed at the cluster's own
// API server, plays their kubelets through hack/kwok/stages.yaml, and only
// theirs (it manages nodes annotated kwok.x-k8s.io/node=fake); it renews
// their leases, so the cluster's node lifecycle controller keeps them
// Ready. Their taints (KwokOptions.NodeTaints) keep every pod that does
// not tolerate them — the run's control pod, other tests' pods — on the
// real nodes. They have no address: nothing can dial them.
type SimulatedNodes struct {
	Names      []string
	Dir        string
	kubeconfig string
	cs         kubernetes.Interface
	opts       KwokOptions
	stop       func()
}

// The results are fixed when kwok starts (its stages), and a restarted kwok
// leaves the nodes alone until the old one's leases expire (it holds a node
// under an identity unique to the process): a test that wants a node to
// break later gives it the broken result from the start and keeps it out
// of the pool (a taint) until then.

// StartSimulatedNodes adds opts.Nodes fake nodes to the cluster behind
// kubeconfig (the caller holds the cluster, e.g. through Cluster) and
// removes them after the test: kwok's controller, then their pods, leases
// and the nodes. About 2 s plus the lifecycle controller lifting the
// not-ready taint (≤ 5 s).
func StartSimulatedNodes(t testing.TB, kubeconfig string, opts KwokOptions) *SimulatedNodes {
	t.Helper()
	if opts.NamePrefix == "" {
		t.Fatal("simulated nodes on a real cluster need a NamePrefix that says so")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &SimulatedNodes{Dir: t.TempDir(), kubeconfig: kubeconfig, cs: cs, opts: opts}
	for i := range opts.Nodes {
		s.Names = append(s.Names, opts.nodeName(i))
	}
	s.startController(t)
	t.Cleanup(func() { s.remove(t) })
	(&Kwok{Dir: s.Dir}).createNodes(t, cs, opts)
	return s
}

func (s *SimulatedNodes) startController(t testing.TB) {
	t.Helper()
	stages := filepath.Join(s.Dir, "kwok.yaml")
	writeFile(t, stages, kwokStages(t, s.opts))
	s.stop = startDaemon(t, s.Dir, "kwok", KwokBinary(t),
		"--kubeconfig", s.kubeconfig, "--config", stages,
		"--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake", "--v", "WARN")
}

// remove deletes what the simulated nodes put in the cluster: pods still
// bound to them, their leases, the nodes; and checks they are gone, so the
// next user of the shared cluster finds only its real node.
func (s *SimulatedNodes) remove(t testing.TB) {
	// kwok first: it would renew a lease the moment it is gone. Pods are
	// deleted at once (no kubelet to wait for).
	s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var zero int64
	for _, n := range s.Names {
		pods, err := s.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n).String()})
		if err != nil {
			t.Errorf("list pods on simulated node %s: %v", n, err)
			continue
		}
		for _, p := range pods.Items {
			if err := s.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete pod %s/%s on simulated node %s: %v", p.Namespace, p.Name, n, err)
			}
		}
		if err := s.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete the lease of simulated node %s: %v", n, err)
		}
		if err := s.cs.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete simulated node %s: %v", n, err)
		}
	}
	for {
		left := s.Left(ctx, t)
		if len(left) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("simulated nodes still in the cluster after their removal: %s (kwok log %s)", strings.Join(left, ", "), filepath.Join(s.Dir, "kwok.log"))
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Left lists what of the simulated nodes is still in the cluster: the
// nodes, their leases, pods bound to them.
func (s *SimulatedNodes) Left(ctx context.Context, t testing.TB) []string {
	t.Helper()
	var left []string
	nodes, err := s.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list nodes: %v", err)
	}
	for _, n := range nodes.Items {
		if n.Annotations["kwok.x-k8s.io/node"] == "fake" {
			left = append(left, "node/"+n.Name)
		}
	}
	for _, n := range s.Names {
		if _, err := s.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n, metav1.GetOptions{}); err == nil {
			left = append(left, "lease/"+n)
		}
		pods, err := s.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n).String()})
		if err == nil {
			for _, p := range pods.Items {
				left = append(left, "pod/"+p.Namespace+"/"+p.Name)
			}
		}
	}
	return left
}

// ControllerLog is kwok's log (for a failing test's message).
func (s *SimulatedNodes) ControllerLog() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "kwok.log"))
	return string(b)
}
