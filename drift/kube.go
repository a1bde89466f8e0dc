package drift

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// KubeAPI is the part of the Kubernetes API drift reads: paged lists of
// pods and NetworkPolicies, whether an API group is served, and paged lists
// of CRD-backed objects.
type KubeAPI interface {
	ListPods(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error)
	ListNetworkPolicies(ctx context.Context, namespace string, opts metav1.ListOptions) (*networkingv1.NetworkPolicyList, error)
	// PreferredVersion is the served version of an API group, or "" when the
	// group is not served (its CRDs are not installed).
	PreferredVersion(ctx context.Context, group string) (string, error)
	ListResource(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*unstructured.UnstructuredList, error)
}

// restKubeAPI talks to the API server with REST clients that know only
// core/v1 and networking/v1. The typed clients of client-go
// (k8s.io/client-go/kubernetes/typed/…) make the same calls but link the
// scheme of every API group — about 13 MB more in a binary that is copied
// into every sandbox — so drift builds its own two-group scheme. Pods and
// NetworkPolicies travel as protobuf, the cheapest encoding to decode.
type restKubeAPI struct {
	core, networking, discovery *rest.RESTClient
	params                      runtime.ParameterCodec
	dynamic                     dynamic.Interface
}

// NewKubeAPI builds the clients from a rest.Config.
func NewKubeAPI(cfg *rest.Config) (KubeAPI, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("register core/v1: %w", err)
	}
	if err := networkingv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("register networking/v1: %w", err)
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	codecs := serializer.NewCodecFactory(scheme)

	mk := func(gv schema.GroupVersion, apiPath string, proto bool) (*rest.RESTClient, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion = &gv
		c.APIPath = apiPath
		c.NegotiatedSerializer = codecs.WithoutConversion()
		if proto {
			c.ContentType = runtime.ContentTypeProtobuf
			c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
		} else {
			c.ContentType = runtime.ContentTypeJSON
			c.AcceptContentTypes = runtime.ContentTypeJSON
		}
		if c.UserAgent == "" {
			c.UserAgent = "sandprobe-drift"
		}
		return rest.RESTClientFor(c)
	}
	var (
		a   = &restKubeAPI{params: runtime.NewParameterCodec(scheme)}
		err error
	)
	if a.core, err = mk(corev1.SchemeGroupVersion, "/api", true); err != nil {
		return nil, fmt.Errorf("core/v1 client: %w", err)
	}
	if a.networking, err = mk(networkingv1.SchemeGroupVersion, "/apis", true); err != nil {
		return nil, fmt.Errorf("networking/v1 client: %w", err)
	}
	if a.discovery, err = mk(corev1.SchemeGroupVersion, "/api", false); err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	dc := rest.CopyConfig(cfg)
	if dc.UserAgent == "" {
		dc.UserAgent = "sandprobe-drift"
	}
	if a.dynamic, err = dynamic.NewForConfig(dc); err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return a, nil
}

func (a *restKubeAPI) ListPods(ctx context.Context, ns string, opts metav1.ListOptions) (*corev1.PodList, error) {
	var out corev1.PodList
	err := a.core.Get().Namespace(ns).Resource("pods").VersionedParams(&opts, a.params).Do(ctx).Into(&out)
	return &out, err
}

func (a *restKubeAPI) ListNetworkPolicies(ctx context.Context, ns string, opts metav1.ListOptions) (*networkingv1.NetworkPolicyList, error) {
	var out networkingv1.NetworkPolicyList
	err := a.networking.Get().Namespace(ns).Resource("networkpolicies").VersionedParams(&opts, a.params).Do(ctx).Into(&out)
	return &out, err
}

func (a *restKubeAPI) PreferredVersion(ctx context.Context, group string) (string, error) {
	raw, err := a.discovery.Get().AbsPath("/apis", group).Do(ctx).Raw()
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("discover API group %s: %w", group, err)
	}
	var g metav1.APIGroup
	if err := json.Unmarshal(raw, &g); err != nil {
		return "", fmt.Errorf("discover API group %s: %w", group, err)
	}
	return g.PreferredVersion.Version, nil
}

func (a *restKubeAPI) ListResource(ctx context.Context, gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	return a.dynamic.Resource(gvr).Namespace(ns).List(ctx, opts)
}

// KubeScan streams a live cluster through the engine: network policies
// first (the union needs them all), then pods page by page, then agent
// Sandbox objects. Only one page of pods is in memory at a time.
type KubeScan struct {
	API    KubeAPI
	Engine *Engine
	// PageSize is the List limit; 500 is what kubectl uses.
	PageSize int64
	Logger   *slog.Logger
}

// Run scans the cluster into col. An error means the cluster could not be
// read (the run could not be completed), not that something drifted.
func (k *KubeScan) Run(ctx context.Context, col *Collector) error {
	if k.PageSize <= 0 {
		k.PageSize = 500
	}
	if k.Logger == nil {
		k.Logger = slog.New(slog.DiscardHandler)
	}
	e := k.Engine
	ciliumKnown, err := k.LoadPolicies(ctx, nil, col)
	if err != nil {
		return err
	}
	e.SetEgressKnown(true)
	col.Checked("pod")
	col.Checked("netpol")
	if ciliumKnown {
		col.Checked("cilium")
	}
	if err := k.scanPods(ctx, col); err != nil {
		return err
	}
	return k.scanSandboxes(ctx, col)
}

// terminalPhases leaves out pods that no longer run anything.
const terminalPhases = "status.phase!=Succeeded,status.phase!=Failed"

// LoadPolicies reads the NetworkPolicies and Cilium policies that can
// select pods in namespaces (nil: in every namespace) into the engine: the
// namespaced ones of those namespaces and the cluster-wide ones. It says
// whether Cilium's policies were read; col hears the notes.
func (k *KubeScan) LoadPolicies(ctx context.Context, namespaces []string, col *Collector) (bool, error) {
	if k.PageSize <= 0 {
		k.PageSize = 500
	}
	if k.Logger == nil {
		k.Logger = slog.New(slog.DiscardHandler)
	}
	if namespaces == nil {
		namespaces = []string{""}
	}
	for _, ns := range namespaces {
		if err := k.loadNetworkPolicies(ctx, ns); err != nil {
			return false, err
		}
	}
	return k.loadCilium(ctx, col, namespaces)
}

func (k *KubeScan) loadNetworkPolicies(ctx context.Context, ns string) error {
	return pages(ctx, k.PageSize, func(opts metav1.ListOptions) (string, error) {
		list, err := k.API.ListNetworkPolicies(ctx, ns, opts)
		if err != nil {
			return "", fmt.Errorf("list networkpolicies in %s: %w", namespaceText(ns), err)
		}
		k.Logger.Debug("networkpolicies page", "policies", len(list.Items), "more", list.Continue != "")
		for i := range list.Items {
			if err := k.Engine.AddNetworkPolicy(&list.Items[i]); err != nil {
				return "", err
			}
		}
		return list.Continue, nil
	})
}

// loadCilium reads Cilium policies when the cilium.io group is served: the
// namespaced ones of namespaces ("" for all) and the cluster-wide ones.
// When it is not served, the run says so once in its notes (not an error:
// many clusters run another CNI).
func (k *KubeScan) loadCilium(ctx context.Context, col *Collector, namespaces []string) (bool, error) {
	version, err := k.API.PreferredVersion(ctx, "cilium.io")
	if err != nil {
		return false, err
	}
	if version == "" {
		col.Note("Cilium CRDs are not installed (API group cilium.io not served): CiliumNetworkPolicy and CiliumClusterwideNetworkPolicy were not checked")
		return false, nil
	}
	found := false
	for _, res := range []string{"ciliumnetworkpolicies", "ciliumclusterwidenetworkpolicies"} {
		gvr := schema.GroupVersionResource{Group: "cilium.io", Version: version, Resource: res}
		where := namespaces
		if res == "ciliumclusterwidenetworkpolicies" {
			where = []string{""}
		}
		served := true
		for _, ns := range where {
			err := pages(ctx, k.PageSize, func(opts metav1.ListOptions) (string, error) {
				list, err := k.API.ListResource(ctx, gvr, ns, opts)
				if err != nil {
					return "", err
				}
				for i := range list.Items {
					if err := k.Engine.AddCiliumPolicy(&list.Items[i]); err != nil {
						return "", err
					}
				}
				return list.GetContinue(), nil
			})
			switch {
			case apierrors.IsNotFound(err):
				served = false
			case err != nil:
				return false, fmt.Errorf("list %s.cilium.io in %s: %w", res, namespaceText(ns), err)
			}
		}
		if !served {
			col.Note("%s.cilium.io/%s is not served: not checked", res, version)
			continue
		}
		found = true
	}
	return found, nil
}

// scanPods lists every pod of the sandbox namespaces (a pod there without
// the selector's labels is drift, so the whole namespace is read), then the
// pods elsewhere that carry the selector's labels.
func (k *KubeScan) scanPods(ctx context.Context, col *Collector) error {
	e := k.Engine
	namespaces := append([]string(nil), e.p.Spec.Namespaces...)
	sort.Strings(namespaces)
	each := func(list *corev1.PodList) {
		k.Logger.Debug("pods page", "pods", len(list.Items), "more", list.Continue != "")
		for i := range list.Items {
			col.Add(e.CheckPod(&list.Items[i]))
		}
	}
	for _, ns := range namespaces {
		err := pages(ctx, k.PageSize, func(opts metav1.ListOptions) (string, error) {
			opts.FieldSelector = terminalPhases
			list, err := k.API.ListPods(ctx, ns, opts)
			if err != nil {
				return "", fmt.Errorf("list pods in namespace %s: %w", ns, err)
			}
			each(list)
			return list.Continue, nil
		})
		if err != nil {
			return err
		}
	}
	sel := selectorText(e.p.Spec.Selector.MatchLabels)
	fieldSel := terminalPhases
	for _, ns := range namespaces {
		fieldSel += "," + fields.OneTermNotEqualSelector("metadata.namespace", ns).String()
	}
	return pages(ctx, k.PageSize, func(opts metav1.ListOptions) (string, error) {
		opts.LabelSelector = sel
		opts.FieldSelector = fieldSel
		list, err := k.API.ListPods(ctx, "", opts)
		if err != nil {
			return "", fmt.Errorf("list pods with labels %s in all namespaces: %w", sel, err)
		}
		each(list)
		return list.Continue, nil
	})
}

// scanSandboxes checks agent Sandbox objects when their CRD is installed.
func (k *KubeScan) scanSandboxes(ctx context.Context, col *Collector) error {
	version, err := k.API.PreferredVersion(ctx, SandboxGroup)
	if err != nil {
		return err
	}
	if version == "" {
		col.Note("the agents.x-k8s.io Sandbox CRD is not installed: no Sandbox objects to check")
		return nil
	}
	gvr := SandboxGVR(version)
	return pages(ctx, k.PageSize, func(opts metav1.ListOptions) (string, error) {
		list, err := k.API.ListResource(ctx, gvr, "", opts)
		if err != nil {
			return "", fmt.Errorf("list sandboxes.%s/%s in all namespaces: %w", SandboxGroup, version, err)
		}
		for i := range list.Items {
			fs, ok, err := k.Engine.CheckSandbox(&list.Items[i])
			if err != nil {
				return "", err
			}
			if ok {
				col.Add(fs)
			}
		}
		return list.GetContinue(), nil
	})
}

func namespaceText(ns string) string {
	if ns == "" {
		return "all namespaces"
	}
	return "namespace " + ns
}

// pages drives Limit/Continue pagination: fetch returns the continue token.
func pages(ctx context.Context, limit int64, fetch func(metav1.ListOptions) (string, error)) error {
	opts := metav1.ListOptions{Limit: limit}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		next, err := fetch(opts)
		if err != nil {
			return err
		}
		if next == "" {
			return nil
		}
		opts.Continue = next
	}
}
