package manifest

import (
	"math/rand/v2"
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

// TestStringKeysOnly: the shortcut says yes to what manifests are made of
// and no to every key that could be one JSON key with another.
func TestStringKeysOnly(t *testing.T) {
	for doc, want := range map[string]bool{
		"apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {sandbox: \"true\", \"1\": x}}\nspec:\n  containers:\n  - image: agent:1.2\n    args: [\"sh\", \"-c\", \"echo http://x\"]\n": true,
		"a:\n  'b c': 1\n  _d: 2\n  é: 3\n":       true,
		"metadata:\n  labels: {1: a, \"1\": b}\n": false,
		"0: a\n.000: b\n":                         false,
		"a: [{y: 1, \"true\": 2}]\n":              false,
		"true: a\n\"true\": b\n":                  false,
		"~: a\n":                                  false,
		": a\n":                                   false,
		"base: &b {x: 1}\nm:\n  <<: *b\n":         false,
		"!!int \"1\": a\n\"1\": b\n":              false,
		"? 1\n: a\n":                              false,
		"a: |\n  #!/bin/sh\n  echo hi\n":          true,
		"a: \"10:30\"\n":                          false, // conservative: "10" before a ':'
		"a: b\u2028\"1\": c\n":                    false,
	} {
		if got := stringKeysOnly([]byte(doc)); got != want {
			t.Errorf("stringKeysOnly(%q) = %v, want %v", doc, got, want)
		}
	}
}

// FuzzStringKeysOnly: wherever the shortcut says every key is a string,
// the full reading finds no two keys that are one JSON key.
func FuzzStringKeysOnly(f *testing.F) {
	for _, s := range []string{
		"metadata:\n  labels: {1: a, \"1\": b}\n", "0: a\n.000: b\n", "a: [{y: 1, \"true\": 2}]\n", "1000: a\n1e3: b\n",
		".nan: a\n.NaN: b\n", "0: a\n00: b\n", "a: {b: 1}\nb: {a: 1}\n", "base: &b {1: x}\nm:\n  <<: *b\n  \"1\": y\n",
		"!!int \"1\": a\n\"1\": b\n", "{\"1\": a, !!int '1': b}\n", "{1, \"1\": a}\n", "[{y, 'true': 1}]\n", "[{x: 1, 'x': 2}]\n", "a:\n  on: 1\n  'true': 2\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		// The bytes as they are, and read as picks of YAML's pieces (byte
		// mutation alone rarely builds a flow entry with no value).
		for _, doc := range [][]byte{raw, yamlOfPieces(raw)} {
			if stringKeysOnly(doc) {
				if err := sameJSONKeyRead(doc); err != nil {
					t.Fatalf("%q: the shortcut says every key is a string, the full reading: %v", doc, err)
				}
			}
		}
	})
}

// keyPieces are what yamlOfPieces builds documents of: indicators,
// scalars that are strings and scalars that are not, in every quoting.
var keyPieces = []string{
	"{", "}", "[", "]", ", ", ",", ": ", ":", "\n", "  ", "- ", "? ", " # c: d\n", "!!int ", "!!str ", "&x ", "*x", "<<",
	"1", "\"1\"", "'1'", "01", "1.0", "1e0", "0x1", "y", "Y", "yes", "on", "true", "\"true\"", "'y'", "null", "~", "\"\"",
	".nan", ".inf", "-1", "a", "b", "a b", "/p", "_k", "é", "|\n", ">-\n", "\"a: 1\"",
}

// yamlOfPieces reads b as a sequence of picks from keyPieces.
func yamlOfPieces(b []byte) []byte {
	var out []byte
	for _, c := range b {
		out = append(out, keyPieces[int(c)%len(keyPieces)]...)
	}
	return out
}

// TestStringKeysOnlyGrammar: documents built from YAML's grammar (block and
// flow mappings and sequences, entries with and without values, comments,
// tags, anchors, aliases, merges) over keys that are strings and keys that
// are not: wherever the shortcut says yes, the full reading agrees.
func TestStringKeysOnlyGrammar(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 3))
	yes := 0
	for range 30000 {
		doc := []byte(grammarDoc(rng))
		if stringKeysOnly(doc) {
			yes++
			if err := sameJSONKeyRead(doc); err != nil {
				t.Fatalf("%q: the shortcut says every key is a string, the full reading: %v", doc, err)
			}
		}
	}
	if yes < 3000 {
		t.Errorf("the shortcut said yes to %d of 30,000 documents: the test no longer tries it", yes)
	}
}

// grammarKeys mixes strings with what go-yaml v2 reads as numbers,
// booleans and null, in every quoting.
var grammarKeys = []string{"a", "b", "name", "a b", "/p", "_k", "\"1\"", "'1'", "\"true\"", "'y'", "\"a: 1\"",
	"1", "01", "1.0", "y", "on", "true", "~", "null", ".nan", "!!int \"1\"", "&x 1", "*x", "<<"}

func grammarDoc(rng *rand.Rand) string {
	var b strings.Builder
	grammarBlock(rng, &b, "", 0)
	return b.String()
}

func grammarKey(rng *rand.Rand) string {
	if rng.IntN(3) > 0 {
		return grammarKeys[rng.IntN(6)] // mostly strings, as manifests are
	}
	return grammarKeys[rng.IntN(len(grammarKeys))]
}

func grammarBlock(rng *rand.Rand, b *strings.Builder, ind string, depth int) {
	for range 1 + rng.IntN(3) {
		b.WriteString(ind)
		if rng.IntN(5) == 0 {
			b.WriteString("- ")
		}
		b.WriteString(grammarKey(rng))
		b.WriteString(":")
		switch {
		case depth < 2 && rng.IntN(3) == 0:
			b.WriteString("\n")
			grammarBlock(rng, b, ind+"  ", depth+1)
			continue
		case rng.IntN(2) == 0:
			b.WriteString(" ")
			grammarFlow(rng, b, depth)
		default:
			b.WriteString(" " + grammarKey(rng))
		}
		if rng.IntN(6) == 0 {
			b.WriteString(" # c: " + grammarKey(rng))
		}
		b.WriteString("\n")
	}
}

func grammarFlow(rng *rand.Rand, b *strings.Builder, depth int) {
	open, close := "{", "}"
	if rng.IntN(3) == 0 {
		open, close = "[", "]"
	}
	b.WriteString(open)
	for i := range rng.IntN(4) {
		if i > 0 {
			if rng.IntN(8) == 0 {
				b.WriteString(" # c: " + grammarKey(rng) + "\n")
			}
			b.WriteString(", ")
			if rng.IntN(8) == 0 {
				b.WriteString("\n  ")
			}
		}
		b.WriteString(grammarKey(rng))
		switch rng.IntN(3) {
		case 0: // no value: a key with a null value in a mapping
		case 1:
			b.WriteString(": " + grammarKey(rng))
		default:
			b.WriteString(": ")
			if depth < 3 {
				grammarFlow(rng, b, depth+1)
			} else {
				b.WriteString(grammarKey(rng))
			}
		}
	}
	b.WriteString(close)
}
