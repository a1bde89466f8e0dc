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

// lastSuccessIn finds sandprobe_last_success_timestamp_seconds in a text
// exposition, in a series whose labels match want (a missing label matches
// ""), and returns the latest such time.
func lastSuccessIn(r io.Reader, want map[string]string) (time.Time, bool, error) {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return time.Time{}, false, err
	}
	mf, ok := mfs[MetricLastSuccess]
	if !ok {
		return time.Time{}, false, nil
	}
	var best float64
	found := false
	for _, m := range mf.GetMetric() {
		if !labelsMatch(m.GetLabel(), want) || m.GetGauge() == nil {
			continue
		}
		if v := m.GetGauge().GetValue(); !found || v > best {
			best, found = v, true
		}
	}
	if !found || best <= 0 {
		return time.Time{}, false, nil
	}
	return time.Unix(0, int64(best*1e9)).UTC(), true, nil
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

// LastSuccessInFile reads the last success from an earlier metrics file. No
// file yet is not an error.
func LastSuccessInFile(path string) (time.Time, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read metrics file %s: %w", path, err)
	}
	defer f.Close()
	t, ok, err := lastSuccessIn(f, nil)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read metrics file %s: %w", path, err)
	}
	return t, ok, nil
}

// LastSuccessAtGateway reads the last success this cluster's group holds
// on a Pushgateway.
func LastSuccessAtGateway(ctx context.Context, client *http.Client, gateway, cluster string) (time.Time, bool, error) {
	if client == nil {
		client = http.DefaultClient
	}
	u := strings.TrimSuffix(gateway, "/")
	if !strings.Contains(u, "://") {
		u = "http://" + u // as the push package does
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/metrics", nil)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read pushgateway %s: %w", gateway, err)
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := client.Do(req)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read pushgateway %s: %w", gateway, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return time.Time{}, false, fmt.Errorf("read pushgateway %s: status %s", gateway, resp.Status)
	}
	t, ok, err := lastSuccessIn(resp.Body, map[string]string{"job": PushJob, "cluster": cluster})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read pushgateway %s: %w", gateway, err)
	}
	return t, ok, nil
}
