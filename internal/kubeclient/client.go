package kubeclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Client speaks to one API server: the calls of the runner (pods, nodes,
// ConfigMaps, events, who am I) and of drift (namespaces, pods, network
// policies, workloads, discovery, CRD-backed lists).
type Client struct {
	core, networking, apps, batch *rest.RESTClient
	// raw speaks JSON for what the scheme does not know (discovery, the
	// SelfSubjectReview).
	raw     *rest.RESTClient
	params  runtime.ParameterCodec
	dynamic dynamic.Interface
}

// New builds the clients from cfg; userAgent names the caller when cfg
// names none.
func New(cfg *rest.Config, userAgent string) (*Client, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, networkingv1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("register API group: %w", err)
		}
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	codecs := serializer.NewCodecFactory(scheme)
	mk := func(gv schema.GroupVersion, apiPath string, proto bool) (*rest.RESTClient, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion = &gv
		c.APIPath = apiPath
		c.NegotiatedSerializer = codecs.WithoutConversion()
		c.ContentType, c.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
		if proto {
			c.ContentType = runtime.ContentTypeProtobuf
			c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
		}
		if c.UserAgent == "" {
			c.UserAgent = userAgent
		}
		rc, err := rest.RESTClientFor(c)
		if err != nil {
			return nil, fmt.Errorf("%s client for %s: %w", gv, cfg.Host, err)
		}
		return rc, nil
	}
	var (
		c   = &Client{params: runtime.NewParameterCodec(scheme)}
		err error
	)
	if c.core, err = mk(corev1.SchemeGroupVersion, "/api", true); err != nil {
		return nil, err
	}
	if c.networking, err = mk(networkingv1.SchemeGroupVersion, "/apis", true); err != nil {
		return nil, err
	}
	if c.apps, err = mk(appsv1.SchemeGroupVersion, "/apis", true); err != nil {
		return nil, err
	}
	if c.batch, err = mk(batchv1.SchemeGroupVersion, "/apis", true); err != nil {
		return nil, err
	}
	if c.raw, err = mk(corev1.SchemeGroupVersion, "/api", false); err != nil {
		return nil, err
	}
	dc := rest.CopyConfig(cfg)
	if dc.UserAgent == "" {
		dc.UserAgent = userAgent
	}
	if c.dynamic, err = dynamic.NewForConfig(dc); err != nil {
		return nil, fmt.Errorf("dynamic client for %s: %w", cfg.Host, err)
	}
	return c, nil
}

// WhoAmI is the user name the API server authenticates these requests as:
// a SelfSubjectReview (authentication.k8s.io/v1, served since Kubernetes
// 1.28 and open to every authenticated user), in JSON: the scheme does not
// know its group, and the answer is tiny.
func (c *Client) WhoAmI(ctx context.Context) (string, error) {
	raw, err := c.raw.Post().AbsPath("/apis/authentication.k8s.io/v1/selfsubjectreviews").
		SetHeader("Content-Type", runtime.ContentTypeJSON).SetHeader("Accept", runtime.ContentTypeJSON).
		Body([]byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)).Do(ctx).Raw()
	if err != nil {
		return "", fmt.Errorf("selfsubjectreview: %w", err)
	}
	var review struct {
		Status struct {
			UserInfo struct {
				Username string `json:"username"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(raw, &review); err != nil {
		return "", fmt.Errorf("selfsubjectreview: %w", err)
	}
	if review.Status.UserInfo.Username == "" {
		return "", fmt.Errorf("selfsubjectreview: no user name in the answer")
	}
	return review.Status.UserInfo.Username, nil
}

// PreferredVersion is the served version of an API group, or "" when the
// group is not served (its CRDs are not installed).
func (c *Client) PreferredVersion(ctx context.Context, group string) (string, error) {
	raw, err := c.raw.Get().AbsPath("/apis", group).Do(ctx).Raw()
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

// ListResource lists a CRD-backed resource.
func (c *Client) ListResource(ctx context.Context, gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	return c.dynamic.Resource(gvr).Namespace(ns).List(ctx, opts)
}

// ListWorkloads lists one workload resource ("deployments", "replicasets",
// "statefulsets", "daemonsets", "jobs", "cronjobs") as its typed list.
func (c *Client) ListWorkloads(ctx context.Context, resource, ns string, opts metav1.ListOptions) (runtime.Object, error) {
	var (
		into runtime.Object
		rc   = c.apps
	)
	switch resource {
	case "deployments":
		into = &appsv1.DeploymentList{}
	case "replicasets":
		into = &appsv1.ReplicaSetList{}
	case "statefulsets":
		into = &appsv1.StatefulSetList{}
	case "daemonsets":
		into = &appsv1.DaemonSetList{}
	case "jobs":
		into, rc = &batchv1.JobList{}, c.batch
	case "cronjobs":
		into, rc = &batchv1.CronJobList{}, c.batch
	default:
		return nil, fmt.Errorf("unknown workload resource %q", resource)
	}
	if err := rc.Get().Namespace(ns).Resource(resource).VersionedParams(&opts, c.params).Do(ctx).Into(into); err != nil {
		return nil, err
	}
	return into, nil
}

// ListNamespaces lists namespaces.
func (c *Client) ListNamespaces(ctx context.Context, opts metav1.ListOptions) (*corev1.NamespaceList, error) {
	out := &corev1.NamespaceList{}
	err := c.core.Get().Resource("namespaces").VersionedParams(&opts, c.params).Do(ctx).Into(out)
	return out, err
}

// ListNetworkPolicies lists the NetworkPolicies of a namespace.
func (c *Client) ListNetworkPolicies(ctx context.Context, ns string, opts metav1.ListOptions) (*networkingv1.NetworkPolicyList, error) {
	out := &networkingv1.NetworkPolicyList{}
	err := c.networking.Get().Namespace(ns).Resource("networkpolicies").VersionedParams(&opts, c.params).Do(ctx).Into(out)
	return out, err
}

// CreatePod creates a pod and returns it as admitted.
func (c *Client) CreatePod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := c.core.Post().Namespace(pod.Namespace).Resource("pods").Body(pod).Do(ctx).Into(out)
	return out, err
}

// GetPod reads one pod.
func (c *Client) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := c.core.Get().Namespace(namespace).Resource("pods").Name(name).Do(ctx).Into(out)
	return out, err
}

// ListPods lists the pods of a namespace ("" for all).
func (c *Client) ListPods(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	err := c.core.Get().Namespace(namespace).Resource("pods").VersionedParams(&opts, c.params).Do(ctx).Into(out)
	return out, err
}

// WatchPods watches the pods of a namespace.
func (c *Client) WatchPods(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.core.Get().Namespace(namespace).Resource("pods").VersionedParams(&opts, c.params).Watch(ctx)
}

// DeletePod deletes one pod.
func (c *Client) DeletePod(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return c.core.Delete().Namespace(namespace).Resource("pods").Name(name).Body(&opts).Do(ctx).Error()
}

// PodLogs streams a container's log (stdout and stderr interleaved).
func (c *Client) PodLogs(ctx context.Context, namespace, name string, opts *corev1.PodLogOptions) (io.ReadCloser, error) {
	return c.core.Get().Namespace(namespace).Resource("pods").Name(name).SubResource("log").VersionedParams(opts, c.params).Stream(ctx)
}

// GetNode reads one node.
func (c *Client) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	out := &corev1.Node{}
	err := c.core.Get().Resource("nodes").Name(name).Do(ctx).Into(out)
	return out, err
}

// ListNodes lists nodes.
func (c *Client) ListNodes(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	out := &corev1.NodeList{}
	err := c.core.Get().Resource("nodes").VersionedParams(&opts, c.params).Do(ctx).Into(out)
	return out, err
}

// CreateConfigMap creates a ConfigMap.
func (c *Client) CreateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	out := &corev1.ConfigMap{}
	err := c.core.Post().Namespace(cm.Namespace).Resource("configmaps").Body(cm).Do(ctx).Into(out)
	return out, err
}

// ListConfigMaps lists the ConfigMaps of a namespace.
func (c *Client) ListConfigMaps(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	out := &corev1.ConfigMapList{}
	err := c.core.Get().Namespace(namespace).Resource("configmaps").VersionedParams(&opts, c.params).Do(ctx).Into(out)
	return out, err
}

// DeleteConfigMap deletes one ConfigMap.
func (c *Client) DeleteConfigMap(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return c.core.Delete().Namespace(namespace).Resource("configmaps").Name(name).Body(&opts).Do(ctx).Error()
}

// ListEvents lists the events of a namespace.
func (c *Client) ListEvents(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.EventList, error) {
	out := &corev1.EventList{}
	err := c.core.Get().Namespace(namespace).Resource("events").VersionedParams(&opts, c.params).Do(ctx).Into(out)
	return out, err
}
