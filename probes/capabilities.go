package probes

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

var capSetOrder = []string{"CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"}

func checkCapabilities(_ context.Context, env *Env) []result.Finding {
	sets, err := capSets()
	if err != nil {
		return []result.Finding{errorf("", "%v", err)}
	}
	allowed := env.Policy.Spec.Capabilities
	expected := "no capabilities"
	if len(allowed) > 0 {
		expected = "at most " + strings.Join(allowed, ", ")
	}
	status := procStatus()
	var out []result.Finding
	for _, name := range capSetOrder {
		have := policy.CapabilityNames(sets[name])
		var extra []string
		for _, c := range have {
			if !slices.Contains(allowed, c) {
				extra = append(extra, c)
			}
		}
		evidence := fmt.Sprintf("%s=%016x", name, sets[name])
		if line, ok := status[name]; ok {
			evidence += "; /proc/self/status " + name + ":\t" + line
		}
		actual := joinOr(have, "none")
		if len(extra) > 0 {
			out = append(out, fail(name, expected, actual, evidence))
		} else {
			out = append(out, pass(name, expected, actual, evidence))
		}
	}
	return out
}

// procStatus reads /proc/self/status into a map, for evidence only.
func procStatus() map[string]string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}
