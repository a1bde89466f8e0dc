package testenv

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sourcegraph/conc"
	"sigs.k8s.io/yaml"
)

// ShippedRules is the alert rules file the project ships, relative to the
// module root. Alerting loads it as it is: a test that edited it would
// measure rules nobody runs.
const ShippedRules = "manifests/alerts/sandprobe.rules.yml"

// AlertingConfig says how the Prometheus and Alertmanager of Alerting are
// tuned. Every interval here adds to the time from a bad sample to a page,
// so a test states the ones it measures with; zero values take the
// defaults below (short, for tests).
type AlertingConfig struct {
	// Target is the host:port Prometheus scrapes at /metrics (loopback).
	Target string
	// ScrapeInterval and EvaluationInterval (default 1s each): Prometheus's
	// global scrape_interval and evaluation_interval.
	ScrapeInterval, EvaluationInterval time.Duration
	// GroupWait, GroupInterval (default 1s each) and RepeatInterval (default
	// 1h) of the Alertmanager route. A user's group_wait (Alertmanager's
	// default is 30s) adds to their time to detect; group_interval to the
	// time to a resolve and to a second alert of the same group.
	GroupWait, GroupInterval, RepeatInterval time.Duration
}

func (c AlertingConfig) withDefaults() AlertingConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.ScrapeInterval, time.Second)
	def(&c.EvaluationInterval, time.Second)
	def(&c.GroupWait, time.Second)
	def(&c.GroupInterval, time.Second)
	def(&c.RepeatInterval, time.Hour)
	return c
}

// Arrival is one alert in one notification that reached the webhook
// receiver, stamped with the time it arrived.
type Arrival struct {
	At       time.Time
	Status   string // "firing" or "resolved"
	Name     string // the alertname label
	Labels   map[string]string
	StartsAt time.Time
	EndsAt   time.Time
}

func (a Arrival) String() string {
	keys := make([]string, 0, len(a.Labels))
	for k := range a.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s{", a.At.Format("15:04:05.000"), a.Status, a.Name)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, a.Labels[k])
	}
	b.WriteByte('}')
	return b.String()
}

// Alerts is a running Prometheus + Alertmanager pair, wired the way a user
// wires sandprobe: Prometheus scrapes the target and evaluates the shipped
// rules, Alertmanager routes every alert to a webhook receiver, and the
// receiver (an HTTP server in the test process) records when each alert
// arrived.
type Alerts struct {
	Config          AlertingConfig
	PrometheusURL   string
	AlertmanagerURL string
	// RulesFile is the absolute path of the rules Prometheus loaded.
	RulesFile string

	mu       sync.Mutex
	arrivals []Arrival
	changed  chan struct{} // closed and replaced on every arrival
}

// webhookPayload is the part of Alertmanager's webhook body (version 4)
// the receiver reads. Written out here rather than imported: the
// alertmanager module would bring its whole dependency tree for five
// fields.
type webhookPayload struct {
	Version string `json:"version"`
	Alerts  []struct {
		Status   string            `json:"status"`
		Labels   map[string]string `json:"labels"`
		StartsAt time.Time         `json:"startsAt"`
		EndsAt   time.Time         `json:"endsAt"`
	} `json:"alerts"`
}

// Alerting starts real Alertmanager (Debian's prometheus-alertmanager) and
// real Prometheus (Debian's prometheus) on free loopback ports, with their
// data in the test's temporary directory, Prometheus scraping cfg.Target
// and evaluating the shipped rules (ShippedRules) unmodified, Alertmanager
// sending every notification (firing and resolved) to a receiver in this
// process. Both are killed and reaped when the test ends.
func Alerting(t testing.TB, cfg AlertingConfig) *Alerts {
	t.Helper()
	cfg = cfg.withDefaults()
	if host, _, err := net.SplitHostPort(cfg.Target); err != nil || !net.ParseIP(host).IsLoopback() {
		t.Fatalf("alerting: target %q is not a loopback host:port", cfg.Target)
	}
	amBin, err := exec.LookPath("prometheus-alertmanager")
	if err != nil {
		Missing(t, "prometheus-alertmanager not on PATH (apt-get install prometheus-alertmanager; make deps)")
	}
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		Missing(t, "prometheus not on PATH (apt-get install prometheus; make deps)")
	}
	a := &Alerts{Config: cfg, RulesFile: filepath.Join(ModuleRoot(t), ShippedRules), changed: make(chan struct{})}
	if _, err := os.Stat(a.RulesFile); err != nil {
		t.Fatalf("alerting: the shipped rules: %v", err)
	}

	// The receiver: Alertmanager posts here.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(a.receive), ReadHeaderTimeout: 5 * time.Second}
	var serving conc.WaitGroup
	serving.Go(func() { srv.Serve(ln) })
	t.Cleanup(func() { srv.Close(); serving.Wait() })

	dir := t.TempDir()
	amCfg := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(amCfg, fmt.Appendf(nil, `route:
  receiver: test
  group_by: [alertname, node, namespace]
  group_wait: %s
  group_interval: %s
  repeat_interval: %s
receivers:
  - name: test
    webhook_configs:
      - url: http://%s/alerts
        send_resolved: true
`, promDuration(cfg.GroupWait), promDuration(cfg.GroupInterval), promDuration(cfg.RepeatInterval), ln.Addr()), 0o644); err != nil {
		t.Fatal(err)
	}
	a.AlertmanagerURL = startLoopbackDaemon(t, "alertmanager", func(addr string) []string {
		// --cluster.listen-address= turns off the HA gossip, which would
		// otherwise listen on every interface (port 9094).
		return []string{amBin, "--config.file=" + amCfg, "--storage.path=" + filepath.Join(dir, "alertmanager"),
			"--web.listen-address=" + addr, "--cluster.listen-address=", "--log.level=warn"}
	})

	promCfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(promCfg, fmt.Appendf(nil, `global:
  scrape_interval: %s
  scrape_timeout: %s
  evaluation_interval: %s
rule_files: [%q]
alerting:
  alertmanagers:
    - static_configs: [{targets: [%q]}]
scrape_configs:
  - job_name: sandprobe
    static_configs: [{targets: [%q]}]
`, promDuration(cfg.ScrapeInterval), promDuration(cfg.ScrapeInterval), promDuration(cfg.EvaluationInterval),
		a.RulesFile, strings.TrimPrefix(a.AlertmanagerURL, "http://"), cfg.Target), 0o644); err != nil {
		t.Fatal(err)
	}
	a.PrometheusURL = startLoopbackDaemon(t, "prometheus", func(addr string) []string {
		return []string{promBin, "--config.file=" + promCfg, "--storage.tsdb.path=" + filepath.Join(dir, "prometheus"),
			"--web.listen-address=" + addr, "--log.level=warn"}
	})
	return a
}

// promDuration writes d the way Prometheus and Alertmanager configs read
// durations (whole milliseconds at least).
func promDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

func (a *Alerts) receive(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	var p webhookPayload
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	for _, al := range p.Alerts {
		a.arrivals = append(a.arrivals, Arrival{At: at, Status: al.Status, Name: al.Labels["alertname"], Labels: al.Labels, StartsAt: al.StartsAt, EndsAt: al.EndsAt})
	}
	close(a.changed)
	a.changed = make(chan struct{})
	a.mu.Unlock()
}

// Arrivals returns every alert that reached the receiver so far, in order.
func (a *Alerts) Arrivals() []Arrival {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.arrivals)
}

// Wait returns the first arrival after since that match accepts, waiting
// up to timeout for it.
func (a *Alerts) Wait(since time.Time, timeout time.Duration, match func(Arrival) bool) (Arrival, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		a.mu.Lock()
		for _, al := range a.arrivals {
			if al.At.After(since) && match(al) {
				a.mu.Unlock()
				return al, true
			}
		}
		changed := a.changed
		a.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			return Arrival{}, false
		}
	}
}

// Firing matches a firing alert of that name whose labels include want.
func Firing(name string, want map[string]string) func(Arrival) bool {
	return arrivalMatch("firing", name, want)
}

// Resolved matches a resolved alert of that name whose labels include want.
func Resolved(name string, want map[string]string) func(Arrival) bool {
	return arrivalMatch("resolved", name, want)
}

func arrivalMatch(status, name string, want map[string]string) func(Arrival) bool {
	return func(a Arrival) bool {
		if a.Status != status || a.Name != name {
			return false
		}
		for k, v := range want {
			if a.Labels[k] != v {
				return false
			}
		}
		return true
	}
}

// RuleFor returns the `for:` of the named alert in the shipped rules (0
// when it has none): it adds to the time to detect, so a measurement
// reports it rather than editing it away.
func (a *Alerts) RuleFor(t testing.TB, alert string) time.Duration {
	t.Helper()
	d, err := ruleFor(a.RulesFile, alert)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func ruleFor(file, alert string) (time.Duration, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				For   string `json:"for"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		return 0, fmt.Errorf("rules %s: %w", file, err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != alert {
				continue
			}
			if r.For == "" {
				return 0, nil
			}
			// Prometheus durations (1m, 30s, 1h30m) that Go reads alike;
			// 1d or 1w would not parse and fail loudly here.
			d, err := time.ParseDuration(r.For)
			if err != nil {
				return 0, fmt.Errorf("rules %s: alert %s: for %q: %w", file, alert, r.For, err)
			}
			return d, nil
		}
	}
	return 0, fmt.Errorf("rules %s: no alert %s", file, alert)
}

// Samples asks Prometheus for an instant vector and returns each series'
// labels and value: what Prometheus holds, to tell "not scraped yet" from
// "the rule did not fire".
func (a *Alerts) Samples(expr string) ([]Sample, error) {
	resp, err := http.Get(a.PrometheusURL + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", expr, body.Error)
	}
	out := make([]Sample, 0, len(body.Data.Result))
	for _, r := range body.Data.Result {
		v, _ := r.Value[1].(string)
		out = append(out, Sample{Labels: r.Metric, Value: v})
	}
	return out, nil
}

// Sample is one series of an instant query: its labels and its value as
// Prometheus printed it.
type Sample struct {
	Labels map[string]string
	Value  string
}
