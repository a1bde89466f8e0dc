package report

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// serve --watch's counters (docs/metrics.md): what it saw change, the
// cycles that started because of it, and the changes that joined a cycle
// already pending.
const (
	MetricWatchEvents    = "sandprobe_watch_events_total"
	MetricWatchCycles    = "sandprobe_watch_cycles_total"
	MetricWatchCoalesced = "sandprobe_watch_coalesced_total"
)

// WatchKinds are the kind label's values: the policy kinds and the CNI
// agents' pods. A fixed set, so the series are too.
var WatchKinds = []string{"networkpolicy", "ciliumnetworkpolicy", "ciliumclusterwidenetworkpolicy",
	"adminnetworkpolicy", "baselineadminnetworkpolicy", "clusternetworkpolicy", "namespace", "cni-agent"}

// WatchScopes are the scope label's values.
var WatchScopes = []string{"namespaces", "nodes", "full"}

// WatchMetrics are serve --watch's counters.
type WatchMetrics struct {
	events, cycles *prometheus.CounterVec
	coalesced      prometheus.Counter
}

// NewWatchMetrics creates the counters, every label value at 0, on reg.
func NewWatchMetrics(reg prometheus.Registerer) (*WatchMetrics, error) {
	m := &WatchMetrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricWatchEvents,
			Help: "Changes serve --watch saw after its initial lists, by kind (a policy kind; namespace: a namespace created, deleted or relabelled; cni-agent: an agent pod that became Ready again or stopped being Ready)."}, []string{"kind"}),
		cycles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricWatchCycles,
			Help: "Cycles serve --watch started after a change, by scope: namespaces, nodes or full (a cycle over namespaces and nodes counts under both)."}, []string{"scope"}),
		coalesced: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricWatchCoalesced,
			Help: "Changes that started no cycle of their own: they joined one already pending (debounce, rate cap, a cycle in flight) or a scheduled cycle that saw them."}),
	}
	for _, k := range WatchKinds {
		m.events.WithLabelValues(k)
	}
	for _, s := range WatchScopes {
		m.cycles.WithLabelValues(s)
	}
	for _, c := range []prometheus.Collector{m.events, m.cycles, m.coalesced} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register watch metrics: %w", err)
		}
	}
	return m, nil
}

// Event counts one change of kind.
func (m *WatchMetrics) Event(kind string) { m.events.WithLabelValues(labelValue(kind)).Inc() }

// Cycle counts one triggered cycle under each of its scope kinds.
func (m *WatchMetrics) Cycle(scopes []string) {
	for _, s := range scopes {
		m.cycles.WithLabelValues(s).Inc()
	}
}

// Coalesced counts one change that joined a pending cycle.
func (m *WatchMetrics) Coalesced() { m.coalesced.Inc() }
