package kube

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandprobe/sandprobe/runner"
)

// ProxyPodLog is the forward proxy's record as its pods log it: the
// container's standard output, where proxies in Kubernetes write their
// access log (Squid's access_log stdio:/dev/stdout, tinyproxy without
// LogFile, Envoy's /dev/stdout). It is read after the probe from the time
// the probe started, with the narrow Role docs/kubernetes.md gives: list
// pods and get pods/log, in the proxy's namespace only.
type ProxyPodLog struct {
	Client    PodLogReader
	Namespace string
	// Pod is the pod's name, or a label selector ("app=egress-proxy") for a
	// Deployment's pods: every pod it selects is read.
	Pod       string
	Container string
}

// Name is "pod NAMESPACE/POD[/CONTAINER]".
func (p ProxyPodLog) Name() string {
	n := "pod " + p.Namespace + "/" + p.Pod
	if p.Container != "" {
		n += "/" + p.Container
	}
	return n
}

// PodLogReader is what the record needs of the API (API is one).
type PodLogReader interface {
	ListPods(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error)
	PodLogs(ctx context.Context, namespace, name string, opts *corev1.PodLogOptions) (io.ReadCloser, error)
}

func (p ProxyPodLog) pods(ctx context.Context) ([]corev1.Pod, error) {
	opts := metav1.ListOptions{LabelSelector: p.Pod}
	if !strings.Contains(p.Pod, "=") {
		opts = metav1.ListOptions{FieldSelector: "metadata.name=" + p.Pod}
	}
	list, err := p.Client.ListPods(ctx, p.Namespace, opts)
	if err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("no pod in %s matches %s", p.Namespace, p.Pod)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

// identity is each pod's UID and the container's restart count: a pod
// replaced or a container restarted during the run lost what it logged.
func (p ProxyPodLog) identity(pods []corev1.Pod) string {
	var parts []string
	for _, pod := range pods {
		restarts := int32(-1)
		for _, cs := range pod.Status.ContainerStatuses {
			if p.Container == "" || cs.Name == p.Container {
				restarts = cs.RestartCount
				break
			}
		}
		parts = append(parts, fmt.Sprintf("%s uid %s restarts %d", pod.Name, pod.UID, restarts))
	}
	return strings.Join(parts, "; ")
}

// Mark notes the pods, their containers' restarts and the time.
func (p ProxyPodLog) Mark(ctx context.Context) (runner.RecordMark, error) {
	pods, err := p.pods(ctx)
	if err != nil {
		return runner.RecordMark{}, fmt.Errorf("%s: %w", p.Name(), err)
	}
	return runner.RecordMark{At: time.Now(), Identity: p.identity(pods)}, nil
}

// logSlack reads a little before the mark: the kubelet's since-time has
// one-second resolution, and the trail's own window decides what counts.
const logSlack = 2 * time.Second

// Since streams what each pod logged since the mark.
func (p ProxyPodLog) Since(ctx context.Context, m runner.RecordMark) (io.ReadCloser, time.Time, error) {
	pods, err := p.pods(ctx)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%s: %w", p.Name(), err)
	}
	if id := p.identity(pods); id != m.Identity {
		return nil, time.Time{}, fmt.Errorf("%s was %w (%s became %s)", p.Name(), runner.ErrRotated, m.Identity, id)
	}
	since := metav1.NewTime(m.At.Add(-logSlack))
	var readers []io.Reader
	var closers []io.Closer
	for _, pod := range pods {
		rc, err := p.Client.PodLogs(ctx, p.Namespace, pod.Name, &corev1.PodLogOptions{Container: p.Container, SinceTime: &since})
		if err != nil {
			for _, c := range closers {
				c.Close()
			}
			return nil, time.Time{}, fmt.Errorf("%s: read the log of pod %s: %w", p.Name(), pod.Name, err)
		}
		readers = append(readers, rc)
		closers = append(closers, rc)
	}
	return multiCloser{io.MultiReader(readers...), closers}, time.Now(), nil
}

type multiCloser struct {
	io.Reader
	closers []io.Closer
}

func (m multiCloser) Close() error {
	for _, c := range m.closers {
		c.Close()
	}
	return nil
}
