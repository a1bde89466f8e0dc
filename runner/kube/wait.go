package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/sourcegraph/conc"

	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// watchTimeout makes the API server end each watch after a while, as
// client-go's reflectors do; the loop resumes from the last version seen.
const watchTimeout = 5 * time.Minute

// attempt is one probe pod: its contexts, its latest state and what it is
// called in reports.
type attempt struct {
	b        *Backend
	r        *run
	ctx      context.Context // the caller's: cancelled on ctrl-C or SIGTERM
	runCtx   context.Context // ctx bounded by the run's deadline
	ns, name string
	node     string // the node it was sent to, "" when the scheduler picks
	pl       placement
	stray    *stray // set for the probe of pods without the sandbox labels
	target   string
	where    report.Location // the typed location behind target
	pod      *corev1.Pod     // the latest state seen
	rv       string          // the resource version to watch from
	times    podTimes
	// When the pod was first seen unschedulable or unable to create its
	// container; zero while it is not.
	unschedulableSince, stuckSince time.Time
	// prefetch reads the probe's node while the probe runs.
	prefetch   *conc.WaitGroup
	prefetched bool
}

// prefetchNode starts reading the node a probe pod was bound to, for the
// kernel cross-check and the node-pool parity after it ends: the read
// overlaps the probe instead of following it (and a connection to the API
// server lost at the probe's end, seen under kube-router's resyncs, no
// longer costs the run its cross-check).
func (a *attempt) prefetchNode(node string) {
	if a.prefetched || a.pl.control || a.prefetch == nil || node == "" {
		return
	}
	a.prefetched = true
	ctx := a.runCtx
	a.prefetch.Go(func() { a.r.nodes.get(ctx, node) })
}

func (a *attempt) cannot(reason, format string, args ...any) error {
	return &runner.CouldNotRun{Target: a.target, Where: a.where, Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// place names where the attempt reports from once its pod runs on node.
func (a *attempt) place(node string) {
	a.where = a.pl.location(node)
	a.target = a.where.String()
}

// located gives a could-not-run the runner made from the attempt's target
// its typed location too.
func (a *attempt) located(err error) error {
	var cnr *runner.CouldNotRun
	if errors.As(err, &cnr) && cnr.Target == a.target {
		cnr.Where = a.where
	}
	return err
}

// probeOne creates one probe pod, waits for it to end, collects its result
// and deletes it.
func (b *Backend) probeOne(ctx context.Context, r *run, pl placement) (report.ProbeResult, error) {
	runCtx, cancel := context.WithTimeout(ctx, r.deadline)
	defer cancel()
	pod := b.probePod(r, pl)
	var prefetch conc.WaitGroup
	defer prefetch.Wait()
	a := &attempt{b: b, r: r, ctx: ctx, runCtx: runCtx, ns: pod.Namespace, name: pod.Name, node: pl.node, pl: pl, stray: pl.stray, prefetch: &prefetch}
	// Until the pod has a node, the run is named by its namespace, not the
	// pod: a pod name is new every run and would make a new metric series
	// each time (the details name the pod).
	a.place(pl.node)
	defer r.track.set(a.ns+"/"+a.name, "")
	r.track.set(a.ns+"/"+a.name, "creating")
	// The create itself is not cut short by a cancellation: a request
	// cancelled in flight may still have made the pod, which nobody would
	// then delete. Once created, a cancelled run ends at once (wait sees
	// it) and the pod is deleted below.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(runCtx), min(r.deadline, 30*time.Second))
	created, err := b.API.CreatePod(cctx, pod)
	ccancel()
	if err != nil {
		return report.ProbeResult{}, a.createError(err)
	}
	a.times.created = time.Now()
	a.pod, a.rv = created, created.ResourceVersion
	// Parity judges the pod as admitted: a mutating webhook may have
	// changed its labels.
	admitted := created.DeepCopy()
	if pl.control {
		r.controlPod.Store(admitted)
	}
	// Deletion must happen even when ctx is cancelled or the deadline
	// passed, so it gets a fresh context of its own.
	defer func() {
		r.track.set(a.ns+"/"+a.name, "deleting")
		b.deletePod(context.WithoutCancel(ctx), a.ns, a.name)
		a.times.deleted = time.Now()
		if b.observe != nil {
			b.observe(a.times)
		}
	}()
	b.log().Debug("probe pod created", "pod", a.ns+"/"+a.name, "node", pl.node, "runtimeClass", pl.runtimeClass, "stray", pl.stray != nil)
	final, err := a.wait()
	if err != nil {
		return report.ProbeResult{}, err
	}
	a.times.finished = time.Now()
	r.track.set(a.ns+"/"+a.name, "collecting the result")
	res, err := a.collect(final, admitted)
	a.times.collected = time.Now()
	a.times.result = res
	return res, err
}

// createError names why the API server did not take the pod.
func (a *attempt) createError(err error) error {
	switch {
	case a.ctx.Err() != nil:
		return fmt.Errorf("create pod %s/%s: %w", a.ns, a.name, a.ctx.Err())
	case a.runCtx.Err() != nil:
		return a.cannot(runner.ReasonDeadline, "create pod %s/%s: not done within %s", a.ns, a.name, a.r.deadline)
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "cannot create resource"):
		return a.cannot(runner.ReasonLaunch, "create pod %s/%s: %v (grant the runner's service account create on pods in %s: sandprobe render --format rbac)", a.ns, a.name, err, a.ns)
	case apierrors.IsNotFound(err) && a.pl.control:
		return a.cannot(runner.ReasonLaunch, "create pod %s/%s: %v (does namespace %s exist? it holds the control pod: --control-namespace)", a.ns, a.name, err, a.ns)
	case apierrors.IsNotFound(err):
		return a.cannot(runner.ReasonLaunch, "create pod %s/%s: %v (does namespace %s exist? it is one of the policy's spec.namespaces)", a.ns, a.name, err, a.ns)
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		// An admission plugin or policy (ValidatingAdmissionPolicy, Pod
		// Security, a webhook, a quota) refused a pod that looks exactly
		// like a sandbox.
		return a.cannot(runner.ReasonAdmission, "the API server refused probe pod %s/%s: %v", a.ns, a.name, err)
	}
	return a.cannot(runner.ReasonLaunch, "create pod %s/%s: %v", a.ns, a.name, err)
}

// wait follows the pod with a watch until it has Succeeded or Failed, or
// fails closed with the reason it never will. A watch that ends is resumed
// from the last resource version seen; one whose version expired (410)
// starts again from a fresh list. Only a terminal phase ends the wait: an
// empty answer, a closed stream or a missing pod never counts as done.
func (a *attempt) wait() (*corev1.Pod, error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if done, err := a.judge(); done || err != nil {
			return a.pod, err
		}
		timeout := int64(watchTimeout / time.Second)
		w, err := a.b.API.WatchPods(a.runCtx, a.ns, metav1.ListOptions{
			FieldSelector:       fields.OneTermEqualSelector("metadata.name", a.name).String(),
			ResourceVersion:     a.rv,
			AllowWatchBookmarks: true,
			TimeoutSeconds:      &timeout,
		})
		if err != nil {
			if a.runCtx.Err() != nil {
				return a.ended()
			}
			if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
				a.b.log().Debug("watch failed; listing again", "pod", a.ns+"/"+a.name, "err", err)
				if !a.sleep(time.Second) {
					return a.ended()
				}
			}
			if err := a.relist(); err != nil {
				return a.pod, err
			}
			continue
		}
		began := time.Now()
		relist, err := a.follow(w, tick)
		w.Stop()
		if err != nil {
			return a.pod, err
		}
		if a.runCtx.Err() != nil {
			return a.ended()
		}
		if time.Since(began) < 100*time.Millisecond && !a.sleep(200*time.Millisecond) {
			// A server that ends every watch at once is not spun on.
			return a.ended()
		}
		if relist {
			if err := a.relist(); err != nil {
				return a.pod, err
			}
		}
	}
}

// follow reads one watch until it ends. It returns true when the version
// to resume from is gone and the pod must be listed afresh.
func (a *attempt) follow(w watch.Interface, tick *time.Ticker) (bool, error) {
	for {
		select {
		case <-a.runCtx.Done():
			return false, nil
		case <-tick.C:
			if _, err := a.judge(); err != nil {
				return false, err
			}
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false, nil // the server ended the watch: resume from a.rv
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				pod, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				a.pod, a.rv = pod, pod.ResourceVersion
				if done, err := a.judge(); done || err != nil {
					return false, err
				}
			case watch.Bookmark:
				if m, err := metaOf(ev.Object); err == nil {
					a.rv = m.GetResourceVersion()
				}
			case watch.Deleted:
				return false, a.cannot(runner.ReasonNoResult, "probe pod %s/%s was deleted by someone else before it finished (%s)", a.ns, a.name, describe(a.pod))
			case watch.Error:
				// Mostly 410 (the version was compacted away); whatever
				// it is, a fresh list is the safe place to resume from.
				a.b.log().Debug("watch error; listing again", "pod", a.ns+"/"+a.name, "err", apierrors.FromObject(ev.Object))
				return true, nil
			}
		}
	}
}

// relist fetches the pod afresh and the version to watch from.
func (a *attempt) relist() error {
	list, err := a.b.API.ListPods(a.runCtx, a.ns, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", a.name).String()})
	if err != nil {
		if a.runCtx.Err() != nil {
			return nil // ended() reports it
		}
		a.b.log().Debug("list failed; retrying", "pod", a.ns+"/"+a.name, "err", err)
		a.sleep(time.Second)
		return nil
	}
	if len(list.Items) == 0 {
		return a.cannot(runner.ReasonNoResult, "probe pod %s/%s disappeared before it finished (%s)", a.ns, a.name, describe(a.pod))
	}
	a.pod, a.rv = &list.Items[0], list.ResourceVersion
	return nil
}

func (a *attempt) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-a.runCtx.Done():
		return false
	}
}

// ended explains why waiting stopped before a terminal phase: the caller
// interrupted, or the deadline passed. A pod that ended just then is
// still collected.
func (a *attempt) ended() (*corev1.Pod, error) {
	if a.ctx.Err() != nil {
		return a.pod, fmt.Errorf("wait for pod %s/%s: %w", a.ns, a.name, a.ctx.Err())
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), 10*time.Second)
	defer cancel()
	list, err := a.b.API.ListPods(ctx, a.ns, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", a.name).String()})
	if err == nil && len(list.Items) == 1 {
		a.pod = &list.Items[0]
		if terminal(a.pod) {
			return a.pod, nil
		}
	}
	return a.pod, a.cannot(runner.ReasonDeadline, "the probe pod %s/%s did not finish within %s: %s%s", a.ns, a.name, a.r.deadline, describe(a.pod), a.lastWarning(ctx))
}

func terminal(p *corev1.Pod) bool {
	return p != nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed)
}

// Waiting reasons of a container whose image cannot be had.
var pullFailures = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true,
	"InvalidImageName": true, "RegistryUnavailable": true, "SignatureValidationFailed": true,
}

// Waiting reasons of a container the kubelet cannot create; some clear up
// (a ConfigMap that appears late), so they get the grace.
var createFailures = map[string]bool{
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
	"PreStartHookError": true, "PostStartHookError": true,
}

// judge looks at the latest pod: done when it is terminal, an error when it
// never will be (or has been stuck for longer than the grace), and the
// progress line either way.
func (a *attempt) judge() (bool, error) {
	p := a.pod
	if a.node == "" && p.Spec.NodeName != "" {
		a.place(p.Spec.NodeName)
	}
	a.prefetchNode(p.Spec.NodeName)
	key := a.ns + "/" + a.name
	if terminal(p) {
		a.r.track.set(key, "ended: "+string(p.Status.Phase))
		return true, nil
	}
	if p.DeletionTimestamp != nil {
		return false, a.cannot(runner.ReasonNoResult, "probe pod %s/%s is being deleted by someone else before it finished (%s)", a.ns, a.name, describe(p))
	}
	grace := cmp.Or(a.b.UnschedulableGrace, DefaultUnschedulableGrace)
	now := time.Now()
	for _, cs := range allStatuses(p) {
		w := cs.State.Waiting
		if w == nil {
			continue
		}
		if pullFailures[w.Reason] {
			return false, a.cannot(runner.ReasonImagePull, "container %s of pod %s/%s cannot get image %s: %s: %s", cs.Name, a.ns, a.name, cs.Image, w.Reason, w.Message)
		}
		if createFailures[w.Reason] {
			if a.stuckSince.IsZero() {
				a.stuckSince = now
			}
			if now.Sub(a.stuckSince) >= grace {
				return false, a.cannot(runner.ReasonLaunch, "container %s of pod %s/%s could not be created for %s: %s: %s", cs.Name, a.ns, a.name, grace, w.Reason, w.Message)
			}
		}
	}
	if c := condition(p, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
		if a.unschedulableSince.IsZero() {
			a.unschedulableSince = now
		}
		if now.Sub(a.unschedulableSince) >= grace {
			return false, a.cannot(runner.ReasonUnschedulable, "probe pod %s/%s stayed unschedulable for %s: %s", a.ns, a.name, grace, c.Message)
		}
	} else {
		a.unschedulableSince = time.Time{}
	}
	a.r.track.set(key, describe(p))
	return false, nil
}

// describe says where a pod is in its life, for progress and errors.
func describe(p *corev1.Pod) string {
	if p == nil {
		return "not created"
	}
	if terminal(p) {
		return "ended: " + string(p.Status.Phase)
	}
	if c := condition(p, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse {
		return fmt.Sprintf("pending: not scheduled: %s", cmp.Or(c.Message, c.Reason))
	}
	if p.Spec.NodeName == "" {
		return "pending: waiting for a node"
	}
	for _, cs := range allStatuses(p) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" {
			msg := w.Reason
			if w.Reason == "ContainerCreating" {
				msg = "creating the container (pulling images, mounting volumes)"
			}
			if w.Message != "" {
				msg += ": " + w.Message
			}
			return fmt.Sprintf("pending on %s: container %s %s", p.Spec.NodeName, cs.Name, msg)
		}
	}
	if p.Status.Phase == corev1.PodRunning {
		return "running on " + p.Spec.NodeName
	}
	return fmt.Sprintf("pending on %s", p.Spec.NodeName)
}

func allStatuses(p *corev1.Pod) []corev1.ContainerStatus {
	return append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
}

func condition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// lastWarning is the pod's latest Warning event ("; last event: …"), the
// kubelet's own words for why it is stuck; "" when there is none or events
// cannot be read.
func (a *attempt) lastWarning(ctx context.Context) string {
	list, err := a.b.API.ListEvents(ctx, a.ns, metav1.ListOptions{FieldSelector: fields.Set{"involvedObject.name": a.name, "type": corev1.EventTypeWarning}.String()})
	if err != nil || len(list.Items) == 0 {
		return ""
	}
	last := list.Items[0]
	for _, e := range list.Items[1:] {
		if eventTime(e).After(eventTime(last)) {
			last = e
		}
	}
	return fmt.Sprintf("; last event: %s: %s", last.Reason, strings.TrimSpace(last.Message))
}

func eventTime(e corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	return e.EventTime.Time
}
