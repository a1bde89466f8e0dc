package result

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestTerminationMessage: the whole result travels compressed when it fits
// (every finding, passes and evidence included), and decodes to exactly
// what the probe printed; one too large for that falls back to the compact
// form; garbage behind the prefix is an error, never an empty result.
func TestTerminationMessage(t *testing.T) {
	res := ProbeResult{Schema: ProbeResultSchema, Nonce: "n-1", Policy: "p", StartedAt: time.Now().UTC().Truncate(time.Second)}
	for i := range 60 {
		res.Findings = append(res.Findings, Finding{Check: "egress.must-fail", Subject: fmt.Sprintf("10.99.20.%d:443", i), Status: Pass, Class: "timeout",
			Expected: "no answer (any failure)", Actual: "timeout", Evidence: fmt.Sprintf("10.99.20.%d:443: no answer before the deadline (dropped) in 2.001s", i)})
	}
	for _, c := range []struct {
		name       string
		findings   int
		compressed bool
	}{{"60 findings: whole", 60, true}, {"one: whole", 1, true}} {
		t.Run(c.name, func(t *testing.T) {
			r := res
			r.Findings = res.Findings[:c.findings]
			msg, err := r.TerminationMessage(TerminationMsgSize)
			if err != nil {
				t.Fatal(err)
			}
			if len(msg) > TerminationMsgSize {
				t.Fatalf("%d bytes", len(msg))
			}
			doc, compressed, err := DecodeTerminationMessage(string(msg))
			if err != nil || compressed != c.compressed {
				t.Fatalf("compressed %v err %v", compressed, err)
			}
			var back ProbeResult
			if err := json.Unmarshal(doc, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, r) {
				t.Errorf("decoded result differs from the probe's:\n%+v\n%+v", back, r)
			}
		})
	}
	// Evidence too varied to compress: the passes lose their texts, not
	// their place (one series each in the metrics).
	noisy := res
	noisy.Findings = append([]Finding(nil), res.Findings...)
	for i := range noisy.Findings {
		h := sha256.Sum256([]byte(noisy.Findings[i].Subject))
		noisy.Findings[i].Evidence = fmt.Sprintf("%x%x", h, sha256.Sum256(h[:]))
	}
	back, compressed, err := roundTripMessage(t, noisy)
	if err != nil || !compressed || !back.Compact || len(back.Findings) != len(noisy.Findings) || back.Findings[0].Evidence != "" {
		t.Errorf("noisy evidence: compressed %v, compact %v, %d of %d findings, err %v: want every finding, without its texts", compressed, back.Compact, len(back.Findings), len(noisy.Findings), err)
	}
	// Every must-fail target answering (an allow-all "for a minute"): many
	// failures, each with evidence of its own, beside as many passes. Every
	// finding still arrives, failures with their verdicts, nothing cut: a
	// cut result would be an error (exit 3), not the failure it is.
	open := allowAll(noisy)
	back, compressed, err = roundTripMessage(t, open)
	if err != nil || !compressed || len(back.Findings) != len(open.Findings) || back.OmittedPasses != 0 {
		t.Fatalf("an allow-all: compressed %v, %d of %d findings (%d passes omitted), err %v: want every finding", compressed, len(back.Findings), len(open.Findings), back.OmittedPasses, err)
	}
	checkSameFindings(t, back.Findings, open.Findings)
	checkTooBigToCompress(t, res)
	if _, _, err := DecodeTerminationMessage(GzipPrefix + "not base64!"); err == nil {
		t.Errorf("garbage behind the prefix decoded")
	}
}

// checkSameFindings: every finding arrived, in order, a failure with its
// verdict.
func checkSameFindings(t *testing.T, got, sent []Finding) {
	t.Helper()
	for i, f := range got {
		if f.Check != sent[i].Check || f.Status != sent[i].Status || f.Subject != sent[i].Subject || (f.Status == Fail && f.Actual == "") {
			t.Errorf("finding %d: %s %s %s %q, the probe's %s %s %s", i, f.Check, f.Subject, f.Status, f.Actual, sent[i].Check, sent[i].Subject, sent[i].Status)
		}
	}
}

// checkTooBigToCompress: a result too large to compress into the message
// is sent in its compact form.
func checkTooBigToCompress(t *testing.T, res ProbeResult) {
	t.Helper()
	big := res
	for i := range 2000 {
		big.Findings = append(big.Findings, Finding{Check: "creds.env-secrets", Subject: fmt.Sprintf("K%x_KEY", i*7919), Status: Pass, Evidence: strings.Repeat(fmt.Sprint(i), 9)})
	}
	msg, err := big.TerminationMessage(TerminationMsgSize)
	if err != nil {
		t.Fatal(err)
	}
	if doc, compressed, err := DecodeTerminationMessage(string(msg)); err != nil || compressed || !strings.Contains(string(doc), `"compact":true`) {
		t.Errorf("too large to compress into the message: compressed %v, err %v, want the compact form", compressed, err)
	}
}

// roundTripMessage writes r as a termination message and reads it back.
func roundTripMessage(t *testing.T, r ProbeResult) (ProbeResult, bool, error) {
	t.Helper()
	msg, err := r.TerminationMessage(TerminationMsgSize)
	if err != nil {
		t.Fatal(err)
	}
	doc, compressed, err := DecodeTerminationMessage(string(msg))
	var back ProbeResult
	if err == nil {
		err = json.Unmarshal(doc, &back)
	}
	return back, compressed, err
}

// allowAll is r with its first 36 must-fail targets answering, each
// failure with evidence of its own.
func allowAll(r ProbeResult) ProbeResult {
	open := r
	open.Findings = append([]Finding(nil), r.Findings...)
	for i := range 36 {
		h := sha256.Sum256([]byte(fmt.Sprint("open", i)))
		open.Findings[i] = Finding{Check: "egress.must-fail", Subject: fmt.Sprintf("10.99.%d.%d:443", i, i*7), Status: Fail, Class: "answered",
			Expected: "no answer (any failure)", Actual: fmt.Sprintf("answered: 10.99.%d.%d:443: connected", i, i*7), Evidence: fmt.Sprintf("%x%x", h, sha256.Sum256(h[:])),
			Fix: fmt.Sprintf("a rule that blocked 10.99.%d.%d:443 is gone or was widened: restore the deny (NetworkPolicy, firewall) for it", i, i*7), Attempt: &Attempt{Attempted: true, Started: float64(i) / 1000, Waited: 0.004, Timeout: 2, Addresses: []AddressAttempt{{Address: fmt.Sprintf("10.99.%d.%d:443", i, i*7), Class: "answered", Waited: 0.004}}}}
	}
	return open
}

func TestCompactFitsTerminationMessage(t *testing.T) {
	res := ProbeResult{Schema: ProbeResultSchema, Nonce: "n-123", Policy: "p", StartedAt: time.Now()}
	for i := range 400 {
		st := Pass
		if i%7 == 0 {
			st = Fail
		}
		res.Findings = append(res.Findings, Finding{Check: "egress.must-fail", Subject: strings.Repeat("x", 30) + string(rune('a'+i%26)), Status: st,
			Expected: strings.Repeat("e", 300), Actual: strings.Repeat("a", 300), Evidence: strings.Repeat("v", 500), Fix: "fix it"})
	}
	for _, n := range []int{1, 10, 60, 400} {
		r := res
		r.Findings = res.Findings[:n]
		out, err := r.CompactJSON(TerminationMsgSize)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) > TerminationMsgSize {
			t.Fatalf("%d findings: %d bytes", n, len(out))
		}
		var back ProbeResult
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatal(err)
		}
		if back.Nonce != "n-123" || !back.Compact {
			t.Fatalf("lost nonce or compact flag: %+v", back)
		}
		fails := 0
		for _, f := range back.Findings {
			if f.Status != Pass {
				fails++
			}
		}
		if fails == 0 && n > 1 {
			t.Fatalf("%d findings: compact form dropped every failure", n)
		}
		if n == 400 && Count(back.Findings).Error == 0 {
			t.Fatalf("a cut result must carry an error finding")
		}
	}
}
