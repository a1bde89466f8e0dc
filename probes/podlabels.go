package probes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/sandprobe/sandprobe/result"
)

// checkPodLabels reads the pod's own labels from its downward-API volume and
// proves the probe pod carries the sandbox selector's labels, as admitted
// (a mutating webhook could have changed them). It claims no more: which
// policies select the pod only the runner can see, from outside (parity).
func checkPodLabels(_ context.Context, env *Env) []result.Finding {
	path := filepath.Join(env.PodInfoDir, "labels")
	raw, err := os.ReadFile(path)
	if err != nil {
		return []result.Finding{errorf("", "read the pod's labels from %s: %s", path, errnoName(err))}
	}
	have, err := parseDownwardLabels(string(raw))
	if err != nil {
		return []result.Finding{errorf("", "parse %s: %v", path, err)}
	}
	want := env.Policy.Spec.Selector.MatchLabels
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []result.Finding
	ev := "downward API " + path + "; which egress policies select the pod is the runner's parity check"
	for _, k := range keys {
		exp := fmt.Sprintf("%s=%q", k, want[k])
		v, ok := have[k]
		switch {
		case !ok:
			out = append(out, fail(k, exp, "label missing", ev))
		case v != want[k]:
			out = append(out, fail(k, exp, fmt.Sprintf("%s=%q", k, v), ev))
		default:
			out = append(out, pass(k, exp, exp, ev))
		}
	}
	return out
}

// parseDownwardLabels reads the downward API's `key="value"` lines.
func parseDownwardLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %q is not key=\"value\"", line)
		}
		uq, err := strconv.Unquote(v)
		if err != nil {
			return nil, fmt.Errorf("line %q: value is not quoted: %w", line, err)
		}
		out[k] = uq
	}
	return out, nil
}
