package kube

import (
	"context"
	"io"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/sandprobe/sandprobe/internal/kubeclient"
)

// API is the part of the Kubernetes core/v1 API the backend uses. NewAPI
// implements it against a real API server (internal/kubeclient); tests
// wrap it to inject faults.
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

// NewAPI builds the runner's client (internal/kubeclient) from a
// rest.Config.
func NewAPI(cfg *rest.Config) (API, error) {
	c := rest.CopyConfig(cfg)
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
	return kubeclient.New(c, "sandprobe-runner")
}

// RESTConfig loads the kubeconfig at path (or $KUBECONFIG, or
// ~/.kube/config) with an optional context; with none of them present and
// inside a pod it uses the pod's service account, as the CronJob does.
func RESTConfig(path, kubeContext string) (*rest.Config, error) {
	return kubeclient.Config(path, kubeContext)
}

// OwnNamespace is the namespace the runner itself is in: its pod's (the
// service account's namespace file) inside a cluster, else the kubeconfig
// context's, else "default", as kubectl would pick.
func OwnNamespace(path, kubeContext string) string {
	return kubeclient.Namespace(path, kubeContext)
}
