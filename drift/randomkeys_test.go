package drift

import (
	"bytes"
	"strings"
	"testing"
)

// TestRandomReadingRefused: a sandbox pod whose label mapping kubectl reads
// one way or the other at random is a clear error, the same one each time,
// not a verdict on a guess.
func TestRandomReadingRefused(t *testing.T) {
	doc := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: sandboxes\n  labels: {sandbox: \"true\", 7: a, 7.0: b, \"7\": c}\n" +
		"spec: {containers: [{name: a, image: x}]}\n"
	var first string
	for range 20 {
		m := &Manifests{Namespace: "sandboxes"}
		err := m.DecodeManifests(bytes.NewReader([]byte(doc)), "pod.yaml")
		if err == nil {
			t.Fatal("read a document kubectl reads at random")
		}
		if first == "" {
			first = err.Error()
		} else if err.Error() != first {
			t.Fatalf("the error changes from run to run: %q, then %q", first, err)
		}
	}
	if !strings.Contains(first, `keys "7" and 7 of one mapping`) {
		t.Fatalf("error %q does not name the keys", first)
	}
}
