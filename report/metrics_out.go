package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// PushJob is the job label of every push; with the cluster it is the
// Pushgateway grouping key, so each cluster owns exactly one group.
const PushJob = "sandprobe"

// WriteMetrics writes everything g gathers in the Prometheus text format,
// which is also what node_exporter's textfile collector reads.
func WriteMetrics(w io.Writer, g prometheus.Gatherer) error {
	mfs, err := g.Gather()
	if err != nil {
		return fmt.Errorf("gather metrics: %w", err)
	}
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
			return fmt.Errorf("write metric %s: %w", mf.GetName(), err)
		}
	}
	return nil
}

// WriteMetricsFile writes the metrics file atomically: the textfile
// collector reads *.prom files whenever it is scraped and must never see
// half a file (it would drop all of it, or worse, half of the checks).
func WriteMetricsFile(path string, g prometheus.Gatherer) error {
	return WriteFileAtomic(path, func(w io.Writer) error { return WriteMetrics(w, g) })
}

// PushMetrics replaces the group {job="sandprobe", cluster=CLUSTER} on a
// Pushgateway with everything g gathers. It replaces rather than adds, so a
// check that is no longer evaluated disappears from the group too.
func PushMetrics(ctx context.Context, client *http.Client, gateway, cluster string, g prometheus.Gatherer) error {
	p := push.New(gateway, PushJob).Grouping("cluster", cluster).Gatherer(g)
	if client != nil {
		p = p.Client(client)
	}
	if err := p.PushContext(ctx); err != nil {
		return fmt.Errorf("push metrics to %s (job %s, cluster %q): %w", gateway, PushJob, cluster, err)
	}
	return nil
}

// Previous is what an earlier one-shot run left in its metrics file or
// Pushgateway group that the next run carries on: the last success, and
// sandprobe_runs_total by result, so a CronJob's counter counts runs
// instead of being 1 in every push.
type Previous struct {
	LastSuccess time.Time // zero when none
	Runs        map[string]float64
}

// previousIn reads a text exposition, in the series whose labels match
// want (a missing label matches ""): the latest last success and the run
// counts.
func previousIn(r io.Reader, want map[string]string) (Previous, error) {
	var p Previous
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return p, err
	}
	if mf, ok := mfs[MetricLastSuccess]; ok {
		var best float64
		for _, m := range mf.GetMetric() {
			if labelsMatch(m.GetLabel(), want) && m.GetGauge() != nil {
				best = max(best, m.GetGauge().GetValue())
			}
		}
		if best > 0 {
			p.LastSuccess = time.Unix(0, int64(best*1e9)).UTC()
		}
	}
	if mf, ok := mfs[MetricRuns]; ok {
		for _, m := range mf.GetMetric() {
			if !labelsMatch(m.GetLabel(), want) {
				continue
			}
			var v float64
			switch {
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetUntyped() != nil: // a gateway may expose it untyped
				v = m.GetUntyped().GetValue()
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && v > 0 {
					if p.Runs == nil {
						p.Runs = map[string]float64{}
					}
					p.Runs[l.GetValue()] += v
				}
			}
		}
	}
	return p, nil
}

func labelsMatch(have []*dto.LabelPair, want map[string]string) bool {
	for name, v := range want {
		got := ""
		for _, l := range have {
			if l.GetName() == name {
				got = l.GetValue()
			}
		}
		if got != v {
			return false
		}
	}
	return true
}

// PreviousInFile reads what an earlier metrics file holds. No file yet is
// not an error.
func PreviousInFile(path string) (Previous, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Previous{}, nil
	}
	if err != nil {
		return Previous{}, fmt.Errorf("read metrics file %s: %w", path, err)
	}
	defer f.Close()
	p, err := previousIn(f, nil)
	if err != nil {
		return Previous{}, fmt.Errorf("read metrics file %s: %w", path, err)
	}
	return p, nil
}

// LastSuccessInFile reads the last success from an earlier metrics file. No
// file yet is not an error.
func LastSuccessInFile(path string) (time.Time, bool, error) {
	p, err := PreviousInFile(path)
	return p.LastSuccess, err == nil && !p.LastSuccess.IsZero(), err
}

// PreviousAtGateway reads what this cluster's group holds on a
// Pushgateway.
func PreviousAtGateway(ctx context.Context, client *http.Client, gateway, cluster string) (Previous, error) {
	if client == nil {
		client = http.DefaultClient
	}
	u := strings.TrimSuffix(gateway, "/")
	if !strings.Contains(u, "://") {
		u = "http://" + u // as the push package does
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/metrics", nil)
	if err != nil {
		return Previous{}, fmt.Errorf("read pushgateway %s: %w", gateway, err)
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := client.Do(req)
	if err != nil {
		return Previous{}, fmt.Errorf("read pushgateway %s: %w", gateway, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Previous{}, fmt.Errorf("read pushgateway %s: status %s", gateway, resp.Status)
	}
	p, err := previousIn(resp.Body, map[string]string{"job": PushJob, "cluster": cluster})
	if err != nil {
		return Previous{}, fmt.Errorf("read pushgateway %s: %w", gateway, err)
	}
	return p, nil
}

// LastSuccessAtGateway reads the last success this cluster's group holds
// on a Pushgateway.
func LastSuccessAtGateway(ctx context.Context, client *http.Client, gateway, cluster string) (time.Time, bool, error) {
	p, err := PreviousAtGateway(ctx, client, gateway, cluster)
	return p.LastSuccess, err == nil && !p.LastSuccess.IsZero(), err
}
