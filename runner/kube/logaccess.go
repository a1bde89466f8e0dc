package kube

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// logGate is what a run learns about reading pod logs in one namespace.
// The shipped RBAC gives the runner no pods/log in sandbox namespaces (it
// would be every sandbox's log too), so there the result comes from the
// termination message. Without the gate every probe pod would first ask
// for its log and be refused: a thousand refusals per cycle in the API
// server's audit log on a thousand nodes, the very pattern an audit alert
// watches for. With it the first read in a namespace answers for the run,
// and pods that end meanwhile wait for that answer rather than ask too.
type logGate struct {
	answered chan struct{} // closed once the first read has an answer
	refused  atomic.Bool
}

// podLog opens a pod's log in namespace ns with open, unless a read there
// was already refused in this run.
func (r *run) podLog(ctx context.Context, ns string, open func() (io.ReadCloser, error)) (io.ReadCloser, error) {
	v, loaded := r.logGates.LoadOrStore(ns, &logGate{answered: make(chan struct{})})
	g := v.(*logGate)
	if !loaded {
		rc, err := open()
		g.refused.Store(apierrors.IsForbidden(err))
		close(g.answered)
		return rc, err
	}
	select {
	case <-g.answered:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if g.refused.Load() {
		return nil, fmt.Errorf("the API server refused this runner the pod logs of namespace %s earlier in the run", ns)
	}
	return open()
}
