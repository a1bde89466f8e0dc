package report

import (
	"net"
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// The egress record's metrics (egress-usage, and a run given
// --egress-log): present only when the run read a record.
const (
	MetricEgressAllowanceRequests = "sandprobe_egress_allowance_requests"
	MetricEgressAllowanceLastUse  = "sandprobe_egress_allowance_last_use_timestamp_seconds"
	MetricEgressAllowancesUnused  = "sandprobe_egress_allowances_unused"
	MetricEgressAllowancesRisky   = "sandprobe_egress_allowances_risky"
	MetricEgressDeniedAttempts    = "sandprobe_egress_denied_attempts"
	MetricEgressWouldBlock        = "sandprobe_egress_would_block_requests"
	MetricEgressRecordEnd         = "sandprobe_egress_record_end_timestamp_seconds"
)

// Bounds of the record's series: allowances come from the policy, but
// hosts come from the record (what sandboxes tried), so only the busiest
// maxRecordHosts keep a label and the rest are summed under host="".
const (
	maxAllowanceSeries = 256
	maxRecordHosts     = 20
)

type usageDescs struct {
	requests, lastUse, unused, risky, denied, wouldBlock, end *prometheus.Desc
}

func newUsageDescs() usageDescs {
	return usageDescs{
		requests: prometheus.NewDesc(MetricEgressAllowanceRequests,
			"Requests the proxy's record shows through each allowance (the probe's own marked attempts left out), in the record read by the last run.", []string{"allowance"}, nil),
		lastUse: prometheus.NewDesc(MetricEgressAllowanceLastUse,
			"Unix time of the last request through each allowance in the record; absent for an allowance the record never shows used.", []string{"allowance"}, nil),
		unused: prometheus.NewDesc(MetricEgressAllowancesUnused,
			"Allowances with no request in the last --unused-days of the record (egress.allowance-unused failing).", nil, nil),
		risky: prometheus.NewDesc(MetricEgressAllowancesRisky,
			"Wildcard allowances over a user-content or multi-tenant suffix (egress.allowance-wildcard failing).", nil, nil),
		denied: prometheus.NewDesc(MetricEgressDeniedAttempts,
			"Attempts the proxy denied in the record, per destination host (the busiest 20; the rest under host=\"\").", []string{"host"}, nil),
		wouldBlock: prometheus.NewDesc(MetricEgressWouldBlock,
			"Requests in the record to destinations the declared policy would block (the egress audit stage), per host (the busiest 20; the rest under host=\"\").", []string{"host"}, nil),
		end: prometheus.NewDesc(MetricEgressRecordEnd,
			"Unix time of the latest record read: an old value means the proxy stopped logging or the logs stopped arriving.", nil, nil),
	}
}

func (d usageDescs) describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.requests, d.lastUse, d.unused, d.risky, d.denied, d.wouldBlock, d.end} {
		ch <- x
	}
}

// usageSeries is a run's egress-record gauges, computed once.
type usageSeries struct {
	requests, lastUse, denied, wouldBlock []labelled
	unused, risky, end                    float64
	hasEnd                                bool
}

func usageSeriesFor(u *EgressUsage) *usageSeries {
	if u == nil {
		return nil
	}
	s := &usageSeries{}
	for i, a := range u.Allowances {
		if a.Verdict == Fail {
			s.unused++
		}
		if a.Risk != "" {
			s.risky++
		}
		if i >= maxAllowanceSeries {
			continue
		}
		name := labelValue(allowanceLabel(a))
		s.requests = append(s.requests, labelled{[]string{name}, float64(a.Requests)})
		if !a.LastUse.IsZero() {
			s.lastUse = append(s.lastUse, labelled{[]string{name}, unixSeconds(a.LastUse)})
		}
	}
	s.denied = byHost(u.Denied)
	s.wouldBlock = byHost(u.WouldBlock)
	if !u.To.IsZero() {
		s.end, s.hasEnd = unixSeconds(u.To), true
	}
	return s
}

func allowanceLabel(a AllowanceUsage) string {
	if a.Port == 0 {
		return a.Host
	}
	return net.JoinHostPort(a.Host, strconv.Itoa(a.Port))
}

// byHost sums a list by host, keeps the busiest maxRecordHosts and folds
// the rest into host="".
func byHost(list []DestinationUse) []labelled {
	sum := map[string]float64{}
	for _, d := range list {
		sum[net.JoinHostPort(d.Host, strconv.Itoa(d.Port))] += float64(d.Count)
	}
	hosts := make([]string, 0, len(sum))
	for h := range sum {
		hosts = append(hosts, h)
	}
	sort.Slice(hosts, func(i, j int) bool {
		if sum[hosts[i]] != sum[hosts[j]] {
			return sum[hosts[i]] > sum[hosts[j]]
		}
		return hosts[i] < hosts[j]
	})
	var out []labelled
	rest := 0.0
	for i, h := range hosts {
		if i < maxRecordHosts {
			out = append(out, labelled{[]string{labelValue(h)}, sum[h]})
		} else {
			rest += sum[h]
		}
	}
	if len(hosts) > maxRecordHosts {
		out = append(out, labelled{[]string{""}, rest})
	}
	return out
}

func (d usageDescs) collect(ch chan<- prometheus.Metric, s *usageSeries) {
	if s == nil {
		return
	}
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	for _, x := range s.requests {
		gauge(d.requests, x.value, x.labels...)
	}
	for _, x := range s.lastUse {
		gauge(d.lastUse, x.value, x.labels...)
	}
	for _, x := range s.denied {
		gauge(d.denied, x.value, x.labels...)
	}
	for _, x := range s.wouldBlock {
		gauge(d.wouldBlock, x.value, x.labels...)
	}
	gauge(d.unused, s.unused)
	gauge(d.risky, s.risky)
	if s.hasEnd {
		gauge(d.end, s.end)
	}
}
