package drift

import (
	"context"
	"fmt"
	"log/slog"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/sandprobe/sandprobe/internal/kubeclient"
)

// KubeAPI is the part of the Kubernetes API drift reads: paged lists of
// namespaces, pods, NetworkPolicies and workloads (as their pod
// templates), whether an API group is served, and paged lists of
// CRD-backed objects.
type KubeAPI interface {
	ListNamespaces(ctx context.Context, opts metav1.ListOptions) (*corev1.NamespaceList, error)
	ListPods(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error)
	ListNetworkPolicies(ctx context.Context, namespace string, opts metav1.ListOptions) (*networkingv1.NetworkPolicyList, error)
	// ListWorkloads lists one workload resource (WorkloadResources) and
	// returns each object's pod template and the continue token.
	ListWorkloads(ctx context.Context, resource, namespace string, opts metav1.ListOptions) ([]*Template, string, error)
	// PreferredVersion is the served version of an API group, or "" when the
	// group is not served (its CRDs are not installed).
	PreferredVersion(ctx context.Context, group string) (string, error)
	ListResource(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*unstructured.UnstructuredList, error)
}

// kubeAPI is drift's reader on the one client (internal/kubeclient); it
// turns each workload list into its pod templates.
type kubeAPI struct {
	*kubeclient.Client
}

// NewKubeAPI builds drift's reader from a rest.Config.
func NewKubeAPI(cfg *rest.Config) (KubeAPI, error) {
	c, err := kubeclient.New(cfg, "sandprobe-drift")
	if err != nil {
		return nil, err
	}
	return kubeAPI{c}, nil
}

// WorkloadResources are the workload kinds drift checks through their pod
// templates, by resource name.
var WorkloadResources = []string{"deployments", "replicasets", "statefulsets", "daemonsets", "jobs", "cronjobs"}

// ListWorkloads lists one workload resource as its objects' pod templates
// and the continue token.
func (a kubeAPI) ListWorkloads(ctx context.Context, resource, ns string, opts metav1.ListOptions) ([]*Template, string, error) {
	list, err := a.Client.ListWorkloads(ctx, resource, ns, opts)
	if err != nil {
		return nil, "", err
	}
	return workloadTemplates(list)
}

// workloadTemplates turns a typed list into pod templates.
func workloadTemplates(list runtime.Object) ([]*Template, string, error) {
	switch l := list.(type) {
	case *appsv1.DeploymentList:
		return templatesOf(l.Items), l.Continue, nil
	case *appsv1.ReplicaSetList:
		return templatesOf(l.Items), l.Continue, nil
	case *appsv1.StatefulSetList:
		return templatesOf(l.Items), l.Continue, nil
	case *appsv1.DaemonSetList:
		return templatesOf(l.Items), l.Continue, nil
	case *batchv1.JobList:
		return templatesOf(l.Items), l.Continue, nil
	case *batchv1.CronJobList:
		return templatesOf(l.Items), l.Continue, nil
	}
	return nil, "", fmt.Errorf("not a workload list: %T", list)
}

func templatesOf[T any](items []T) []*Template {
	out := make([]*Template, 0, len(items))
	for i := range items {
		out = append(out, WorkloadTemplate(&items[i]))
	}
	return out
}

// KubeScan streams a live cluster through the engine: the namespaces (the
// declared ones must exist; admin network policies and Cilium select on
// namespace labels), the network policies (the union needs them all), the
// workloads' pod templates, then pods page by page, each pod folded into
// the template it was created from. Only one page of pods is in memory at a
// time.
type KubeScan struct {
	API    KubeAPI
	Engine *Engine
	// PageSize is the List limit; 500 is what kubectl uses.
	PageSize int64
	// Source names the cluster in findings ("the cluster at https://…").
	Source string
	Logger *slog.Logger
}

// Run scans the cluster into col. An error means the cluster could not be
// read (the run could not be completed), not that something drifted.
// Finding no sandbox at all is a finding, never a clean run.
func (k *KubeScan) Run(ctx context.Context, col *Collector) error {
	if k.PageSize <= 0 {
		k.PageSize = 500
	}
	if k.Logger == nil {
		k.Logger = slog.New(slog.DiscardHandler)
	}
	if k.Source == "" {
		k.Source = "the cluster"
	}
	before := col.Scanned
	e := k.Engine
	ciliumKnown, err := k.LoadPolicies(ctx, nil, col)
	if err != nil {
		return err
	}
	for _, ns := range e.p.Spec.Namespaces {
		if !e.KnowsNamespace(ns) {
			col.MissingNamespace(e.p, ns, k.Source)
		}
	}
	col.Checked("scan")
	adminKnown := e.anp.known()
	e.SetEgressKnown(true)
	col.Checked("pod")
	col.Checked("netpol")
	if ciliumKnown {
		col.Checked("cilium")
	}
	if adminKnown {
		col.Checked("anp")
	}
	if err := k.sandboxTemplatePolicies(ctx); err != nil {
		return err
	}
	ts := NewTemplates()
	if err := k.scanWorkloads(ctx, ts); err != nil {
		return err
	}
	templates, err := k.scanSandboxes(ctx, col, ts)
	if err != nil {
		return err
	}
	if err := k.scanPods(ctx, col, ts); err != nil {
		return err
	}
	if err := k.scanClaims(ctx, col, templates); err != nil {
		return err
	}
	ts.Flush(col)
	col.flushShared()
	col.RequireFound(e.p, k.Source, before)
	return nil
}

// terminalPhases leaves out pods that no longer run anything.
const terminalPhases = "status.phase!=Succeeded,status.phase!=Failed"

// LoadPolicies reads into the engine what decides the egress of pods in
// namespaces (nil: in every namespace): every namespace's labels, the
// NetworkPolicies and namespaced Cilium policies of those namespaces, and
// the cluster-wide Cilium and admin network policies. It says whether
// Cilium's policies were read; col hears the notes (a CRD not installed).
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
	if err := k.loadNamespaces(ctx); err != nil {
		return false, err
	}
	for _, ns := range namespaces {
		if err := k.loadNetworkPolicies(ctx, ns); err != nil {
			return false, err
		}
	}
	ciliumKnown, err := k.loadCilium(ctx, col, namespaces)
	if err != nil {
		return false, err
	}
	k.Engine.NoteCiliumCluster(col)
	if _, err := k.loadAdminNetworkPolicies(ctx, col); err != nil {
		return false, err
	}
	return ciliumKnown, nil
}

// loadNamespaces records every namespace's labels: admin network policies
// and Cilium select on them, and a declared namespace must exist.
func (k *KubeScan) loadNamespaces(ctx context.Context) error {
	return pages(ctx, k.PageSize, func(opts metav1.ListOptions) (string, error) {
		list, err := k.API.ListNamespaces(ctx, opts)
		if err != nil {
			return "", fmt.Errorf("list namespaces: %w", err)
		}
		for i := range list.Items {
			k.Engine.SetNamespace(list.Items[i].Name, list.Items[i].Labels)
		}
		return list.Continue, nil
	})
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
	where := func(res string) []string {
		if res == "ciliumclusterwidenetworkpolicies" {
			return []string{""}
		}
		return namespaces
	}
	return k.loadCRDPolicies(ctx, col, "cilium.io", []string{"ciliumnetworkpolicies", "ciliumclusterwidenetworkpolicies"}, func(string) string { return version }, where, k.Engine.AddCiliumPolicy)
}

// loadAdminNetworkPolicies reads AdminNetworkPolicies and the
// BaselineAdminNetworkPolicy (v1alpha1) and ClusterNetworkPolicies
// (v1alpha2) when the policy.networking.k8s.io group is served.
func (k *KubeScan) loadAdminNetworkPolicies(ctx context.Context, col *Collector) (bool, error) {
	version, err := k.API.PreferredVersion(ctx, PolicyAPIGroup)
	if err != nil {
		return false, err
	}
	if version == "" {
		col.Note("AdminNetworkPolicy CRDs are not installed (API group %s not served): AdminNetworkPolicy, BaselineAdminNetworkPolicy and ClusterNetworkPolicy were not checked", PolicyAPIGroup)
		return false, nil
	}
	versionOf := func(res string) string {
		if res == "clusternetworkpolicies" {
			return "v1alpha2"
		}
		return "v1alpha1"
	}
	everywhere := func(string) []string { return []string{""} }
	return k.loadCRDPolicies(ctx, col, PolicyAPIGroup, []string{"adminnetworkpolicies", "baselineadminnetworkpolicies", "clusternetworkpolicies"}, versionOf, everywhere, k.Engine.AddAdminNetworkPolicy)
}

// loadCRDPolicies lists CRD-backed policies of a served group in the
// namespaces where(resource) names ("" for all); a resource the group does
// not serve is noted, not an error.
func (k *KubeScan) loadCRDPolicies(ctx context.Context, col *Collector, group string, resources []string, version func(string) string,
	where func(string) []string, add func(*unstructured.Unstructured) error) (bool, error) {
	found := false
	for _, res := range resources {
		gvr := schema.GroupVersionResource{Group: group, Version: version(res), Resource: res}
		served := true
		for _, ns := range where(res) {
			err := pages(ctx, k.PageSize, func(opts metav1.ListOptions) (string, error) {
				list, err := k.API.ListResource(ctx, gvr, ns, opts)
				if err != nil {
					return "", err
				}
				for i := range list.Items {
					if err := add(&list.Items[i]); err != nil {
						return "", err
					}
				}
				return list.GetContinue(), nil
			})
			switch {
			case apierrors.IsNotFound(err):
				served = false
			case err != nil:
				return false, fmt.Errorf("list %s.%s in %s: %w", res, group, namespaceText(ns), err)
			}
		}
		if !served {
			col.Note("%s.%s/%s is not served: not checked", res, group, gvr.Version)
			continue
		}
		found = true
	}
	return found, nil
}

func namespaceText(ns string) string {
	if ns == "" {
		return "all namespaces"
	}
	return "namespace " + ns
}

// scanWorkloads checks the pod template of every workload that is a
// sandbox. Outside the sandbox namespaces a workload's own labels say
// nothing about its template's, so every namespace is read.
func (k *KubeScan) scanWorkloads(ctx context.Context, ts *Templates) error {
	for _, res := range WorkloadResources {
		err := pages(ctx, k.PageSize, func(opts metav1.ListOptions) (string, error) {
			items, cont, err := k.API.ListWorkloads(ctx, res, "", opts)
			if err != nil {
				return "", fmt.Errorf("list %s in all namespaces: %w", res, err)
			}
			for _, t := range items {
				ts.Add(k.Engine, t)
			}
			return cont, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// scanPods lists every pod of the sandbox namespaces (a pod there without
// the selector's labels is drift, so the whole namespace is read), then the
// pods elsewhere that carry the selector's labels.
func (k *KubeScan) scanPods(ctx context.Context, col *Collector, ts *Templates) error {
	e := k.Engine
	namespaces := append([]string(nil), e.p.Spec.Namespaces...)
	sort.Strings(namespaces)
	each := func(list *corev1.PodList) {
		k.Logger.Debug("pods page", "pods", len(list.Items), "more", list.Continue != "")
		for i := range list.Items {
			col.Add(ts.Pod(&list.Items[i], e.CheckPod(&list.Items[i])))
		}
	}
	for _, ns := range namespaces {
		if !e.KnowsNamespace(ns) {
			continue // reported missing: no pods to list
		}
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

// sandboxTemplatePolicies adds, for each SandboxTemplate whose controller
// has not made its NetworkPolicy yet, the policy it will make
// (Engine.AddSandboxTemplatePolicy), before any pod is judged.
func (k *KubeScan) sandboxTemplatePolicies(ctx context.Context) error {
	version, err := k.API.PreferredVersion(ctx, SandboxTemplateGroup)
	if err != nil || version == "" {
		return err // not installed: scanSandboxes says so
	}
	gvr := SandboxTemplateGVR(version)
	return pages(ctx, k.PageSize, func(opts metav1.ListOptions) (string, error) {
		list, err := k.API.ListResource(ctx, gvr, "", opts)
		if err != nil {
			return "", fmt.Errorf("list %s.%s/%s in all namespaces: %w", gvr.Resource, SandboxTemplateGroup, version, err)
		}
		for i := range list.Items {
			if _, err := k.Engine.AddSandboxTemplatePolicy(&list.Items[i]); err != nil {
				return "", err
			}
		}
		return list.GetContinue(), nil
	})
}

// scanSandboxes checks agent Sandbox objects and SandboxTemplates when
// their CRDs are installed.
func (k *KubeScan) scanSandboxes(ctx context.Context, col *Collector, ts *Templates) ([]*unstructured.Unstructured, error) {
	// The templates are kept for the claims (scanClaims): a cluster has few.
	var templates []*unstructured.Unstructured
	for _, g := range []struct {
		group, what string
		gvr         func(string) schema.GroupVersionResource
	}{
		{SandboxGroup, "Sandbox", SandboxGVR},
		{SandboxTemplateGroup, "SandboxTemplate", SandboxTemplateGVR},
	} {
		version, err := k.API.PreferredVersion(ctx, g.group)
		if err != nil {
			return nil, err
		}
		if version == "" {
			col.Note("the %s %s CRD is not installed: no %s objects to check", g.group, g.what, g.what)
			continue
		}
		gvr := g.gvr(version)
		err = pages(ctx, k.PageSize, func(opts metav1.ListOptions) (string, error) {
			list, err := k.API.ListResource(ctx, gvr, "", opts)
			if err != nil {
				return "", fmt.Errorf("list %s.%s/%s in all namespaces: %w", gvr.Resource, g.group, version, err)
			}
			for i := range list.Items {
				t, err := SandboxTemplateOf(&list.Items[i])
				if err != nil {
					return "", err
				}
				if g.what == SandboxTemplateKind {
					templates = append(templates, list.Items[i].DeepCopy())
				}
				ts.Add(k.Engine, t)
			}
			return list.GetContinue(), nil
		})
		if err != nil {
			return nil, err
		}
	}
	return templates, nil
}

// scanClaims checks SandboxClaims that name a warm pool (checkClaims)
// when the claim and pool CRDs are installed.
func (k *KubeScan) scanClaims(ctx context.Context, col *Collector, templates []*unstructured.Unstructured) error {
	version, err := k.API.PreferredVersion(ctx, SandboxTemplateGroup)
	if err != nil || version == "" {
		return err
	}
	var pools, claims []*unstructured.Unstructured
	for _, g := range []struct {
		gvr  schema.GroupVersionResource
		into *[]*unstructured.Unstructured
	}{{SandboxWarmPoolGVR(version), &pools}, {SandboxClaimGVR(version), &claims}} {
		err := pages(ctx, k.PageSize, func(opts metav1.ListOptions) (string, error) {
			list, err := k.API.ListResource(ctx, g.gvr, "", opts)
			if apierrors.IsNotFound(err) {
				return "", nil // that CRD is not installed
			}
			if err != nil {
				return "", fmt.Errorf("list %s.%s/%s in all namespaces: %w", g.gvr.Resource, SandboxTemplateGroup, version, err)
			}
			for i := range list.Items {
				*g.into = append(*g.into, list.Items[i].DeepCopy())
			}
			return list.GetContinue(), nil
		})
		if err != nil {
			return err
		}
	}
	checkClaims(k.Engine, col, templates, pools, claims)
	return nil
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
