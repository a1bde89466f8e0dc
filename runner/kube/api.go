package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// API is the part of the Kubernetes core/v1 API the backend uses. NewAPI
// implements it against a real API server; tests wrap it to inject faults.
type API interface {
	CreatePod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error)
	ListPods(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error)
	WatchPods(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
	DeletePod(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error
	// PodLogs streams a container's log (stdout and stderr interleaved).
	PodLogs(ctx context.Context, namespace, name string, opts *corev1.PodLogOptions) (io.ReadCloser, error)
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	ListNodes(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
	CreateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error)
	ListConfigMaps(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.ConfigMapList, error)
	DeleteConfigMap(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error
	ListEvents(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.EventList, error)
	// WhoAmI is the user name the API server authenticates these
	// requests as (a SelfSubjectReview).
	WhoAmI(ctx context.Context) (string, error)
}

// restAPI speaks core/v1 through one REST client whose scheme knows only
// core/v1. client-go's typed clientset (k8s.io/client-go/kubernetes/typed/…)
// makes the same calls, but importing it links the scheme of every API group:
// measured with the pod calls switched to it, the stripped static binary grows
// from 31.0 MB to 54.0 MB and its resident memory at start from 22 MB to 41 MB
// (docs/kubernetes.md, "The binary budget"), for nothing the runner needs.
type restAPI struct {
	c      *rest.RESTClient
	params runtime.ParameterCodec
}

// NewAPI builds the core/v1 client from a rest.Config. Objects travel as
// protobuf, the cheapest encoding for the API server and for us.
func NewAPI(cfg *rest.Config) (API, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("register core/v1: %w", err)
	}
	c := rest.CopyConfig(cfg)
	gv := corev1.SchemeGroupVersion
	c.GroupVersion = &gv
	c.APIPath = "/api"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if c.UserAgent == "" {
		c.UserAgent = "sandprobe-runner"
	}
	if c.QPS == 0 {
		// One watch and a handful of calls per node: client-side throttling
		// at client-go's default 5 QPS would only add waits to a fan-out.
		// What bounds the load on the API server is the cap on pods in
		// flight (MaxParallel at most, about 5 requests each over a wave
		// of at least 2 s): the limiter sits above that, so it never
		// throttles below the cap (at 50 QPS a 1,000-node fan-out at its
		// cap of 63 took 2.1x a bare client's time, all of it queued here).
		c.QPS = float32(maxRequestsPerPod * MaxParallel / 2)
		c.Burst = 2 * int(c.QPS)
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("core/v1 client for %s: %w", cfg.Host, err)
	}
	return &restAPI{c: rc, params: runtime.NewParameterCodec(scheme)}, nil
}

// RESTConfig loads the kubeconfig at path (or $KUBECONFIG, or
// ~/.kube/config) with an optional context; with none of them present and
// inside a pod it uses the pod's service account, as the CronJob does.
func RESTConfig(path, kubeContext string) (*rest.Config, error) {
	if path == "" && kubeContext == "" && os.Getenv("KUBECONFIG") == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config: %w", err)
		}
		return cfg, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	return cfg, nil
}

// OwnNamespace is the namespace the runner itself is in: its pod's (the
// service account's namespace file) inside a cluster, else the kubeconfig
// context's, else "default", as kubectl would pick.
func OwnNamespace(path, kubeContext string) string {
	if path == "" && kubeContext == "" && os.Getenv("KUBECONFIG") == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && len(b) > 0 {
			return string(b)
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext}).Namespace()
	if err != nil || ns == "" {
		return "default"
	}
	return ns
}

func (a *restAPI) CreatePod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := a.c.Post().Namespace(pod.Namespace).Resource("pods").Body(pod).Do(ctx).Into(out)
	return out, err
}

func (a *restAPI) ListPods(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	err := a.c.Get().Namespace(namespace).Resource("pods").VersionedParams(&opts, a.params).Do(ctx).Into(out)
	return out, err
}

func (a *restAPI) WatchPods(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return a.c.Get().Namespace(namespace).Resource("pods").VersionedParams(&opts, a.params).Watch(ctx)
}

func (a *restAPI) DeletePod(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return a.c.Delete().Namespace(namespace).Resource("pods").Name(name).Body(&opts).Do(ctx).Error()
}

func (a *restAPI) PodLogs(ctx context.Context, namespace, name string, opts *corev1.PodLogOptions) (io.ReadCloser, error) {
	return a.c.Get().Namespace(namespace).Resource("pods").Name(name).SubResource("log").VersionedParams(opts, a.params).Stream(ctx)
}

func (a *restAPI) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	out := &corev1.Node{}
	err := a.c.Get().Resource("nodes").Name(name).Do(ctx).Into(out)
	return out, err
}

func (a *restAPI) ListNodes(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	out := &corev1.NodeList{}
	err := a.c.Get().Resource("nodes").VersionedParams(&opts, a.params).Do(ctx).Into(out)
	return out, err
}

func (a *restAPI) CreateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	out := &corev1.ConfigMap{}
	err := a.c.Post().Namespace(cm.Namespace).Resource("configmaps").Body(cm).Do(ctx).Into(out)
	return out, err
}

func (a *restAPI) ListConfigMaps(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	out := &corev1.ConfigMapList{}
	err := a.c.Get().Namespace(namespace).Resource("configmaps").VersionedParams(&opts, a.params).Do(ctx).Into(out)
	return out, err
}

func (a *restAPI) DeleteConfigMap(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return a.c.Delete().Namespace(namespace).Resource("configmaps").Name(name).Body(&opts).Do(ctx).Error()
}

func (a *restAPI) ListEvents(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.EventList, error) {
	out := &corev1.EventList{}
	err := a.c.Get().Namespace(namespace).Resource("events").VersionedParams(&opts, a.params).Do(ctx).Into(out)
	return out, err
}

// WhoAmI posts a SelfSubjectReview (authentication.k8s.io/v1, served since
// Kubernetes 1.28 and open to every authenticated user). It is JSON, not
// protobuf: the client's scheme knows only core/v1, and the answer is tiny.
func (a *restAPI) WhoAmI(ctx context.Context) (string, error) {
	raw, err := a.c.Post().AbsPath("/apis/authentication.k8s.io/v1/selfsubjectreviews").
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
