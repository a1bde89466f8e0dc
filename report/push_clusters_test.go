package report

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

// TestPushgatewayTwoClusters: two clusters' CronJobs push to one real
// Pushgateway (Debian's prometheus-pushgateway) in turns. Each push
// replaces only its own group {job="sandprobe", cluster=NAME}: every
// series on the gateway carries its cluster label, a push of one cluster
// never changes or removes the other's series, and each cluster's last
// success is read from its own group alone.
func TestPushgatewayTwoClusters(t *testing.T) {
	gw := testenv.Pushgateway(t)
	ctx := context.Background()
	client := &http.Client{Timeout: 5 * time.Second}
	mA, regA := observed(t, brokenRun()) // prod-eu-1: egress reopened on worker-1
	_, regB := observed(t, healthyRun()) // prod-us-1: healthy
	if err := PushMetrics(ctx, client, gw, "prod-eu-1", regA); err != nil {
		t.Fatal(err)
	}
	if err := PushMetrics(ctx, client, gw, "prod-us-1", regB); err != nil {
		t.Fatal(err)
	}
	groupOf := func(got map[string]float64) map[string]map[string]float64 { return groupByCluster(t, got) }
	first := groupOf(scrape(t, client, gw+"/metrics"))
	if len(first["prod-eu-1"]) == 0 || len(first["prod-us-1"]) == 0 {
		t.Fatalf("want both clusters' groups on the gateway, got %d and %d series", len(first["prod-eu-1"]), len(first["prod-us-1"]))
	}
	up := func(g map[string]float64) float64 {
		for k, v := range g {
			if strings.HasPrefix(k, "sandprobe_up{") {
				return v
			}
		}
		return -1
	}
	if up(first["prod-eu-1"]) != 0 || up(first["prod-us-1"]) != 1 {
		t.Errorf("up: prod-eu-1 %v (want 0), prod-us-1 %v (want 1)", up(first["prod-eu-1"]), up(first["prod-us-1"]))
	}

	// prod-eu-1 recovers and pushes again: its group is replaced whole (the
	// reopened node's series leave), prod-us-1's stays exactly as it was.
	mA.Observe(healthyRun(), finishedAt.Add(time.Hour))
	if err := PushMetrics(ctx, client, gw, "prod-eu-1", regA); err != nil {
		t.Fatal(err)
	}
	second := groupOf(scrape(t, client, gw+"/metrics"))
	for k, v := range first["prod-us-1"] {
		if strings.Contains(k, "push_time_seconds") {
			continue
		}
		if w, ok := second["prod-us-1"][k]; !ok || w != v {
			t.Errorf("prod-eu-1's push changed prod-us-1's series %s: %v -> %v (present %v)", k, v, w, ok)
		}
	}
	if up(second["prod-eu-1"]) != 1 {
		t.Errorf("prod-eu-1 after its healthy push: up %v", up(second["prod-eu-1"]))
	}
	for k := range second["prod-eu-1"] {
		if strings.Contains(k, "worker-3") {
			t.Errorf("a series prod-eu-1's last push no longer holds is still in its group: %s", k)
		}
	}
	// Each cluster's last success comes from its own group.
	whenA, okA, errA := LastSuccessAtGateway(ctx, client, gw, "prod-eu-1")
	whenB, okB, errB := LastSuccessAtGateway(ctx, client, gw, "prod-us-1")
	if errA != nil || errB != nil || !okA || !okB || !whenA.Equal(finishedAt.Add(time.Hour)) || !whenB.Equal(finishedAt) {
		t.Errorf("last success: prod-eu-1 %v %v %v, prod-us-1 %v %v %v", whenA, okA, errA, whenB, okB, errB)
	}
}

// groupByCluster sorts the gateway's sandprobe series into the two
// clusters' groups by their cluster label; a series without one fails.
func groupByCluster(t *testing.T, got map[string]float64) map[string]map[string]float64 {
	t.Helper()
	out := map[string]map[string]float64{}
	for k, v := range got {
		if !strings.HasPrefix(k, "sandprobe_") {
			continue
		}
		c := ""
		for _, cl := range []string{"prod-eu-1", "prod-us-1"} {
			if strings.Contains(k, `cluster="`+cl+`"`) {
				c = cl
			}
		}
		if c == "" {
			t.Errorf("a pushed series without its cluster label: %s", k)
			continue
		}
		if out[c] == nil {
			out[c] = map[string]float64{}
		}
		out[c][k] = v
	}
	return out
}
