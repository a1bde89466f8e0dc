package drift

import (
	"bytes"
	"strings"
	"testing"
)

// TestSameJSONKey: a mapping whose keys collide as JSON keys is refused,
// naming both; YAML that kubectl reads the same way every time is not.
func TestSameJSONKey(t *testing.T) {
	for _, c := range []struct{ doc, err string }{
		{"metadata:\n  labels: {1: a, \"1\": b}\n", `keys "1" and 1 of one mapping are both the JSON key "1"`},
		{"0: a\n.000: b\n", `keys 0 and 0.0 of one mapping`},
		{"a: [{y: 1, \"true\": 2}]\n", `keys "true" and true of one mapping`},
		{"1000: a\n1e3: b\n", `keys 1000 and 1000.0`},
		{".nan: a\n.NaN: b\n", `keys NaN and NaN of one mapping are both the JSON key ".nan"`},
		// go-yaml's own duplicates (the same integer) are not random: the last wins.
		{"0: a\n00: b\n", ""},
		{"apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {sandbox: \"true\", \"1\": x}}\n", ""},
		{"a: {b: 1}\nb: {a: 1}\n", ""},
		{"[unclosed\n", ""}, // not go-yaml's to read: the caller's reading refuses it
	} {
		err := sameJSONKey([]byte(c.doc))
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: refused (%v)", c.doc, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %v, want %q", c.doc, err, c.err)
		}
	}
}

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
