package manifest

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
)

// SameJSONKey refuses a YAML document in which one mapping holds two
// different keys that become the same JSON key: `0:` and `.000:` (an
// integer and a float), `1:` and `"1":`, `y:` and `"true":`, two `.nan:`.
// kubectl converts YAML to JSON through a Go map (sigs.k8s.io/yaml over
// go-yaml v2), so which of the two values it sends the API server is a coin
// toss on every apply; no reading of the file can say what is stored, and
// drift will not guess. go-yaml's own duplicates (`0:` and `00:`, the same
// integer) are not ambiguous: the last one wins, as in kubectl.
//
// It reads the document as kubectl's converter does (go-yaml v2) and names
// the JSON key each mapping key becomes as that converter does; a document
// go-yaml v2 cannot read is left to the caller's reading to refuse.
//
// Written here rather than taken from sigs.k8s.io/yaml: the library keeps
// its key conversion private and resolves a collision silently.
//
// A document whose every key is, by its text, a string to go-yaml v2
// (stringKeysOnly: most manifests) cannot hold two such keys and is not
// read at all: that reading was a sixth of drift -f's CPU on hand-written
// manifests. FuzzStringKeysOnly holds the shortcut to the full check.
func SameJSONKey(raw []byte) error {
	if stringKeysOnly(raw) {
		return nil
	}
	return sameJSONKeyRead(raw)
}

// sameJSONKeyRead is SameJSONKey's full check: the document read as
// kubectl's converter reads it.
func sameJSONKeyRead(raw []byte) error {
	var v any
	if yamlv2.Unmarshal(raw, &v) != nil {
		return nil
	}
	return collidingKeys(v, 0)
}

func collidingKeys(v any, depth int) error {
	if depth > 10000 {
		return nil // go-yaml refuses deeper documents itself
	}
	switch t := v.(type) {
	case map[any]any:
		// In a fixed order, so the same file names the same keys.
		keys := make([]mapKey, 0, len(t))
		for k := range t {
			if s, ok := jsonKeyOf(k); ok { // else sigs.k8s.io/yaml refuses the key itself
				keys = append(keys, mapKey{json: s, text: yamlKeyText(k), key: k})
			}
		}
		slices.SortFunc(keys, func(a, b mapKey) int {
			return cmp.Or(cmp.Compare(a.json, b.json), cmp.Compare(a.text, b.text))
		})
		for i, k := range keys {
			if i > 0 && keys[i-1].json == k.json {
				return fmt.Errorf("keys %s and %s of one mapping are both the JSON key %q: kubectl sends either value, at random", keys[i-1].text, k.text, k.json)
			}
			if err := collidingKeys(t[k.key], depth+1); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range t {
			if err := collidingKeys(e, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

type mapKey struct {
	json, text string
	key        any
}

// jsonKeyOf is the JSON key sigs.k8s.io/yaml makes of a go-yaml v2 key.
func jsonKeyOf(k any) (string, bool) {
	switch t := k.(type) {
	case string:
		return t, true
	case int:
		return strconv.Itoa(t), true
	case int64:
		return strconv.FormatInt(t, 10), true
	case float64:
		switch {
		case math.IsInf(t, 1):
			return ".inf", true
		case math.IsInf(t, -1):
			return "-.inf", true
		case math.IsNaN(t):
			return ".nan", true
		}
		return strconv.FormatFloat(t, 'g', -1, 32), true
	case bool:
		return strconv.FormatBool(t), true
	}
	return "", false
}

// yamlKeyText names a key as go-yaml read it: a string quoted, a float
// with its point (0.0, not the integer 0), an integer or boolean as is.
func yamlKeyText(k any) string {
	switch t := k.(type) {
	case string:
		return strconv.Quote(t)
	case float64:
		s := strconv.FormatFloat(t, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eIN") {
			s += ".0"
		}
		return s
	}
	return fmt.Sprint(k)
}

// stringKeysOnly reports whether every mapping key of raw is, by its
// text, a string to go-yaml v2, so that no two keys of a mapping can be
// the same JSON key (two equal strings are one key to go-yaml, the last
// value winning, as in kubectl). It is conservative: every ':' is taken
// for the end of a key (in a value, a comment or a block scalar too), and
// the run of text before it must be quoted, or start with a letter, '_'
// or '/' (or a non-ASCII character) and not be a word go-yaml v2 resolves to a
// boolean or null; a number, '.inf', '~', an alias, a merge key or an
// empty key says no. A flow entry that ends (',' '}' ']') with no ':'
// may be a key with a null value: the text before its end is held to the
// same test, and a new line starts an entry afresh. So do a tag anywhere (it can make "1" an integer),
// an explicit key ('? '), a NEL, LS or PS (a line may hide behind one),
// and a document go-yaml might read otherwise: anything it says no to is
// read in full.
func stringKeysOnly(raw []byte) bool {
	if HasUnicodeBreak(raw) {
		return false
	}
	// valued: a ':' since the flow entry (or line) began; an entry that
	// ends without one is a key with a null value ({1, "1": a}).
	valued := false
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '{', '[', '\n':
			valued = false
		case ',', '}', ']':
			if !valued && !entryKeyBefore(raw[:i]) {
				return false
			}
			valued = false
		case '!':
			if i == 0 || tokenBoundary(raw[i-1]) || raw[i-1] == '-' || raw[i-1] == '?' || raw[i-1] == ':' {
				return false // a tag
			}
		case '?':
			if i+1 == len(raw) || raw[i+1] == ' ' || raw[i+1] == '\t' || raw[i+1] == '\n' || raw[i+1] == '\r' {
				return false // an explicit key
			}
		case ':':
			if !stringKeyBefore(raw[:i]) {
				return false
			}
			valued = true
		}
	}
	return true
}

// entryKeyBefore is stringKeyBefore for the text before a flow entry's
// end (',' '}' ']') where the entry had no ':': a key with a null value
// in a mapping (or an item of a sequence, checked alike), or nothing in
// an empty collection.
func entryKeyBefore(b []byte) bool {
	end := len(b)
	for end > 0 && (b[end-1] == ' ' || b[end-1] == '\t') {
		end--
	}
	if end > 0 && (b[end-1] == '{' || b[end-1] == '[') {
		return true // {} or []
	}
	return stringKeyBefore(b)
}

// tokenBoundary: what ends the text before a ':' going back (whitespace,
// a line's start, a flow collection's opening or separator).
func tokenBoundary(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '[', '{', ',':
		return true
	}
	return false
}

// stringKeyBefore reports whether the text before a ':' (b ends there),
// taken for a key, is a string to go-yaml v2.
func stringKeyBefore(b []byte) bool {
	end := len(b)
	for end > 0 && (b[end-1] == ' ' || b[end-1] == '\t') {
		end--
	}
	start := end
	for start > 0 && !tokenBoundary(b[start-1]) {
		start--
	}
	tok := b[start:end]
	if len(tok) == 0 {
		return false // an empty key is null
	}
	if last := tok[len(tok)-1]; last == '"' || last == '\'' {
		return true // quoted (a tag would have said no already)
	}
	c := tok[0]
	if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '/' || c >= 0x80) {
		return false // a number, '.inf', '~', an alias, a merge key, '-', …
	}
	switch string(tok) {
	case "true", "false", "null":
		return false
	}
	return !yaml11Word(tok)
}
