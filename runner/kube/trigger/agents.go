package trigger

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/sandprobe/sandprobe/runner"
)

// Agent is a CNI or network-policy agent's DaemonSet: one pod per node,
// and while a node's pod is not running and Ready, what it enforces on that
// node may not be enforced.
type Agent struct{ Namespace, Name string }

func (a Agent) String() string { return a.Namespace + "/" + a.Name }

// KnownAgents are the DaemonSets serve --watch looks for when none is
// named: the agents of the common CNIs and policy engines, where their
// installs put them.
var KnownAgents = []Agent{
	{"kube-system", "cilium"}, {"cilium", "cilium"}, {"kube-system", "anetd"}, // GKE Dataplane V2 is Cilium
	{"kube-system", "calico-node"}, {"calico-system", "calico-node"}, {"kube-system", "canal"},
	{"kube-system", "kube-router"},
	{"kube-system", "antrea-agent"},
	{"kube-flannel", "kube-flannel-ds"}, {"kube-system", "kube-flannel-ds"},
	{"kube-system", "weave-net"},
	{"kube-system", "aws-node"}, {"kube-system", "azure-npm"}, {"kube-system", "kindnet"},
}

// ParseAgent reads --watch-cni's NAMESPACE/DAEMONSET.
func ParseAgent(s string) (Agent, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || strings.Contains(name, "/") {
		return Agent{}, fmt.Errorf("want NAMESPACE/DAEMONSET, got %q", s)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return Agent{}, fmt.Errorf("namespace %q in %q: %s", ns, s, errs[0])
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return Agent{}, fmt.Errorf("DaemonSet name %q in %q: %s", name, s, errs[0])
	}
	return Agent{ns, name}, nil
}

var daemonSets = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}

// agents finds the agents' DaemonSets (requests on pctx) and makes a pod
// informer for each, with the DaemonSet's own selector. A wanted agent not
// there yet (a CNI installed after sandprobe, an API server that did not
// answer at start) is watched for: a DaemonSet informer of its namespace
// starts the pod informer, through spawn, when it appears.
func (w *Watcher) agents(ctx, pctx context.Context, spawn func(cache.SharedIndexInformer)) ([]string, []cache.SharedIndexInformer, error) {
	wanted, auto := w.Agents, w.Agents == nil
	if auto {
		wanted = KnownAgents
	}
	byNS := map[string][]string{}
	for _, a := range wanted {
		byNS[a.Namespace] = append(byNS[a.Namespace], a.Name)
	}
	var (
		found     []string
		informers []cache.SharedIndexInformer
	)
	st := &agentState{w: w, pods: map[types.UID]agentPod{}, timers: map[string]*time.Timer{}}
	context.AfterFunc(ctx, st.stopTimers) // no request after the watch stopped
	for _, ns := range slices.Sorted(func(yield func(string) bool) {
		for ns := range byNS {
			if !yield(ns) {
				return
			}
		}
	}) {
		list, err := w.DaemonSets.ListResource(pctx, daemonSets, ns, metav1.ListOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			if ctx.Err() != nil {
				return nil, nil, errorf("list daemonsets in %s: %w", ns, ctx.Err())
			}
			w.log().Error("watch: cannot list the DaemonSets in "+ns+" now: their pods are watched once they can be", "err", err.Error())
		}
		seen := map[string]bool{}
		if err == nil {
			for i := range list.Items {
				ds := &list.Items[i]
				if !slices.Contains(byNS[ns], ds.GetName()) {
					continue
				}
				inf, err := st.podInformer(Agent{ns, ds.GetName()}, ds)
				if err != nil {
					w.log().Error("watch: DaemonSet "+ns+"/"+ds.GetName()+": its pods cannot be told apart", "err", err.Error())
					continue
				}
				seen[ds.GetName()] = true
				informers = append(informers, inf)
				found = append(found, ns+"/"+ds.GetName())
			}
		}
		var missing []string
		for _, name := range byNS[ns] {
			if !seen[name] {
				missing = append(missing, name)
				if !auto {
					w.log().Warn("watch: --watch-cni DaemonSet not found yet: its pods are watched once it appears", "daemonset", ns+"/"+name)
				}
			}
		}
		if len(missing) > 0 {
			informers = append(informers, st.lateAgents(ctx, ns, missing, spawn))
		}
	}
	if len(found) == 0 {
		w.log().Warn("watch: no CNI agent DaemonSet found (yet): an agent restart starts no cycle until one appears (name yours with --watch-cni=NAMESPACE/DAEMONSET)")
	}
	return found, informers, nil
}

// selectorOf is a DaemonSet's spec.selector as a label selector string.
func selectorOf(ds *unstructured.Unstructured) (string, error) {
	raw, ok, err := unstructured.NestedMap(ds.Object, "spec", "selector")
	if err != nil || !ok {
		return "", fmt.Errorf("no spec.selector: %w", err)
	}
	var ls metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &ls); err != nil {
		return "", fmt.Errorf("spec.selector: %w", err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil {
		return "", fmt.Errorf("spec.selector: %w", err)
	}
	if sel.Empty() {
		return "", fmt.Errorf("spec.selector selects every pod")
	}
	return sel.String(), nil
}

// podInformer is the informer of one agent's pods, judged by st, for the
// agent's DaemonSet ds.
func (st *agentState) podInformer(a Agent, ds *unstructured.Unstructured) (cache.SharedIndexInformer, error) {
	sel, err := selectorOf(ds)
	if err != nil {
		return nil, err
	}
	inf := st.w.podsOf(a, sel)
	if _, err := inf.AddEventHandler(st.handler(a)); err != nil {
		return nil, errorf("watch the pods of %s: %w", a, err)
	}
	return inf, nil
}

// lateAgents watches namespace ns for the agents' DaemonSets named
// missing, and starts the pod informer of each that appears (its initial
// list starts no cycle, like any other's).
func (st *agentState) lateAgents(ctx context.Context, ns string, missing []string, spawn func(cache.SharedIndexInformer)) cache.SharedIndexInformer {
	w := st.w
	inf := metadataInformer(w.Metadata.Resource(daemonSets).Namespace(ns))
	var mu sync.Mutex
	started := map[string]bool{}
	appeared := func(obj any) {
		m, ok := metaOf(obj)
		if !ok || !slices.Contains(missing, m.GetName()) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if started[m.GetName()] || ctx.Err() != nil {
			return
		}
		a := Agent{ns, m.GetName()}
		list, err := w.DaemonSets.ListResource(ctx, daemonSets, ns, metav1.ListOptions{FieldSelector: "metadata.name=" + a.Name})
		if err != nil || len(list.Items) != 1 {
			w.log().Error("watch: CNI agent DaemonSet "+a.String()+" appeared but cannot be read: its pods start no cycle", "err", fmt.Sprint(err))
			return
		}
		pods, err := st.podInformer(a, &list.Items[0])
		if err != nil {
			w.log().Error("watch: DaemonSet "+a.String()+": its pods cannot be told apart", "err", err.Error())
			return
		}
		started[a.Name] = true
		w.log().Info("watch: a CNI agent DaemonSet appeared: watching its pods", "daemonset", a.String())
		spawn(pods)
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: appeared})
	return inf
}

// podsOf lists and watches the pods of one agent (its selector, its
// namespace): one watch, whatever the node count.
func (w *Watcher) podsOf(a Agent, selector string) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			return w.Pods.ListPods(ctx, a.Namespace, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			return w.Pods.WatchPods(ctx, a.Namespace, opts)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	// Only what readiness needs stays in memory: a thousand nodes' agents.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			p.ManagedFields, p.Annotations = nil, nil
			p.Spec = corev1.PodSpec{NodeName: p.Spec.NodeName}
		}
		return obj, nil
	})
	return inf
}

// agentState follows every agent pod's readiness, node by node.
type agentState struct {
	w      *Watcher
	mu     sync.Mutex
	pods   map[types.UID]agentPod
	timers map[string]*time.Timer // agent@node (and settled:agent@node) → its timer
	// stopped: the watch is over, no timer starts.
	stopped bool
}

type agentPod struct {
	agent    Agent
	name     string
	node     string
	ready    bool
	restarts int32
}

func (st *agentState) handler(a Agent) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { st.observe(a, obj, false, initial) },
		UpdateFunc: func(_, cur any) { st.observe(a, cur, false, false) },
		DeleteFunc: func(obj any) { st.observe(a, obj, true, false) },
	}
}

// observe judges one pod event: a node's agent that became Ready again (a
// new pod, a restarted container) asks for its node at once; one that
// stopped being Ready with no other Ready agent there starts the grace,
// after which the node is probed anyway.
func (st *agentState) observe(a Agent, obj any, deleted, initial bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return
	}
	if !ownedBy(pod, a) {
		return
	}
	cur := agentPod{agent: a, name: pod.Name, node: pod.Spec.NodeName, ready: !deleted && ready(pod), restarts: restarts(pod)}
	st.mu.Lock()
	defer st.mu.Unlock()
	prev, known := st.pods[pod.UID]
	if deleted {
		delete(st.pods, pod.UID)
	} else {
		st.pods[pod.UID] = cur
	}
	if initial {
		return
	}
	key, node, grace := a.String()+"@"+cur.node, cur.node, st.w.grace()
	switch {
	case cur.ready && (!known || !prev.ready || cur.restarts > prev.restarts):
		st.stop(key)
		st.w.event("cni-agent")
		st.w.Request(runner.NodeScope(node), fmt.Sprintf("%s pod %s on node %s is Ready (restarts %d)", a, pod.Name, node, cur.restarts))
		// Ready is not always enforcing (kube-router has no readiness
		// probe: Ready once started, rules a few seconds later), so the
		// node is probed once more when the agent has settled: what the
		// first cycle saw of its start-up clears, a late regression shows.
		st.after("settled:"+key, grace, func() {
			if st.readyOn(a, node) {
				st.w.Request(runner.NodeScope(node), fmt.Sprintf("%s on node %s Ready for %s: probed again once settled", a, node, grace))
			}
		})
	case known && prev.ready && !cur.ready && !st.readyOn(a, node) && st.timers[key] == nil:
		st.stop("settled:" + key)
		st.w.event("cni-agent")
		st.w.log().Info("watch: a CNI agent is not Ready: its node is probed when one is, or after the grace", "agent", a.String(), "pod", pod.Name, "node", node, "grace", grace.String())
		st.after(key, grace, func() {
			if !st.readyOn(a, node) {
				st.w.Request(runner.NodeScope(node), fmt.Sprintf("%s on node %s not Ready for %s", a, node, grace))
			}
		})
	}
}

// after runs f (mu held) in d, in place of the timer key had; nothing once
// the watch stopped. mu held.
func (st *agentState) after(key string, d time.Duration, f func()) {
	st.stop(key)
	if st.stopped {
		return
	}
	st.timers[key] = time.AfterFunc(d, func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		delete(st.timers, key)
		if !st.stopped {
			f()
		}
	})
}

// stop stops key's timer; mu held.
func (st *agentState) stop(key string) {
	if t := st.timers[key]; t != nil {
		t.Stop()
		delete(st.timers, key)
	}
}

func (st *agentState) stopTimers() {
	st.mu.Lock()
	defer st.mu.Unlock()
	for key := range st.timers {
		st.stop(key)
	}
	st.stopped = true
}

// readyOn reports whether a Ready pod of the agent runs on node; mu held.
func (st *agentState) readyOn(a Agent, node string) bool {
	for _, p := range st.pods {
		if p.agent == a && p.node == node && p.ready {
			return true
		}
	}
	return false
}

func ownedBy(pod *corev1.Pod, a Agent) bool {
	for _, o := range pod.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Name == a.Name {
			return true
		}
	}
	return false
}

func ready(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func restarts(pod *corev1.Pod) int32 {
	var n int32
	for _, c := range pod.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}
