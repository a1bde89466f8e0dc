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
func SameJSONKey(raw []byte) error {
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
