package result

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// GzipPrefix marks a termination message that holds the whole result,
// gzip-compressed and base64-encoded, instead of its compact JSON form.
const GzipPrefix = "sandprobe/gzip+base64:"

// maxDecoded bounds what a compressed termination message may expand to.
const maxDecoded = 4 << 20

// TerminationMessage is what the probe leaves in its termination message,
// the first of these that fits in limit bytes: the whole result,
// gzip-compressed and base64-encoded behind GzipPrefix (a result of some 60
// findings with their attempt evidence is ~26 KB of JSON, ~4.6 KB so
// encoded); the same with the passes' texts dropped (Compact, ~2.7 KB);
// with their attempt evidence dropped too (~1.2 KB); every finding without
// evidence or attempt, texts cut ever shorter, compressed too; else the
// compact JSON form, which keeps only the non-passing findings. In a sandbox namespace
// the runner reads nothing else: it may not read the logs of pods there,
// which would be every sandbox's log too. Every pass stays in the first
// three, so the metrics keep one series per checked destination.
func (p ProbeResult) TerminationMessage(limit int) ([]byte, error) {
	lean := p
	lean.Compact = true
	lean.Findings = make([]Finding, len(p.Findings))
	for i, f := range p.Findings {
		if f.Status == Pass {
			f.Expected, f.Actual, f.Evidence, f.Fix, f.Seconds = "", settledText(f.Actual), "", "", 0
		}
		lean.Findings[i] = f
	}
	leaner := lean
	leaner.Findings = make([]Finding, len(lean.Findings))
	for i, f := range lean.Findings {
		if f.Status == Pass {
			f.Attempt = nil
		}
		leaner.Findings[i] = f
	}
	for _, r := range []ProbeResult{p, lean, leaner} {
		msg, ok, err := gzipMessage(r, limit)
		if err != nil || ok {
			return msg, err
		}
	}
	// Many failures, each with its own evidence (every must-fail target
	// answering after an allow-all): every finding still, without evidence,
	// fix and attempt (the runner refills fixes from the catalogue), with
	// ever shorter texts — compressed, before the compact JSON form drops
	// the passes and cuts the result.
	c := p.compactFindings()
	for _, max := range []int{0, 160, 80, 40} {
		if max > 0 {
			clipTexts(c.Findings, max)
		}
		msg, ok, err := gzipMessage(c, limit)
		if err != nil || ok {
			return msg, err
		}
	}
	return p.CompactJSON(limit)
}

// SettledMark is in the text of a pass whose deny answered at the pod's
// start and was refused once the engine isolated the pod (the probe's
// start-up window): that text is the only sign of why a deny that
// answered passed, so it survives compaction where other passes' texts go.
const SettledMark = "not yet in force when this pod started"

// settledText keeps a pass's text only when it says the pass was settled.
func settledText(actual string) string {
	if strings.Contains(actual, SettledMark) {
		return actual
	}
	return ""
}

// compactFindings is the result with every finding stripped to what the
// runner needs: status, class, and for the others their texts.
func (p ProbeResult) compactFindings() ProbeResult {
	c := p
	c.Compact = true
	c.Findings = make([]Finding, len(p.Findings))
	for i, f := range p.Findings {
		f.Evidence, f.Fix = "", ""
		f.Attempt = nil // the full result (the pod's log) carries it
		if f.Status == Pass {
			f.Expected, f.Actual = "", settledText(f.Actual)
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
	return c
}

func clipTexts(fs []Finding, max int) {
	for i := range fs {
		fs[i].Expected = clip(fs[i].Expected, max)
		fs[i].Actual = clip(fs[i].Actual, max)
	}
}

// gzipMessage encodes a result behind GzipPrefix; ok is false when that
// does not fit in limit bytes.
func gzipMessage(r ProbeResult, limit int) ([]byte, bool, error) {
	full, err := json.Marshal(r)
	if err != nil {
		return nil, false, err
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	zw.Write(full)
	if err := zw.Close(); err != nil {
		return nil, false, err
	}
	if len(GzipPrefix)+base64.StdEncoding.EncodedLen(gz.Len()) > limit {
		return nil, false, nil
	}
	return []byte(GzipPrefix + base64.StdEncoding.EncodeToString(gz.Bytes())), true, nil
}

// DecodeTerminationMessage returns the JSON document a termination message
// holds: a compressed whole result, decoded, or the message itself. ok is
// false when it was compressed but cannot be decoded.
func DecodeTerminationMessage(msg string) (doc []byte, compressed bool, err error) {
	enc, ok := strings.CutPrefix(strings.TrimSpace(msg), GzipPrefix)
	if !ok {
		return []byte(msg), false, nil
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, true, fmt.Errorf("decode the compressed result: %w", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, true, fmt.Errorf("decode the compressed result: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxDecoded+1))
	if err != nil {
		return nil, true, fmt.Errorf("decode the compressed result: %w", err)
	}
	if len(out) > maxDecoded {
		return nil, true, fmt.Errorf("the compressed result expands past %d bytes", maxDecoded)
	}
	return out, true, nil
}

// CheckTruncated is the error finding that ends a result cut to fit: the
// encoder's, not a verdict of the probe (its exit code does not count it).
const CheckTruncated = "probe.truncated"

// CompactJSON shortens a probe result to fit limit bytes of JSON (a Kubernetes
// termination message holds 4 KiB). It keeps every non-passing finding,
// trimming evidence and long texts first, then drops passing findings and
// counts them in OmittedPasses. The runner refills fixes from the catalogue.
func (p ProbeResult) CompactJSON(limit int) ([]byte, error) {
	c := p.compactFindings()
	for _, max := range []int{160, 80, 40} {
		out, err := json.Marshal(c)
		if err != nil {
			return nil, err
		}
		if len(out) <= limit {
			return out, nil
		}
		clipTexts(c.Findings, max)
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
	marker := Finding{Check: CheckTruncated, Status: Error, Actual: "result cut to fit the termination message; read the pod log for the rest"}
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
