package result

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// noise is text gzip cannot shrink much, as real evidence is varied.
func noise(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = "0123456789abcdef"[r.IntN(16)]
	}
	return string(b)
}

// TestSettledPassKeepsItsText: a pass settled after the start-up window
// keeps the text that says so when the termination message drops the other
// passes' texts to fit (make e2e attributes such a pass by that text; a run
// with many findings lost it and the e2e failed).
func TestSettledPassKeepsItsText(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	p := ProbeResult{Schema: ProbeResultSchema}
	for i := range 40 {
		p.Findings = append(p.Findings, Finding{Check: "egress.must-fail", Subject: fmt.Sprintf("10.0.0.%d:443", i), Status: Pass,
			Actual:   "refused; it answered once, 0.0 s into the egress checks, and was refused 2s later: the network policy was " + SettledMark + " (…)",
			Evidence: "control answered: " + noise(r, 120)})
		p.Findings = append(p.Findings, Finding{Check: "identity.uid", Subject: fmt.Sprint(i), Status: Pass, Actual: "uid 65532 " + noise(r, 60)})
	}
	msg, err := p.TerminationMessage(TerminationMsgSize)
	if err != nil {
		t.Fatal(err)
	}
	doc, _, err := DecodeTerminationMessage(string(msg))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(doc), SettledMark); got != 40 {
		t.Errorf("%d settled texts survived in %d bytes, want 40", got, len(msg))
	}
	if strings.Contains(string(doc), "uid 65532") {
		t.Errorf("an ordinary pass kept its text: the message was not compacted, the test proves nothing")
	}
}
