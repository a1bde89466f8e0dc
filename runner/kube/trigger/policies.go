package trigger

import (
	"context"
	"maps"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/runner"
)

// PolicyKind is an egress policy kind the watch follows.
type PolicyKind struct {
	Kind string // "networkpolicy": the kind label of sandprobe_watch_events_total
	GVR  schema.GroupVersionResource
	// Namespaced kinds govern the pods of their own namespace; the others
	// select pods anywhere, so a change reaches every sandbox namespace.
	Namespaced bool
}

// PolicyKinds are the kinds the watch follows, each only when the API
// server serves it (a CRD not installed is no error).
var PolicyKinds = []PolicyKind{
	{"networkpolicy", schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}, true},
	{"ciliumnetworkpolicy", schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"}, true},
	{"ciliumclusterwidenetworkpolicy", schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumclusterwidenetworkpolicies"}, false},
	{"adminnetworkpolicy", schema.GroupVersionResource{Group: drift.PolicyAPIGroup, Version: "v1alpha1", Resource: "adminnetworkpolicies"}, false},
	{"baselineadminnetworkpolicy", schema.GroupVersionResource{Group: drift.PolicyAPIGroup, Version: "v1alpha1", Resource: "baselineadminnetworkpolicies"}, false},
	{"clusternetworkpolicy", schema.GroupVersionResource{Group: drift.PolicyAPIGroup, Version: "v1alpha2", Resource: "clusternetworkpolicies"}, false},
}

// policies makes an informer for every served policy kind and returns
// them with the kinds watched. A kind not served is logged and left out; one
// the runner may not list is an error in the log (a blind spot the
// scheduled cycles still cover), not a reason to stop.
// Its requests run on pctx; ctx is the watch's.
func (w *Watcher) policies(ctx, pctx context.Context) ([]string, []cache.SharedIndexInformer, error) {
	var (
		watched, absent []string
		informers       []cache.SharedIndexInformer
	)
	for _, k := range PolicyKinds {
		_, err := w.served(pctx, k.GVR)
		switch {
		case apierrors.IsNotFound(err):
			absent = append(absent, k.Kind)
			continue
		case apierrors.IsForbidden(err):
			w.log().Error("watch: may not list "+k.GVR.Resource+"."+k.GVR.Group+": its changes start no cycle (grant list and watch; docs/kubernetes.md)", "err", err.Error())
			continue
		case err != nil && ctx.Err() != nil:
			return nil, nil, errorf("list %s: %w", k.GVR.Resource, ctx.Err())
		case err != nil:
			// The API server answered badly once: the informer retries.
			w.log().Warn("watch: list "+k.GVR.Resource+"."+k.GVR.Group+" failed; watching it anyway", "err", err.Error())
		}
		inf := w.metadataInformer(k.GVR)
		if _, err := inf.AddEventHandler(w.policyHandler(k)); err != nil {
			return nil, nil, errorf("watch %s: %w", k.Kind, err)
		}
		informers = append(informers, inf)
		watched = append(watched, k.Kind)
	}
	// Namespaces: admin network policies and Cilium select the pods they
	// govern by their namespace's labels, so a sandbox namespace relabelled
	// can fall out of a deny (or into an allow).
	nsGVR := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	if _, err := w.served(pctx, nsGVR); apierrors.IsForbidden(err) {
		w.log().Error("watch: may not list namespaces: a sandbox namespace relabelled starts no cycle (grant list and watch; docs/kubernetes.md)", "err", err.Error())
	} else {
		inf := w.metadataInformer(nsGVR)
		if _, err := inf.AddEventHandler(w.namespaceHandler()); err != nil {
			return nil, nil, errorf("watch namespaces: %w", err)
		}
		informers = append(informers, inf)
		watched = append(watched, KindNamespace)
	}
	if len(absent) > 0 {
		w.log().Info("watch: kinds not served by the API server (CRDs not installed) are not watched", "absent", absent)
	}
	return watched, informers, nil
}

// metadataInformer lists and watches one kind in every namespace, as
// metadata only. (client-go's metadatainformer would do the same, but it
// links every typed informer of client-go: 13 MB more in the runner.)
func (w *Watcher) metadataInformer(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
	return metadataInformer(w.Metadata.Resource(gvr))
}

// metadataInformer lists and watches res as metadata only.
func metadataInformer(res metadata.ResourceInterface) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return res.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return res.Watch(ctx, opts)
		},
	}
	return cache.NewSharedIndexInformer(lw, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
}

// served asks the API server whether it serves gvr to the runner: a list
// of one (NotFound: not served; Forbidden: no right).
func (w *Watcher) served(ctx context.Context, gvr schema.GroupVersionResource) (runtime.Object, error) {
	return w.Metadata.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
}

// policyHandler turns a change of one kind into a request: the object's
// namespace when it is a sandbox namespace, every namespace for a
// cluster-scoped kind.
func (w *Watcher) policyHandler(k PolicyKind) cache.ResourceEventHandler {
	changed := func(obj any, what string) {
		m, ok := metaOf(obj)
		if !ok {
			return
		}
		w.event(k.Kind)
		name := m.GetName()
		if k.Namespaced {
			name = m.GetNamespace() + "/" + name
		}
		why := k.Kind + " " + name + " " + what
		switch {
		case !k.Namespaced:
			w.Request(runner.FullScope(), why)
		case slices.Contains(w.Namespaces, m.GetNamespace()):
			w.Request(runner.NamespaceScope(m.GetNamespace()), why)
		default:
			w.log().Debug("watch: change outside the sandbox namespaces", "change", why)
		}
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if !initial {
				changed(obj, "created")
			}
		},
		UpdateFunc: func(old, cur any) {
			if specChanged(old, cur) {
				changed(cur, "changed")
			}
		},
		DeleteFunc: func(obj any) { changed(obj, "deleted") },
	}
}

// KindNamespace is the kind label of a sandbox namespace's changes.
const KindNamespace = "namespace"

// namespaceHandler asks for a sandbox namespace whose labels changed, that
// appeared (a declared namespace created) or that went away.
func (w *Watcher) namespaceHandler() cache.ResourceEventHandler {
	changed := func(obj any, what string) {
		m, ok := metaOf(obj)
		if !ok {
			return
		}
		w.event(KindNamespace)
		if slices.Contains(w.Namespaces, m.GetName()) {
			w.Request(runner.NamespaceScope(m.GetName()), "namespace "+m.GetName()+" "+what)
		}
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if !initial {
				changed(obj, "created")
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := metaOf(old)
			c, ok2 := metaOf(cur)
			if ok1 && ok2 && !maps.Equal(o.GetLabels(), c.GetLabels()) {
				changed(cur, "relabelled")
			}
		},
		DeleteFunc: func(obj any) { changed(obj, "deleted") },
	}
}

// specChanged reports whether an update can change what the policy does.
// Its generation moves with its spec (a status written by every Cilium
// agent does not move it, and must not start a cycle per node); an object
// without one counts every new resourceVersion. The same object re-listed
// after a dropped watch has the same of both: no change.
func specChanged(old, cur any) bool {
	o, ok1 := metaOf(old)
	c, ok2 := metaOf(cur)
	if !ok1 || !ok2 {
		return true
	}
	if o.GetResourceVersion() == c.GetResourceVersion() {
		return false
	}
	if o.GetGeneration() > 0 && c.GetGeneration() > 0 {
		return o.GetGeneration() != c.GetGeneration() || (o.GetDeletionTimestamp() == nil) != (c.GetDeletionTimestamp() == nil)
	}
	return true
}

// metaOf is the object's metadata, also for a deletion the informer only
// learnt of by re-listing (DeletedFinalStateUnknown).
func metaOf(obj any) (metav1.Object, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	return m, ok
}
