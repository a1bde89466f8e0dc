// Package trigger watches what can reopen a sandbox's egress on a cluster
// and says which part of the fleet to probe again when it changes (serve
// --watch): an egress policy object (NetworkPolicy, CiliumNetworkPolicy,
// CiliumClusterwideNetworkPolicy, AdminNetworkPolicy,
// BaselineAdminNetworkPolicy, ClusterNetworkPolicy) and the pods of the CNI
// and network-policy agents' DaemonSets, node by node. It only watches and
// asks; runner.Watch debounces, caps and runs the cycles.
//
// Informers, never polls: one list and one watch per kind, no resync. The
// initial list of each watch starts no cycle (the scheduled cycle at start
// covers it); a watch that drops re-establishes from its last
// resourceVersion, and when that is too old re-lists: an object whose
// generation changed in the gap is a change like any other, one that
// vanished is a deletion.
package trigger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sourcegraph/conc"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/kube"
)

// DefaultAgentGrace is how long a node's CNI agent may stay not Ready
// before its node is probed anyway: a rolling restart's agent is back
// within seconds, and probing while it is down would only page for the
// rollout itself; one that stays down is the window of exposure, probed.
// A node whose agent became Ready is probed at once and again this long
// after, once the agent has settled.
const DefaultAgentGrace = 30 * time.Second

// requestTimeout bounds the requests Start makes itself (which kinds are
// served, the agents' DaemonSets), together: an API server that does not
// answer must not hold serve up for minutes.
const requestTimeout = 20 * time.Second

// syncTimeout bounds the wait for the initial lists at start; the
// informers keep trying after it.
const syncTimeout = 30 * time.Second

// Watcher watches the policy kinds the API server serves and the pods of
// the CNI agents, and calls Request with the scope a change can affect.
type Watcher struct {
	// Metadata lists and watches the policy objects (their metadata only:
	// which object, which namespace, which generation is all a trigger
	// needs).
	Metadata metadata.Interface
	// Pods lists and watches the agents' pods (their status says Ready).
	Pods kube.API
	// DaemonSets reads the agents' DaemonSets, for their pod selectors.
	DaemonSets drift.KubeAPI
	// Namespaces are where the probe pods stand (Backend.Namespaces): a
	// namespaced policy elsewhere cannot change their egress.
	Namespaces []string
	// Agents are the DaemonSets to watch; nil auto-detects KnownAgents.
	Agents []Agent
	// AgentGrace is how long an agent may stay not Ready before its node
	// is probed anyway (0 is DefaultAgentGrace).
	AgentGrace time.Duration
	// Request asks for a cycle over scope; why says what changed.
	Request func(scope runner.Scope, why string)
	// Event hears every change seen after the initial lists, by kind
	// (sandprobe_watch_events_total).
	Event  func(kind string)
	Logger *slog.Logger
}

// Start starts the informers, waits (at most syncTimeout) for their initial
// lists, logs what is watched, and returns; the informers stop when ctx is
// done or Stop is called.
func (w *Watcher) Start(ctx context.Context) (*Running, error) {
	if w.Request == nil {
		return nil, errors.New("watch: no Request")
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &Running{cancel: cancel}
	// Start's own requests share one bound: an API server that does not
	// answer costs requestTimeout, and then the informers keep trying.
	pctx, pcancel := context.WithTimeout(ctx, requestTimeout)
	defer pcancel()
	kinds, informers, err := w.policies(ctx, pctx)
	if err != nil {
		cancel()
		return nil, err
	}
	spawn := func(inf cache.SharedIndexInformer) { r.wg.Go(func() { inf.RunWithContext(ctx) }) }
	agents, agentInformers, err := w.agents(ctx, pctx, spawn)
	if err != nil {
		cancel()
		return nil, err
	}
	informers = append(informers, agentInformers...)
	for _, inf := range informers {
		r.wg.Go(func() { inf.RunWithContext(ctx) })
	}
	syncCtx, syncCancel := context.WithTimeout(ctx, syncTimeout)
	defer syncCancel()
	synced := []cache.InformerSynced{}
	for _, inf := range informers {
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(syncCtx.Done(), synced...) && ctx.Err() == nil {
		w.log().Warn("watch: the initial lists did not finish in time; the watches keep trying", "timeout", syncTimeout.String())
	}
	w.log().Info("watch: watching", "kinds", kinds, "cniAgents", agents, "namespaces", w.Namespaces)
	return r, nil
}

// Running is a started Watcher.
type Running struct {
	wg     conc.WaitGroup
	cancel context.CancelFunc
}

// Stop stops the informers and returns once they have.
func (r *Running) Stop() {
	r.cancel()
	r.wg.Wait()
}

func (w *Watcher) log() *slog.Logger {
	if w.Logger != nil {
		return w.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (w *Watcher) event(kind string) {
	if w.Event != nil {
		w.Event(kind)
	}
}

func (w *Watcher) grace() time.Duration {
	if w.AgentGrace > 0 {
		return w.AgentGrace
	}
	return DefaultAgentGrace
}

// errorf names the watch in an error.
func errorf(format string, args ...any) error { return fmt.Errorf("watch: "+format, args...) }
