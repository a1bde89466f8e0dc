package drift

import (
	"bytes"
	"errors"
	"unicode/utf8"
)

// errNotPlainYAML says a document is outside the block-YAML subset that
// blockYAMLToJSON reads; the caller then reads it with sigs.k8s.io/yaml.
var errNotPlainYAML = errors.New("outside the plain block-YAML subset")

// blockYAMLToJSON converts the YAML that tools write for Kubernetes
// objects (yaml.Marshal, kubectl -o yaml: block mappings and sequences,
// plain or quoted one-line scalars) to JSON about ten times faster than
// sigs.k8s.io/yaml, which parses into interface{} maps and marshals them
// again; at 100,000 pods that conversion was three quarters of drift -f.
// It accepts only what it can read exactly as sigs.k8s.io/yaml (YAML 1.1
// through go-yaml v2) would, and returns errNotPlainYAML for anything else
// — flow collections, block scalars, anchors, tags, multi-line scalars,
// numbers other than plain decimal integers, YAML 1.1 booleans like `yes`,
// duplicate keys, tabs — so the caller falls back to sigs.k8s.io/yaml for
// that document. Keys keep the document's order (sigs.k8s.io/yaml sorts
// them): the JSON decodes to the same object, and a caller that needs the
// exact error of a bad document reads it again the slow way.
// TestBlockYAMLMatchesSigsYAML and FuzzBlockYAML hold the equivalence.
func blockYAMLToJSON(raw []byte) ([]byte, error) {
	return (&yparser{}).convert(raw)
}

// blockYAMLWithLines is blockYAMLToJSON that also returns the document's
// line tree: where each key and item is written, so a finding can be
// located (Locate) without parsing the document again with yaml.v3.
func blockYAMLWithLines(raw []byte) ([]byte, *lnode, error) {
	p := &yparser{tree: true}
	js, err := p.convert(raw)
	if err != nil {
		return nil, nil, err
	}
	return js, p.root, nil
}

func (p *yparser) convert(raw []byte) ([]byte, error) {
	size := len(raw)
	if len(raw) > 0 && raw[0] == 0xEF || !utf8.Valid(raw) {
		return nil, errNotPlainYAML
	}
	for i := 0; i < len(raw); {
		c := raw[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && c != '\n') || c == 0x7f {
				return nil, errNotPlainYAML // tabs, CR, control characters
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(raw[i:])
		if !yamlPrintable(r) {
			return nil, errNotPlainYAML
		}
		i += n
	}
	no := 0
	for len(raw) > 0 {
		l := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			l, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		no++
		ind := 0
		for ind < len(l) && l[ind] == ' ' {
			ind++
		}
		text := l[ind:]
		if len(text) == 0 || text[0] == '#' {
			continue
		}
		if ind == 0 && (bytes.HasPrefix(text, []byte("---")) || bytes.HasPrefix(text, []byte("...")) || text[0] == '%') {
			return nil, errNotPlainYAML
		}
		p.lines = append(p.lines, yline{ind, text, no})
	}
	if len(p.lines) == 0 || p.lines[0].ind != 0 || isSeqItem(p.lines[0].text) {
		return nil, errNotPlainYAML
	}
	out := make([]byte, 0, size+size/4+64)
	out, n, err := p.mapping(out, 0)
	if err != nil {
		return nil, err
	}
	p.root = n
	if p.i != len(p.lines) {
		return nil, errNotPlainYAML
	}
	return out, nil
}

// yamlPrintable is go-yaml's set of characters a document may hold.
func yamlPrintable(r rune) bool {
	return r == 0x85 || (r >= 0xA0 && r <= 0xD7FF) || (r >= 0xE000 && r <= 0xFFFD && r != 0xFEFF) || (r >= 0x10000 && r <= 0x10FFFF)
}

type yline struct {
	ind  int
	text []byte
	no   int // line number in the document, from 1
}

type yparser struct {
	lines []yline
	i     int
	tree  bool   // build the line tree too
	root  *lnode // the document's mapping, when tree
}

// lnode is a node of a document's line tree: what Locate needs of a
// yaml.v3 node (its line, a mapping's keys and their lines, a sequence's
// items, a scalar's value).
type lnode struct {
	line     int
	kind     byte // 'm' mapping, 's' sequence, 'v' scalar
	keys     []string
	keyLines []int
	vals     []*lnode
	items    []*lnode
	value    string
}

func isSeqItem(t []byte) bool { return t[0] == '-' && (len(t) == 1 || t[1] == ' ') }

// node reads the block that starts at the current line, indented ind.
func (p *yparser) node(out []byte, ind int) ([]byte, *lnode, error) {
	if isSeqItem(p.lines[p.i].text) {
		return p.sequence(out, ind)
	}
	return p.mapping(out, ind)
}

// scalarNode is the tree node of a one-line scalar written at line no.
func (p *yparser) scalarNode(v []byte, no int) *lnode {
	if !p.tree {
		return nil
	}
	val := v
	if len(v) > 0 && (v[0] == '"' || v[0] == '\'') {
		if q, _, ok := quoted(v); ok {
			val = q
		}
	} else {
		if i := bytes.Index(val, []byte(" #")); i >= 0 {
			val = val[:i]
		}
		val = bytes.TrimRight(val, " ")
	}
	return &lnode{line: no, kind: 'v', value: string(val)}
}

func (p *yparser) mapping(out []byte, ind int) ([]byte, *lnode, error) {
	out = append(out, '{')
	var keys [][]byte
	first := true
	var mn *lnode
	if p.tree {
		mn = &lnode{line: p.lines[p.i].no, kind: 'm'}
	}
	for p.i < len(p.lines) {
		l := p.lines[p.i]
		if l.ind < ind {
			break
		}
		if l.ind > ind || isSeqItem(l.text) {
			return nil, nil, errNotPlainYAML // a continuation line, or a sequence where a key belongs
		}
		key, rest, err := splitKey(l.text)
		if err != nil {
			return nil, nil, err
		}
		for _, k := range keys {
			if bytes.Equal(k, key) {
				return nil, nil, errNotPlainYAML // duplicate keys: let go-yaml decide
			}
		}
		keys = append(keys, key)
		if !first {
			out = append(out, ',')
		}
		first = false
		out = appendJSONKey(out, key)
		out = append(out, ':')
		p.i++
		var val *lnode
		if mn != nil {
			mn.keys = append(mn.keys, string(key))
			mn.keyLines = append(mn.keyLines, l.no)
			mn.vals = append(mn.vals, nil)
		}
		setVal := func() {
			if mn != nil {
				mn.vals[len(mn.vals)-1] = val
			}
		}
		if len(rest) > 0 {
			if out, err = appendScalar(out, rest); err != nil {
				return nil, nil, err
			}
			val = p.scalarNode(rest, l.no)
			setVal()
			continue
		}
		// key: with the value on the lines below: a deeper block, a
		// sequence at the same indentation (kubectl's style), or null.
		if p.i < len(p.lines) {
			next := p.lines[p.i]
			switch {
			case next.ind > ind:
				if out, val, err = p.node(out, next.ind); err != nil {
					return nil, nil, err
				}
				setVal()
				continue
			case next.ind == ind && isSeqItem(next.text):
				if out, val, err = p.sequence(out, ind); err != nil {
					return nil, nil, err
				}
				setVal()
				continue
			}
		}
		out = append(out, "null"...)
		val = p.scalarNode(nil, l.no)
		setVal()
	}
	return append(out, '}'), mn, nil
}

func (p *yparser) sequence(out []byte, ind int) ([]byte, *lnode, error) {
	out = append(out, '[')
	first := true
	var sn *lnode
	if p.tree {
		sn = &lnode{line: p.lines[p.i].no, kind: 's'}
	}
	for p.i < len(p.lines) {
		l := p.lines[p.i]
		if l.ind != ind || !isSeqItem(l.text) {
			if l.ind > ind {
				return nil, nil, errNotPlainYAML
			}
			break
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		content := l.text[1:]
		skip := 0
		for skip < len(content) && content[skip] == ' ' {
			skip++
		}
		content = content[skip:]
		var err error
		var item *lnode
		switch {
		case len(content) == 0:
			p.i++
			if p.i < len(p.lines) && p.lines[p.i].ind > ind {
				if out, item, err = p.node(out, p.lines[p.i].ind); err != nil {
					return nil, nil, err
				}
			} else {
				out = append(out, "null"...)
				item = p.scalarNode(nil, l.no)
			}
		case isSeqItem(content) || isKeyLine(content):
			// "- key: value" or "- - x": the item is a block whose first
			// line starts after the dash.
			p.lines[p.i] = yline{ind + 1 + skip, content, l.no}
			if out, item, err = p.node(out, ind+1+skip); err != nil {
				return nil, nil, err
			}
		default:
			p.i++
			if p.i < len(p.lines) && p.lines[p.i].ind > ind {
				return nil, nil, errNotPlainYAML // a multi-line scalar
			}
			if out, err = appendScalar(out, content); err != nil {
				return nil, nil, err
			}
			item = p.scalarNode(content, l.no)
		}
		if sn != nil {
			sn.items = append(sn.items, item)
		}
	}
	return append(out, ']'), sn, nil
}

// isKeyLine reports whether t starts a mapping entry.
func isKeyLine(t []byte) bool {
	_, _, err := splitKey(t)
	return err == nil
}

// splitKey splits "key: value" (or "key:") into the key, unquoted, and
// the value text.
func splitKey(t []byte) (key, rest []byte, err error) {
	var end int
	switch t[0] {
	case '"', '\'':
		k, n, ok := quoted(t)
		if !ok {
			return nil, nil, errNotPlainYAML
		}
		key, end = k, n
		if end >= len(t) || t[end] != ':' {
			return nil, nil, errNotPlainYAML
		}
	default:
		if !plainStart(t[0]) {
			return nil, nil, errNotPlainYAML
		}
		end = -1
		for i := 0; i < len(t); i++ {
			if t[i] == ':' && (i+1 == len(t) || t[i+1] == ' ') {
				end = i
				break
			}
			if t[i] == '#' && i > 0 && t[i-1] == ' ' {
				return nil, nil, errNotPlainYAML
			}
		}
		if end <= 0 {
			return nil, nil, errNotPlainYAML
		}
		key = bytes.TrimRight(t[:end], " ")
		// A key go-yaml would resolve as a boolean or null is stringified
		// by sigs.k8s.io/yaml ("on" becomes "true"): left to them.
		if ks := string(key); ks == "<<" || ks == "true" || ks == "false" || ks == "null" || yaml11Words[ks] || !plainText(key) {
			return nil, nil, errNotPlainYAML
		}
	}
	if end > 1000 {
		return nil, nil, errNotPlainYAML // YAML's simple keys end at 1024 characters
	}
	rest = t[end+1:]
	if len(rest) > 0 && rest[0] != ' ' {
		return nil, nil, errNotPlainYAML
	}
	rest = bytes.TrimLeft(rest, " ")
	if len(rest) > 0 && rest[0] == '#' {
		rest = nil
	}
	return key, rest, nil
}

// quoted reads a one-line quoted scalar at the start of t: its value and
// how many bytes it took. Double quotes with escapes are left to go-yaml.
func quoted(t []byte) ([]byte, int, bool) {
	q := t[0]
	if q == '"' {
		end := bytes.IndexByte(t[1:], '"')
		if end < 0 || bytes.IndexByte(t[1:1+end], '\\') >= 0 {
			return nil, 0, false
		}
		return t[1 : 1+end], end + 2, true
	}
	for i := 1; i < len(t); i++ {
		if t[i] != '\'' {
			continue
		}
		if i+1 < len(t) && t[i+1] == '\'' {
			i++ // '' is a quote inside
			continue
		}
		return unquoteSingle(t[1:i]), i + 1, true
	}
	return nil, 0, false
}

func unquoteSingle(s []byte) []byte {
	if bytes.IndexByte(s, '\'') < 0 {
		return s
	}
	return bytes.ReplaceAll(s, []byte("''"), []byte("'"))
}

// plainStart: a plain scalar may not start with an indicator (flow
// collections, anchors, tags, block scalars, quotes, directives, comments)
// or with anything that makes go-yaml resolve it as other than a string
// (digits, signs, dots: numbers, timestamps, .inf).
func plainStart(c byte) bool {
	switch c {
	case '-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`', '.', '+', '~', '<', '=':
		return false
	}
	return !(c >= '0' && c <= '9')
}

// plainText: no comment, no mapping indicator and no flow indicator
// inside a plain scalar (go-yaml reads those differently inside flow or
// refuses them).
func plainText(s []byte) bool {
	for i, c := range s {
		switch c {
		case ':':
			if i+1 == len(s) || s[i+1] == ' ' {
				return false
			}
		case '#':
			if i > 0 && s[i-1] == ' ' {
				return false
			}
		}
	}
	return len(s) == 0 || s[len(s)-1] != ' '
}

// yaml11Words are the plain scalars go-yaml v2 resolves to booleans or
// null besides true, false and null: left to it.
var yaml11Words = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "n": true, "N": true, "no": true, "No": true, "NO": true,
	"on": true, "On": true, "ON": true, "off": true, "Off": true, "OFF": true,
	"True": true, "TRUE": true, "False": true, "FALSE": true, "Null": true, "NULL": true,
}

// appendScalar writes a one-line value as JSON.
func appendScalar(out, v []byte) ([]byte, error) {
	switch v[0] {
	case '"', '\'':
		s, n, ok := quoted(v)
		if !ok {
			return nil, errNotPlainYAML
		}
		tail := bytes.TrimLeft(v[n:], " ")
		if len(tail) > 0 && (tail[0] != '#' || n == len(v)) {
			return nil, errNotPlainYAML
		}
		return appendJSONKey(out, s), nil
	case '[', '{':
		if t := bytes.TrimRight(v, " "); len(t) == 2 && (string(t) == "[]" || string(t) == "{}") {
			return append(out, t...), nil
		}
		return nil, errNotPlainYAML
	}
	// A plain scalar ends at a comment.
	if i := bytes.Index(v, []byte(" #")); i >= 0 {
		v = v[:i]
	}
	v = bytes.TrimRight(v, " ")
	switch string(v) {
	case "true", "false", "null":
		return append(out, v...), nil
	}
	if isDecimal(v) {
		return append(out, v...), nil
	}
	if !(plainStart(v[0]) || digitString(v) || dashString(v)) || !plainText(v) || yaml11Words[string(v)] {
		return nil, errNotPlainYAML
	}
	return appendJSONKey(out, v), nil
}

// dashString reports whether a plain scalar that starts with a dash is a
// string to go-yaml ("--flag=1"): a dash and then neither a space nor
// anything a number starts with.
func dashString(v []byte) bool {
	if len(v) < 2 || v[0] != '-' {
		return false
	}
	if bytes.IndexByte(v, '_') >= 0 {
		// go-yaml drops every underscore before it tries a number
		// ("-_0" is 0): a string only with a byte no number can hold.
		return !numberish(v[1:])
	}
	switch c := v[1]; {
	case c == ' ', c == '.', c == '+', c == '-' && len(v) > 2 && v[2] == '-' && len(v) == 3:
		return false
	case c >= '0' && c <= '9':
		return digitString(v[1:])
	}
	return true
}

// digitString reports whether a plain scalar that starts with a digit is
// still a string to go-yaml v2: it holds a byte no integer (decimal, 0x,
// 0o, 0b, underscores), float or timestamp can hold ("8Gi", "500m",
// "0.0.0.0/0"), or it is digits with several dots (an IPv4 address).
func digitString(v []byte) bool {
	if v[0] < '0' || v[0] > '9' {
		return false
	}
	dots := 0
	for _, c := range v {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
		case c == 'x' || c == 'X' || c == 'o' || c == 'O' || c == '_' || c == '+' || c == '-' || c == ':' || c == ' ':
		case c == 't' || c == 'T' || c == 'z' || c == 'Z':
		case c == '.':
			dots++
		default:
			return true
		}
	}
	if dots < 2 {
		return false
	}
	for _, c := range v {
		if (c < '0' || c > '9') && c != '.' {
			return false
		}
	}
	return true
}

// numberish reports whether every byte of v could be part of something
// go-yaml v2 resolves as a number or timestamp (digits, hex digits, the
// 0x/0o/0b prefixes, signs, dots, exponents, underscores, and a
// timestamp's separators).
func numberish(v []byte) bool {
	for _, c := range v {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
		case bytes.IndexByte([]byte("xXoO_+-.:tTzZ "), c) >= 0:
		default:
			return false
		}
	}
	return true
}

// isDecimal: 0, or an integer without a leading zero (go-yaml reads 0755
// as octal), short enough to be an int64.
func isDecimal(v []byte) bool {
	d := v
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 18 || (d[0] == '0' && (len(d) > 1 || len(d) < len(v))) {
		return false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// appendJSONKey writes s as a JSON string (valid UTF-8 already checked).
func appendJSONKey(out, s []byte) []byte {
	out = append(out, '"')
	start := 0
	for i, c := range s {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		out = append(out, s[start:i]...)
		switch c {
		case '"', '\\':
			out = append(out, '\\', c)
		default:
			out = append(out, '\\', 'u', '0', '0', hexDigit(c>>4), hexDigit(c&0xF))
		}
		start = i + 1
	}
	out = append(out, s[start:]...)
	return append(out, '"')
}

func hexDigit(b byte) byte { return "0123456789abcdef"[b] }
