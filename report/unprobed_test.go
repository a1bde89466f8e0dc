package report

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// TestUnprobedNodes: a node of the pool that got no probe is named, per
// node, namespace and reason, in sandprobe_node_unprobed and in the text
// report; the run stays exit 3 (never a pass), but it could check the
// other nodes, so sandprobe_up stays 1 — unless nothing was checked at all
// or something other than a pool node could not run.
func TestUnprobedNodes(t *testing.T) {
	probed := func(node string) []Finding {
		where := Location{Namespace: "sandboxes", Node: node}
		target := where.String()
		return []Finding{
			{Check: "identity.uid", Target: target, Where: where, Namespace: "sandboxes", Status: Pass},
			{Check: "egress.must-fail", Role: RoleMustFail, Subject: "example.com:443", Target: target, Where: where, Namespace: "sandboxes", Status: Pass, Class: "timeout", Deny: DenyProven},
		}
	}
	cnr := func(target string, where Location, reason string) Finding {
		return Finding{Check: CheckProbeRun, Subject: reason, Target: target, Where: where, Status: Error}
	}
	cases := []struct {
		name     string
		findings []Finding
		up       float64
		unprobed []string // node/namespace/reason
	}{
		{name: "one cordoned node of three",
			findings: slices.Concat(probed("w1"), probed("w2"), []Finding{cnr("namespace/sandboxes/node/w3", Location{Namespace: "sandboxes", Node: "w3"}, "node-cordoned")}),
			up:       1, unprobed: []string{"w3/sandboxes/node-cordoned"}},
		{name: "a cordoned node and one past the run's deadline",
			findings: slices.Concat(probed("w1"), []Finding{cnr("namespace/sandboxes/node/w3", Location{Namespace: "sandboxes", Node: "w3"}, "node-cordoned"), cnr("namespace/sandboxes/node/w2", Location{Namespace: "sandboxes", Node: "w2"}, "deadline-exceeded")}),
			up:       1, unprobed: []string{"w2/sandboxes/deadline-exceeded", "w3/sandboxes/node-cordoned"}},
		{name: "every node unprobed: nothing was checked",
			findings: []Finding{cnr("namespace/sandboxes/node/w1", Location{Namespace: "sandboxes", Node: "w1"}, "node-not-ready"), cnr("namespace/sandboxes/node/w2", Location{Namespace: "sandboxes", Node: "w2"}, "node-not-ready")},
			up:       0, unprobed: []string{"w1/sandboxes/node-not-ready", "w2/sandboxes/node-not-ready"}},
		{name: "a could-not-run of the whole run is no node's",
			findings: slices.Concat(probed("w1"), []Finding{cnr("kube", Location{}, "launch-failed")}),
			up:       0},
		{name: "a check that could not run on a probed node is not an unprobed node",
			findings: slices.Concat(probed("w1"), []Finding{{Check: "probe.result", Target: "namespace/sandboxes/node/w1", Where: Location{Namespace: "sandboxes", Node: "w1"}, Status: Error}, cnr("namespace/sandboxes/node/w3", Location{Namespace: "sandboxes", Node: "w3"}, "node-cordoned")}),
			up:       0, unprobed: []string{"w3/sandboxes/node-cordoned"}},
		{name: "the control vantage and a stand-in for an unlabelled pod are not pool nodes",
			findings: slices.Concat(probed("w1"), []Finding{cnr("namespace/sandprobe-system/node/w1/control", Location{Namespace: "sandprobe-system", Node: "w1", Control: true}, "crashed"), cnr("namespace/sandboxes/node/w1/as/stray", Location{Namespace: "sandboxes", Node: "w1", Stray: "stray"}, "crashed")}),
			up:       0},
		{name: "the local backend has no pool",
			findings: []Finding{cnr("local/sandbox", Location{}, "crashed")},
			up:       0},
		{name: "node/NAME targets (Docker, older runs) count too",
			findings: []Finding{{Check: "identity.uid", Target: "node/w1", Where: Location{Node: "w1"}, Status: Pass}, cnr("node/w2", Location{Node: "w2"}, "unschedulable")},
			up:       1, unprobed: []string{"w2//unschedulable"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := Run{Policy: "p", Version: "v", Backend: "kube", Findings: tc.findings}
			if run.ExitCode() != ExitCouldNotRun {
				t.Fatalf("exit %d, want 3: an unprobed node is never a pass", run.ExitCode())
			}
			_, reg := observed(t, run)
			got := samples(t, reg)
			if got["sandprobe_up"] != tc.up {
				t.Errorf("sandprobe_up %v, want %v", got["sandprobe_up"], tc.up)
			}
			unprobed := unprobedSeries(t, got)
			slices.Sort(unprobed)
			if !slices.Equal(unprobed, tc.unprobed) {
				t.Errorf("%s: %v, want %v", MetricNodeUnprobed, unprobed, tc.unprobed)
			}
			var b bytes.Buffer
			if err := (Text{}).Write(&b, run); err != nil {
				t.Fatal(err)
			}
			line := ""
			for _, l := range strings.Split(b.String(), "\n") {
				if strings.HasPrefix(l, "unprobed: ") {
					line = l
				}
			}
			switch {
			case len(tc.unprobed) == 0 && line != "":
				t.Errorf("text report names unprobed nodes where there are none: %s", line)
			case len(tc.unprobed) > 0 && (!strings.Contains(line, "not a pass") || !strings.Contains(line, tc.unprobed[0][:2])):
				t.Errorf("text report's unprobed line %q does not name %s and say it is not a pass:\n%s", line, tc.unprobed[0], b.String())
			}
		})
	}
}

// unprobedSeries reads the node_unprobed series of the samples as
// node/namespace/reason, each at 1.
func unprobedSeries(t *testing.T, got map[string]float64) []string {
	t.Helper()
	var unprobed []string
	for k, v := range got {
		if rest, ok := strings.CutPrefix(k, MetricNodeUnprobed+"{"); ok {
			l := map[string]string{}
			for _, kv := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
				name, val, _ := strings.Cut(kv, "=")
				l[name] = strings.Trim(val, `"`)
			}
			if v != 1 {
				t.Errorf("%s = %v, want 1", k, v)
			}
			unprobed = append(unprobed, l["node"]+"/"+l["namespace"]+"/"+l["reason"])
		}
	}
	return unprobed
}
