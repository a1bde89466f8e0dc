package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The testdata are what `make e2e CNI=cilium` read from its cluster
// (trimmed to the fields compared): the objects from kubectl and the
// endpoints from the Cilium v1.20.2 agent, healthy, with the additive
// toEntities world CNP, and after the agent's restart with
// --enable-policy=never.
const e2ePolicy = "../cilium-policy.yaml"

func runView(t *testing.T, objects, endpoints string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code, err := ciliumView([]string{"--policy", e2ePolicy, "--objects", objects, "--endpoints", endpoints}, &out)
	if err != nil {
		t.Fatalf("cilium-view: %v", err)
	}
	return code, out.String()
}

func testdata(name string) string { return filepath.Join("testdata", name) }

// A healthy cluster, and one where an additive CNP allows the world
// (an L3-only rule: the agent lists it with port 0): drift reads both as
// the agent enforces them.
func TestCiliumViewAgrees(t *testing.T) {
	for _, run := range []string{"healthy", "world"} {
		code, out := runView(t, testdata(run+".objects.json"), testdata(run+".endpoints.json"))
		if code != 0 || strings.Contains(out, "DIFF") {
			t.Errorf("%s: exit %d, want 0 (agree):\n%s", run, code, out)
		}
		if !strings.Contains(out, "agree sandboxes/agent-1: egress enforced") {
			t.Errorf("%s: agent-1 not compared as enforced:\n%s", run, out)
		}
	}
	_, out := runView(t, testdata("world.objects.json"), testdata("world.endpoints.json"))
	if !strings.Contains(out, "ciliumnetworkpolicy/sandboxes/allow-world-for-a-minute") {
		t.Errorf("world: the additive CNP is not among agent-1's rules:\n%s", out)
	}
}

// The agent restarted with --enable-policy=never: every spec as before,
// nothing enforced. Only the agent's own view shows it.
func TestCiliumViewCatchesEnforcementOff(t *testing.T) {
	code, out := runView(t, testdata("never.objects.json"), testdata("never.endpoints.json"))
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	want := "DIFF sandboxes/agent-1: drift reads egress enforced (selected by ciliumnetworkpolicy/sandboxes/sandprobe-e2e-sandbox-egress); the agent: egress not enforced (policy-enabled none)"
	if !strings.Contains(out, want) {
		t.Errorf("no enforcement difference for agent-1:\n%s", out)
	}
}

// A difference in drift's reading: the same agent view against objects
// drift reads otherwise (the CNP no longer selecting agent-1, one more
// toFQDNs name, a running pod the agent has no endpoint for).
func TestCiliumViewCatchesReadingDifferences(t *testing.T) {
	b, err := os.ReadFile(testdata("healthy.objects.json"))
	if err != nil {
		t.Fatal(err)
	}
	mutate := func(kind string, fn func(map[string]any)) string {
		var l struct {
			Kind  string           `json:"kind"`
			Items []map[string]any `json:"items"`
		}
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		for _, it := range l.Items {
			if it["kind"] == kind {
				fn(it)
			}
		}
		out, _ := json.Marshal(l)
		f := filepath.Join(t.TempDir(), "objects.json")
		if err := os.WriteFile(f, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	cases := []struct {
		name, want string
		objects    string
	}{
		{"selector", "DIFF sandboxes/agent-1: drift reads egress not enforced", mutate("CiliumNetworkPolicy", func(o map[string]any) {
			o["spec"].(map[string]any)["endpointSelector"] = map[string]any{"matchLabels": map[string]any{"sandbox": "other"}}
		})},
		{"fqdn", "DIFF sandboxes/agent-1: toFQDNs (host port): drift reads *.git.lab.test 443, api.lab.test 443, extra.lab.test 443", mutate("CiliumNetworkPolicy", func(o map[string]any) {
			for _, r := range o["spec"].(map[string]any)["egress"].([]any) {
				rule := r.(map[string]any)
				if f, ok := rule["toFQDNs"].([]any); ok && len(f) > 0 && f[0].(map[string]any)["matchName"] == "api.lab.test" {
					rule["toFQDNs"] = append(f, map[string]any{"matchName": "extra.lab.test"})
				}
			}
		})},
		{"no endpoint", "DIFF factory/git-broker: running at 10.99.99.99, but the agent has no endpoint for it", mutate("Pod", func(o map[string]any) {
			if o["metadata"].(map[string]any)["name"] == "git-broker" {
				o["status"].(map[string]any)["podIP"] = "10.99.99.99"
			}
		})},
	}
	for _, c := range cases {
		code, out := runView(t, c.objects, testdata("healthy.endpoints.json"))
		if code != 1 || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, want 1 and %q:\n%s", c.name, code, c.want, out)
		}
	}
}

func TestCiliumViewBadInput(t *testing.T) {
	var out bytes.Buffer
	if code, err := ciliumView([]string{"--policy", e2ePolicy}, &out); code != 2 || err == nil {
		t.Errorf("missing --objects: exit %d, err %v; want 2 and an error", code, err)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	_ = os.WriteFile(bad, []byte("{"), 0o644)
	if code, err := ciliumView([]string{"--policy", e2ePolicy, "--objects", bad, "--endpoints", testdata("healthy.endpoints.json")}, &out); code != 2 || err == nil || !strings.Contains(err.Error(), "bad.json") {
		t.Errorf("broken objects: exit %d, err %v; want 2 naming the file", code, err)
	}
}
