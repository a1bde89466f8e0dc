package manifest

import (
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
		err := SameJSONKey([]byte(c.doc))
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: refused (%v)", c.doc, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %v, want %q", c.doc, err, c.err)
		}
	}
}
