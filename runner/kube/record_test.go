package kube

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandprobe/sandprobe/runner"
)

// fakeLogs is the API's pod list and logs, for the record's own logic;
// the real read is the e2e cluster's.
type fakeLogs struct {
	pods  []corev1.Pod
	logs  map[string]string
	asked []metav1.ListOptions
}

func (f *fakeLogs) ListPods(_ context.Context, _ string, opts metav1.ListOptions) (*corev1.PodList, error) {
	f.asked = append(f.asked, opts)
	return &corev1.PodList{Items: f.pods}, nil
}

func (f *fakeLogs) PodLogs(_ context.Context, _, name string, opts *corev1.PodLogOptions) (io.ReadCloser, error) {
	if opts.SinceTime == nil {
		return nil, errors.New("no since time")
	}
	return io.NopCloser(strings.NewReader(f.logs[name])), nil
}

func proxyPod(name, uid string, restarts int32) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "squid", RestartCount: restarts}}}}
}

// Every pod the selector picks is read since the mark; a pod replaced or
// a container restarted during the run is a rotated record.
func TestProxyPodLog(t *testing.T) {
	ctx := context.Background()
	f := &fakeLogs{pods: []corev1.Pod{proxyPod("egress-proxy-a", "u1", 0), proxyPod("egress-proxy-b", "u2", 1)},
		logs: map[string]string{"egress-proxy-a": "line a\n", "egress-proxy-b": "line b\n"}}
	rec := ProxyPodLog{Client: f, Namespace: "sandbox-system", Pod: "app=egress-proxy", Container: "squid"}
	m, err := rec.Mark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rc, _, err := rec.Since(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "line a\nline b\n" {
		t.Errorf("read %q", b)
	}
	if f.asked[0].LabelSelector != "app=egress-proxy" {
		t.Errorf("listed with %+v", f.asked[0])
	}
	f.pods[1].Status.ContainerStatuses[0].RestartCount = 2
	if _, _, err := rec.Since(ctx, m); !errors.Is(err, runner.ErrRotated) {
		t.Errorf("restarted: %v", err)
	}
	f.pods = []corev1.Pod{proxyPod("egress-proxy", "u3", 0)}
	rec = ProxyPodLog{Client: f, Namespace: "sandbox-system", Pod: "egress-proxy"}
	rec.Mark(ctx)
	if last := f.asked[len(f.asked)-1]; last.FieldSelector != "metadata.name=egress-proxy" {
		t.Errorf("a pod by name listed with %+v", last)
	}
	if rec.Name() != "pod sandbox-system/egress-proxy" {
		t.Errorf("name %q", rec.Name())
	}
}
