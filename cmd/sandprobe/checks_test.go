package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/probes"
)

// TestChecksJSON: `checks -o json` lists every check with its severity, in
// the reports' key casing (camelCase, as a finding's "check" and
// "severity"), the probe's, the drift rules and the runner's alike.
func TestChecksJSON(t *testing.T) {
	code, out, stderr := runApp(t, "", "checks", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var list []map[string]any
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	if want := len(probes.Catalogue()) + len(drift.Rules()); len(list) < want {
		t.Fatalf("%d entries, want at least the %d probe checks and drift rules", len(list), want)
	}
	ids := map[string]bool{}
	for _, e := range list {
		for k := range e {
			if k != strings.ToLower(k[:1])+k[1:] {
				t.Errorf("key %q is not camelCase like the reports'", k)
			}
		}
		id, _ := e["id"].(string)
		ids[id] = true
		if sev, _ := e["severity"].(string); sev == "" {
			t.Errorf("%s: no severity", id)
		}
	}
	for _, id := range []string{"escape.runtime-socket", "drift.pod.privileged", "parity.policies", "probe.run", "admission.would-refuse"} {
		if !ids[id] {
			t.Errorf("%s not listed", id)
		}
	}
	if keys := reflect.ValueOf(list[0]).MapKeys(); len(keys) < 5 {
		t.Errorf("first entry %v", list[0])
	}
}
