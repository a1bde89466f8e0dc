package report

import (
	"encoding/json"
	"fmt"
)

// CompactJSON shortens a probe result to fit limit bytes of JSON (a Kubernetes
// termination message holds 4 KiB). It keeps every non-passing finding,
// trimming evidence and long texts first, then drops passing findings and
// counts them in OmittedPasses. The runner refills fixes from the catalogue.
func (p ProbeResult) CompactJSON(limit int) ([]byte, error) {
	c := p
	c.Compact = true
	c.Findings = make([]Finding, len(p.Findings))
	for i, f := range p.Findings {
		f.Evidence, f.Fix = "", ""
		f.Attempt = nil // the full result (the pod's log) carries it
		if f.Status == Pass {
			f.Expected, f.Actual = "", ""
		}
		f.Seconds = 0
		c.Findings[i] = f
	}
	if c.Runtime != nil {
		r := *c.Runtime
		r.Markers = nil
		r.ProcVersion = clip(r.ProcVersion, 80)
		c.Runtime = &r
	}
	for _, max := range []int{160, 80, 40} {
		out, err := json.Marshal(c)
		if err != nil {
			return nil, err
		}
		if len(out) <= limit {
			return out, nil
		}
		for i := range c.Findings {
			c.Findings[i].Expected = clip(c.Findings[i].Expected, max)
			c.Findings[i].Actual = clip(c.Findings[i].Actual, max)
		}
	}
	var kept []Finding
	for _, f := range c.Findings {
		if f.Status == Pass {
			c.OmittedPasses++
			continue
		}
		kept = append(kept, f)
	}
	c.Findings = kept
	// Still too long: keep the first failures and end with an error finding,
	// so the runner never mistakes a cut result for a clean one.
	marker := Finding{Check: "probe.truncated", Status: Error, Actual: "result cut to fit the termination message; read the pod log for the rest"}
	truncated := false
	for {
		out, err := json.Marshal(c)
		if err != nil {
			return nil, err
		}
		if len(out) <= limit {
			return out, nil
		}
		if !truncated {
			truncated = true
			c.Findings = append(c.Findings, marker)
		}
		if len(c.Findings) < 2 {
			return nil, fmt.Errorf("probe result does not fit in %d bytes even without findings", limit)
		}
		c.Findings = append(c.Findings[:len(c.Findings)-2], marker)
	}
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
