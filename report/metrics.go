package report

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, exactly as DESIGN.md lists them. The alert rules in
// manifests/ query these names; a test there keeps both in step.
const (
	MetricUp                       = "sandprobe_up"
	MetricCheckSuccess             = "sandprobe_check_success"
	MetricCheckFailedNodes         = "sandprobe_check_failed_nodes"
	MetricEgressUnexpectedOpen     = "sandprobe_egress_unexpected_open"
	MetricEgressAllowedUnreachable = "sandprobe_egress_allowed_unreachable"
	MetricEgressDeniesUnproven     = "sandprobe_egress_denies_unproven"
	MetricNodeUnprobed             = "sandprobe_node_unprobed"
	MetricDriftFindings            = "sandprobe_drift_findings"
	MetricSandboxesScanned         = "sandprobe_sandboxes_scanned"
	MetricPolicyNamespaces         = "sandprobe_policy_namespaces"
	MetricRunDuration              = "sandprobe_run_duration_seconds"
	MetricLastRun                  = "sandprobe_last_run_timestamp_seconds"
	MetricLastSuccess              = "sandprobe_last_success_timestamp_seconds"
	MetricRuns                     = "sandprobe_runs_total"
	MetricRunsSkipped              = "sandprobe_runs_skipped_total"
	MetricPushFailures             = "sandprobe_push_failures_total"
	MetricInfo                     = "sandprobe_info"
)

// Check IDs and classes the metrics single out. The egress checks are
// written by the probe; the metrics rely on their roles (Finding.Role,
// from the catalogue row), Status and Class, never on their IDs.
const (
	// CheckEgressAllowed is the allowances' check (role RoleAllowance).
	CheckEgressAllowed = "egress.allowed"
	// CheckProbeRun is a probe that could not run (runner.CouldNotRun):
	// its subject is the reason.
	CheckProbeRun = "probe.run"
	ClassAnswered = "answered"
	// ClassProxyForwarded is a must-fail destination the proxy let through
	// (5xx: only the upstream failed): open egress as soon as it is up.
	ClassProxyForwarded = "proxy-forwarded"
	driftPrefix         = "drift."
)

// maxTargetsPerCheck bounds the target label of one check on one node. Most
// subjects come from the policy, but a few come from the sandbox itself (the
// names of credential-looking environment variables): a hostile image must
// not be able to blow up the series count. Past the bound, the check's
// results on that node fold into one series with an empty target.
const maxTargetsPerCheck = 64

// maxLabelBytes clips a label value; subjects are host:port, paths and names.
const maxLabelBytes = 128

// DefaultNodeDetail is how many probe locations (nodes) a run may have and
// still get one sandprobe_check_success series per check, target and node.
// Past it, a check that passes everywhere is one series with no node
// (docs/metrics.md: the bound), and only failures keep their node, at most
// maxFailingNodeSeries of them.
const DefaultNodeDetail = 100

// maxFailingNodeSeries bounds the per-node sandprobe_check_success series
// of a run past DefaultNodeDetail: enough to name every broken node when a
// rollout breaks a few, bounded when a change breaks the whole fleet (the
// rest fold into one series per check with no node, and
// sandprobe_check_failed_nodes says how many).
const maxFailingNodeSeries = 256

// Metrics turns runs into Prometheus series on a registry it is given. The
// gauges describe the last run only and are replaced whole by Observe, so a
// check that is no longer evaluated disappears, and a scrape never sees half
// of one run and half of another.
type Metrics struct {
	mu          sync.Mutex
	last        *runSeries // nil until the first run: no run, no verdict
	lastSuccess time.Time
	nodeDetail  int

	runs         *prometheus.CounterVec
	skipped      prometheus.Counter
	pushFailures prometheus.Counter

	up, checkSuccess, checkFailedNodes, egressOpen, egressUnreachable, egressUnproven, nodeUnprobed, drift,
	scanned, policyNamespaces, duration, lastRun, lastSuccessDesc, info *prometheus.Desc
	usage usageDescs // the egress record's (metrics_egress.go)
}

// NewMetrics creates sandprobe's collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		nodeDetail: DefaultNodeDetail,
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRuns,
			Help: "Runs finished, by result: pass (conformant), fail (not conformant), error (could not run).",
		}, []string{"result"}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricRunsSkipped,
			Help: "Scheduled runs skipped because the previous run was still going.",
		}),
		pushFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricPushFailures,
			Help: "Pushes to the Pushgateway that failed (a warning, not a failed run, unless --require-push).",
		}),
		up: prometheus.NewDesc(MetricUp,
			"1 when the last run could check the sandboxes (exit 0 or 1; or exit 3 where only some nodes of the pool could not be probed, each in sandprobe_node_unprobed), 0 when it could not (exit 3).", nil, nil),
		checkSuccess: prometheus.NewDesc(MetricCheckSuccess,
			"1 when the check passed in the last run, 0 when it failed, stayed inconclusive or could not check; absent when not evaluated. target is the finding's subject, node and namespace where the probe ran, severity the check's (critical, high, medium, low).",
			[]string{"check", "target", "node", "namespace", "severity"}, nil),
		checkFailedNodes: prometheus.NewDesc(MetricCheckFailedNodes,
			"Probe locations (nodes) where the check did not pass in the last run; only in runs over more nodes than --metrics-node-detail, where sandprobe_check_success no longer has a series per node for passing checks.",
			[]string{"check", "target", "namespace", "severity"}, nil),
		egressOpen: prometheus.NewDesc(MetricEgressUnexpectedOpen,
			"Destinations that must fail (hosts, IPs, the metadata address, around the proxy, DNS names) but answered in the last run, per probe location (node and sandbox namespace).",
			[]string{"node", "namespace"}, nil),
		egressUnreachable: prometheus.NewDesc(MetricEgressAllowedUnreachable,
			"Allowed egress destinations that did not answer in the last run, per probe location (node and sandbox namespace).",
			[]string{"node", "namespace"}, nil),
		egressUnproven: prometheus.NewDesc(MetricEgressDeniesUnproven,
			"Must-fail destinations that failed but whose deny is unproven in the last run (the control vantage, where no sandbox policy applies, got no answer either: the target refuses or ignores everyone), per probe location.",
			[]string{"node", "namespace"}, nil),
		nodeUnprobed: prometheus.NewDesc(MetricNodeUnprobed,
			"1 for each node of the sandbox pool (and sandbox namespace) the last run could not probe, with the reason (node-cordoned, node-not-ready, deadline-exceeded, unschedulable, crashed, …): its sandboxes got no verdict this cycle. Absent for the nodes that were probed.",
			[]string{"node", "namespace", "reason"}, nil),
		drift: prometheus.NewDesc(MetricDriftFindings,
			"Live objects that differ from the policy in the last run, per drift rule (its check ID), namespace and the rule's severity.",
			[]string{"rule", "namespace", "severity"}, nil),
		scanned: prometheus.NewDesc(MetricSandboxesScanned,
			"Live sandboxes (pods, workload templates, Sandboxes, containers) compared with the policy in the last run; absent when the run had no drift phase or could not run it.", nil, nil),
		policyNamespaces: prometheus.NewDesc(MetricPolicyNamespaces,
			"Namespaces the policy declares sandboxes live in (spec.namespaces).", nil, nil),
		duration: prometheus.NewDesc(MetricRunDuration,
			"How long the last run took, per phase (probe, drift) and in total.", []string{"phase"}, nil),
		lastRun: prometheus.NewDesc(MetricLastRun,
			"Unix time the last run finished, whatever its result.", nil, nil),
		lastSuccessDesc: prometheus.NewDesc(MetricLastSuccess,
			"Unix time the last successful run finished: it could check and found nothing wrong (exit 0, or exit 3 where only nodes of the pool went unprobed); a run that exits 1 is no success.", nil, nil),
		info: prometheus.NewDesc(MetricInfo,
			"The build of sandprobe (version, commit, build date) and the policy it checks; always 1.", []string{"version", "commit", "build_date", "policy"}, nil),
		usage: newUsageDescs(),
	}
	// Every result exists from the start so rate() and increase() see the first run.
	for _, r := range []string{"pass", "fail", "error"} {
		m.runs.WithLabelValues(r)
	}
	if err := reg.Register(m); err != nil {
		return nil, fmt.Errorf("register sandprobe metrics: %w", err)
	}
	return m, nil
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.up, m.checkSuccess, m.checkFailedNodes, m.egressOpen, m.egressUnreachable, m.egressUnproven, m.nodeUnprobed, m.drift,
		m.scanned, m.policyNamespaces, m.duration, m.lastRun, m.lastSuccessDesc, m.info} {
		ch <- d
	}
	m.usage.describe(ch)
	m.runs.Describe(ch)
	m.skipped.Describe(ch)
	m.pushFailures.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.runs.Collect(ch)
	m.skipped.Collect(ch)
	m.pushFailures.Collect(ch)
	if !m.lastSuccess.IsZero() {
		ch <- prometheus.MustNewConstMetric(m.lastSuccessDesc, prometheus.GaugeValue, unixSeconds(m.lastSuccess))
	}
	s := m.last
	if s == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(m.up, s.up)
	if s.driftRan {
		gauge(m.scanned, s.scanned)
	}
	gauge(m.policyNamespaces, s.policyNamespaces)
	gauge(m.lastRun, s.lastRun)
	gauge(m.info, 1, s.version, s.commit, s.buildDate, s.policy)
	for _, x := range s.checks {
		gauge(m.checkSuccess, x.value, x.labels...)
	}
	for _, x := range s.failedNodes {
		gauge(m.checkFailedNodes, x.value, x.labels...)
	}
	for _, x := range s.egressOpen {
		gauge(m.egressOpen, x.value, x.labels...)
	}
	for _, x := range s.egressUnreachable {
		gauge(m.egressUnreachable, x.value, x.labels...)
	}
	for _, x := range s.egressUnproven {
		gauge(m.egressUnproven, x.value, x.labels...)
	}
	for _, x := range s.nodeUnprobed {
		gauge(m.nodeUnprobed, x.value, x.labels...)
	}
	for _, x := range s.drift {
		gauge(m.drift, x.value, x.labels...)
	}
	for _, x := range s.phases {
		gauge(m.duration, x.value, x.labels...)
	}
	m.usage.collect(ch, s.usage)
}

// Observe replaces the gauges with what run found and counts the run. now
// is when the run finished.
func (m *Metrics) Observe(run Run, now time.Time) {
	m.Show(run, now)
	m.runs.WithLabelValues(run.Result()).Inc()
}

// Show replaces the gauges with what run found without counting a run:
// serve --watch shows a targeted cycle's probe verdict at once, before its
// drift phase ends the run.
func (m *Metrics) Show(run Run, now time.Time) {
	m.mu.Lock()
	detail := m.nodeDetail
	m.mu.Unlock()
	s := seriesFor(run, now, detail)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = s
	if s.succeeded {
		m.lastSuccess = now
	}
}

// SetNodeDetail sets how many nodes a run may have and keep a
// sandprobe_check_success series per check and node (0 is
// DefaultNodeDetail); negative keeps every node's series whatever the
// fleet's size.
func (m *Metrics) SetNodeDetail(n int) {
	if n == 0 {
		n = DefaultNodeDetail
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nodeDetail = n
}

// RememberSuccess carries the time of an earlier successful run into a
// process that has not had one yet: a CronJob that fails must still report
// when the probe last worked, or the series would vanish from its metrics
// file or Pushgateway group exactly when it matters.
func (m *Metrics) RememberSuccess(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.After(m.lastSuccess) {
		m.lastSuccess = t
	}
}

// Remember carries an earlier one-shot run's state into this process: its
// last success (RememberSuccess) and its run counts, which this process's
// sandprobe_runs_total continues from, so a CronJob's counter counts every
// run instead of restarting at 1 in each push.
func (m *Metrics) Remember(p Previous) {
	m.RememberSuccess(p.LastSuccess)
	for _, r := range []string{"pass", "fail", "error"} {
		if v := p.Runs[r]; v > 0 {
			m.runs.WithLabelValues(r).Add(v)
		}
	}
}

// PushFailed counts a push to the Pushgateway that failed.
func (m *Metrics) PushFailed() { m.pushFailures.Inc() }

// SkippedRun counts a scheduled run that did not start because the previous
// one was still going.
func (m *Metrics) SkippedRun() { m.skipped.Inc() }

// runSeries is one run rendered as label values and numbers, computed once
// and swapped in whole.
type runSeries struct {
	up, scanned, lastRun, policyNamespaces                                                          float64
	driftRan, succeeded                                                                             bool
	version, commit, buildDate, policy                                                              string
	checks, failedNodes, egressOpen, egressUnreachable, egressUnproven, nodeUnprobed, drift, phases []labelled
	usage                                                                                           *usageSeries
}

type labelled struct {
	labels []string
	value  float64
}

// seriesFor computes every gauge of a run. It is a pure function of the run.
func seriesFor(run Run, now time.Time, nodeDetail int) *runSeries {
	s := &runSeries{
		scanned:   float64(run.Scanned),
		lastRun:   unixSeconds(now),
		version:   labelValue(run.Version),
		commit:    labelValue(run.Commit),
		buildDate: labelValue(run.BuildDate),
		policy:    labelValue(run.Policy),
	}
	if run.CouldCheck() {
		s.up = 1
	}
	s.succeeded = run.Succeeded()
	s.policyNamespaces = float64(run.DeclaredNamespaces)
	// How many sandboxes a run compared means something only when it ran a
	// drift phase to the end: a probe-only run (or one that could not list)
	// must not read as "none found".
	_, drifted := run.Phases["drift"]
	s.driftRan = drifted && s.up == 1

	t := newSeriesTally()
	run.Set().Each(func(f *Finding) error {
		t.add(f)
		return nil
	}) // a spool read error leaves the series of what was read; the report writers return it
	t.fill(s, nodeDetail)
	for phase, secs := range run.Phases {
		if phase != "total" {
			s.phases = append(s.phases, labelled{[]string{labelValue(phase)}, secs})
		}
	}
	s.phases = append(s.phases, labelled{[]string{"total"}, run.Seconds})
	s.usage = usageSeriesFor(run.EgressUsage)
	return s // unsorted: the registry sorts what it gathers
}

// probeWhere is a probe location: its node and, on Kubernetes, the
// sandbox namespace it stood in.
type probeWhere struct{ node, ns string }

// seriesCheckKey is one check_success series before folding.
type seriesCheckKey struct {
	check, target string
	probeWhere
}

// seriesCheckNode is a check at one location (its targets are counted).
type seriesCheckNode struct {
	check string
	probeWhere
}

// seriesTally is what seriesFor reads from the findings, by label set.
type seriesTally struct {
	checks                      map[seriesCheckKey]float64
	targets                     map[seriesCheckNode]map[string]bool
	open, unreachable, unproven map[probeWhere]float64
	drift                       map[[2]string]float64
	unprobed                    map[[3]string]bool
	// severity is each check's (a label value), from its findings.
	severity map[string]string
}

func newSeriesTally() *seriesTally {
	return &seriesTally{
		checks: map[seriesCheckKey]float64{}, targets: map[seriesCheckNode]map[string]bool{},
		open: map[probeWhere]float64{}, unreachable: map[probeWhere]float64{}, unproven: map[probeWhere]float64{},
		drift: map[[2]string]float64{}, unprobed: map[[3]string]bool{}, severity: map[string]string{},
	}
}

// add tallies one finding.
func (t *seriesTally) add(f *Finding) {
	if NodeUnprobed(*f) {
		t.unprobed[[3]string{labelValue(NodeLabel(*f)), labelValue(unprobedNamespace(*f)), labelValue(f.Subject)}] = true
	}
	if strings.HasPrefix(f.Check, driftPrefix) {
		// Drift names pods; only rule and namespace are bounded enough for labels.
		k := [2]string{labelValue(f.Check), labelValue(f.Namespace)}
		if f.Severity != "" {
			t.severity[k[0]] = string(f.Severity)
		}
		t.drift[k] += 0
		if f.Status == Fail || f.Status == Inconclusive {
			t.drift[k]++
		}
		return
	}
	node := probeWhere{labelValue(NodeLabel(*f)), labelValue(f.Namespace)}
	if Area(f.Check) == "egress" {
		t.open[node] += 0
		t.unreachable[node] += 0
		t.unproven[node] += 0
		if UnexpectedlyOpen(*f) {
			t.open[node]++
		}
		if f.Deny == DenyUnproven {
			t.unproven[node]++
		}
		if f.Role == RoleAllowance && f.Status == Fail {
			t.unreachable[node]++
		}
	}
	if f.Status == Skip {
		return // not applicable: nothing was evaluated
	}
	v := 0.0
	if f.Status == Pass {
		v = 1
	}
	cn := seriesCheckNode{labelValue(f.Check), node}
	if f.Severity != "" {
		t.severity[cn.check] = string(f.Severity)
	}
	if t.targets[cn] == nil {
		t.targets[cn] = map[string]bool{}
	}
	t.targets[cn][labelValue(f.Subject)] = true
	k := seriesCheckKey{cn.check, labelValue(f.Subject), node}
	if old, ok := t.checks[k]; !ok || v < old {
		t.checks[k] = v // one failing subject makes the series fail
	}
}

// fill makes the tallies s's series: the checks whose subjects came out
// unbounded folded into one series each, and per node only up to
// nodeDetail nodes (past it, the fleet's form).
func (t *seriesTally) fill(s *runSeries, nodeDetail int) {
	bounded := make(map[seriesCheckKey]float64, len(t.checks))
	for k, v := range t.checks {
		if len(t.targets[seriesCheckNode{k.check, k.probeWhere}]) > maxTargetsPerCheck {
			k.target = ""
		}
		if old, ok := bounded[k]; !ok || v < old {
			bounded[k] = v
		}
	}
	nodes := map[string]bool{}
	for k := range bounded {
		nodes[k.node] = true
	}
	if nodeDetail >= 0 && len(nodes) > nodeDetail {
		all := make([]checkSeries, 0, len(bounded))
		for k, v := range bounded {
			all = append(all, checkSeries{k.check, k.target, k.node, k.ns, v})
		}
		s.checks, s.failedNodes = fleetChecks(all, t.severity)
	} else {
		for k, v := range bounded {
			s.checks = append(s.checks, labelled{[]string{k.check, k.target, k.node, k.ns, t.severity[k.check]}, v})
		}
	}
	for w, v := range t.open {
		s.egressOpen = append(s.egressOpen, labelled{[]string{w.node, w.ns}, v})
	}
	for w, v := range t.unreachable {
		s.egressUnreachable = append(s.egressUnreachable, labelled{[]string{w.node, w.ns}, v})
	}
	for w, v := range t.unproven {
		s.egressUnproven = append(s.egressUnproven, labelled{[]string{w.node, w.ns}, v})
	}
	for k := range t.unprobed {
		s.nodeUnprobed = append(s.nodeUnprobed, labelled{[]string{k[0], k[1], k[2]}, 1})
	}
	for k, v := range t.drift {
		s.drift = append(s.drift, labelled{[]string{k[0], k[1], t.severity[k[0]]}, v})
	}
}

// checkSeries is one sandprobe_check_success series of one node.
type checkSeries struct {
	check, target, node, ns string
	value                   float64
}

// fleetChecks is sandprobe_check_success for a run over more nodes than
// the node detail: per check, target and namespace, one series with no
// node (1) when it passed on every node; when it failed somewhere, a 0 per
// failing node, named, up to maxFailingNodeSeries in the whole run (then
// one 0 with no node for the rest); and the number of failing nodes in
// sandprobe_check_failed_nodes.
func fleetChecks(all []checkSeries, severity map[string]string) (checks, failed []labelled) {
	type agg struct{ check, target, ns string }
	failing := map[agg][]string{}
	var keys []agg
	for _, c := range all {
		a := agg{c.check, c.target, c.ns}
		if _, ok := failing[a]; !ok {
			failing[a] = nil
			keys = append(keys, a)
		}
		if c.value == 0 {
			failing[a] = append(failing[a], c.node)
		}
	}
	// A stable order, so the same broken nodes are named run after run.
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].check != keys[j].check {
			return keys[i].check < keys[j].check
		}
		if keys[i].target != keys[j].target {
			return keys[i].target < keys[j].target
		}
		return keys[i].ns < keys[j].ns
	})
	budget := maxFailingNodeSeries
	for _, a := range keys {
		nodes := failing[a]
		sev := severity[a.check]
		failed = append(failed, labelled{[]string{a.check, a.target, a.ns, sev}, float64(len(nodes))})
		if len(nodes) == 0 {
			checks = append(checks, labelled{[]string{a.check, a.target, "", a.ns, sev}, 1})
			continue
		}
		sort.Strings(nodes)
		named := min(len(nodes), budget)
		budget -= named
		for _, n := range nodes[:named] {
			checks = append(checks, labelled{[]string{a.check, a.target, n, a.ns, sev}, 0})
		}
		if named < len(nodes) {
			checks = append(checks, labelled{[]string{a.check, a.target, "", a.ns, sev}, 0})
		}
	}
	return checks, failed
}

// UnexpectedlyOpen reports whether a finding is a must-fail destination that
// got through: a failed deny (a role that must stay closed) whose class is
// "answered" or "proxy-forwarded", or a failed DNS channel (the name
// resolved, whatever class it carries). A must-fail target that failed only because it
// failed differently than pinned (refused instead of timeout) is still
// closed and does not count.
func UnexpectedlyOpen(f Finding) bool {
	if f.Status != Fail || !f.Role.MustStayClosed() {
		return false
	}
	return f.Class == ClassAnswered || f.Class == ClassProxyForwarded || f.Role == RoleDNSChannel
}

// NodeUnprobed reports whether a finding says a node of the sandbox pool got
// no verdict this run: the could-not-run of the probe location on that node
// (cordoned, not Ready, the run's deadline before its turn, a probe pod
// that never reported, …). The control vantage and stand-ins for pods
// without the sandbox labels are not nodes of the pool; a could-not-run
// with no node (the backend, a namespace) is the whole run's.
func NodeUnprobed(f Finding) bool {
	return f.Check == CheckProbeRun && f.Status == Error && f.Where.OnPoolNode()
}

// unprobedNamespace is the sandbox namespace of an unprobed location: the
// finding's, or its location's (a could-not-run finding is made before any
// result says where it stood).
func unprobedNamespace(f Finding) string {
	if f.Namespace != "" {
		return f.Namespace
	}
	return f.Where.Namespace
}

// NodeLabel is the value of the node label for a finding: the node its
// location names (the kube backend's, whose namespace is the finding's
// Namespace; a stand-in's or the control's node too), the whole target
// otherwise ("local/sandbox", "image/REF", "namespace/NS" for a probe pod
// that never got a node, or the backend for a probe that never reported).
func NodeLabel(f Finding) string {
	if f.Where.Node != "" {
		return f.Where.Node
	}
	return f.Target
}

// labelValue makes a label value safe: valid UTF-8 (an exposition with
// anything else is rejected whole) and short.
func labelValue(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxLabelBytes {
		return s
	}
	cut := maxLabelBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
