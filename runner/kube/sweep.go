package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/sourcegraph/conc/pool"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/sandprobe/sandprobe/render"
)

// leftoverSelector matches what a run creates: probe pods carrying a run
// id, made by sandprobe.
func leftoverSelector() string {
	req, _ := labels.NewRequirement(LabelRun, selection.Exists, nil)
	return labels.SelectorFromSet(labels.Set{render.LabelManagedBy: "sandprobe"}).Add(*req).String()
}

// Sweep deletes the probe pods of earlier runs in namespace ns that are
// older than their deadline plus SweepAfter: a runner that was killed
// (SIGKILL, a node lost under the CronJob) never deleted them. Younger ones
// may belong to a runner still at work and are left alone, and so are pods
// another user created (AnnotationCreatedBy other than me, when both are
// known): the runner-scope admission policy would refuse to delete them,
// and their own runner sweeps them. An error means the namespace could not
// even be listed: the cluster is out of reach.
func (b *Backend) Sweep(ctx context.Context, ns, me string) error {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pods, err := b.API.ListPods(lctx, ns, metav1.ListOptions{LabelSelector: leftoverSelector()})
	if err != nil {
		return fmt.Errorf("reach the cluster: list probe pods in %s: %w", ns, err)
	}
	now := b.now()
	p := pool.New().WithMaxGoroutines(cmp.Or(b.Parallel, DefaultParallel))
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !b.expired(pod.ObjectMeta, now) {
			continue
		}
		if by := pod.Annotations[AnnotationCreatedBy]; me != "" && by != "" && by != me {
			b.log().Debug("a leftover probe pod of another user; its runner sweeps it", "pod", ns+"/"+pod.Name, "createdBy", by)
			continue
		}
		b.log().Info("sweeping a probe pod a killed runner left behind", "pod", ns+"/"+pod.Name, "created", pod.CreationTimestamp.Time, "phase", pod.Status.Phase)
		p.Go(func() { b.deletePod(ctx, ns, pod.Name) })
	}
	p.Wait()
	return nil
}

// expired says whether an object of an earlier run is past its deadline
// plus SweepAfter. Without a readable deadline the default probe deadline
// is assumed.
func (b *Backend) expired(m metav1.ObjectMeta, now time.Time) bool {
	deadline, err := time.ParseDuration(m.Annotations[AnnotationDeadline])
	if err != nil || deadline <= 0 {
		deadline = 2 * time.Minute
	}
	return now.After(m.CreationTimestamp.Add(deadline + cmp.Or(b.SweepAfter, DefaultSweepAfter)))
}

// deletePod deletes a pod and waits until it is gone. A kubelet that never
// confirms (a dead node) gets the pod force-deleted after a while, so the
// API keeps no trace; the kubelet kills the containers when it returns.
func (b *Backend) deletePod(ctx context.Context, ns, name string) {
	ctx, cancel := context.WithTimeout(ctx, deleteTimeout)
	defer cancel()
	// The probe keeps nothing worth a graceful shutdown.
	grace := int64(1)
	err := retryTransient(ctx, func() error {
		return b.API.DeletePod(ctx, ns, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		b.log().Warn("could not delete probe pod; the next run's sweep will", "pod", ns+"/"+name, "err", err)
		return
	}
	wctx, wcancel := context.WithTimeout(ctx, deleteTimeout/2)
	err = b.waitGone(wctx, ns, name)
	wcancel()
	if err == nil {
		return
	}
	b.log().Warn("probe pod not gone; force-deleting it", "pod", ns+"/"+name, "err", err)
	zero := int64(0)
	if err := b.API.DeletePod(ctx, ns, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		b.log().Warn("could not force-delete probe pod; the next run's sweep will", "pod", ns+"/"+name, "err", err)
		return
	}
	if err := b.waitGone(ctx, ns, name); err != nil {
		b.log().Warn("probe pod still there after force deletion", "pod", ns+"/"+name, "err", err)
	}
}

// retryTransient runs call until it succeeds, fails for good, or ctx ends:
// an API server out of reach for a moment (a NetworkPolicy engine resyncing
// the node's rules drops the runner's connection; an overloaded server
// answers 429, 5xx or times out) must not leave a probe pod behind until
// the next run's sweep, which an uninstall never runs (make e2e saw it).
func retryTransient(ctx context.Context, call func() error) error {
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 8, Cap: 8 * time.Second}
	var err error
	for {
		if err = call(); err == nil || !transient(err) || ctx.Err() != nil || backoff.Steps <= 1 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff.Step()):
		}
	}
}

// transient: an error a later attempt may not meet (the connection, or a
// server too busy to answer), as opposed to an answer (not found, refused).
func transient(err error) bool {
	var netErr net.Error
	switch {
	case errors.As(err, &netErr), utilnet.IsConnectionRefused(err), utilnet.IsConnectionReset(err), utilnet.IsProbableEOF(err):
		return true
	case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err):
		return true
	}
	return false
}

// waitGone waits until the pod no longer exists: a list that does not hold
// it, or a Deleted event on a watch from that list.
func (b *Backend) waitGone(ctx context.Context, ns, name string) error {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	for {
		list, err := b.API.ListPods(ctx, ns, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return fmt.Errorf("list pod %s/%s: %w", ns, name, err)
		}
		if len(list.Items) == 0 {
			return nil
		}
		w, err := b.API.WatchPods(ctx, ns, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return fmt.Errorf("watch pod %s/%s: %w", ns, name, err)
		}
		gone, err := untilDeleted(ctx, w)
		w.Stop()
		if gone || err != nil {
			return err
		}
		// The watch ended without the deletion: list again, without spinning.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func untilDeleted(ctx context.Context, w watch.Interface) (bool, error) {
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false, nil
			}
			switch ev.Type {
			case watch.Deleted:
				return true, nil
			case watch.Error:
				// Expired or broken: list again.
				return false, nil
			}
		}
	}
}
