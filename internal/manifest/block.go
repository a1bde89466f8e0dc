package manifest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sort"
	"unicode/utf8"

	"github.com/sandprobe/sandprobe/report"
)

// ErrNotPlain says a document is outside the block-YAML subset that
// BlockToJSON reads; the caller then reads it with sigs.k8s.io/yaml.
var ErrNotPlain = errors.New("outside the plain block-YAML subset")

// BlockToJSON converts the YAML that tools write for Kubernetes
// objects (yaml.Marshal, kubectl -o yaml: block mappings and sequences,
// plain or quoted one-line scalars) to JSON about ten times faster than
// sigs.k8s.io/yaml, which parses into interface{} maps and marshals them
// again; at 100,000 pods that conversion was three quarters of drift -f.
// People's shapes, one-line flow collections and block scalars, are read
// too (flow.go).
// It accepts only what it can read exactly as sigs.k8s.io/yaml (YAML 1.1
// through go-yaml v2) would, and returns ErrNotPlain for anything else
// — flow collections over several lines, the block scalars flow.go
// leaves out, anchors, tags, multi-line scalars,
// numbers other than plain decimal integers, YAML 1.1 booleans like `yes`,
// duplicate keys, tabs — so the caller falls back to sigs.k8s.io/yaml for
// that document. The JSON is sigs.k8s.io/yaml's byte for byte (keys
// sorted), so a bad document gives the same error either way.
// TestBlockYAMLMatchesSigsYAML and FuzzBlockYAML hold the equivalence.
func BlockToJSON(raw []byte) ([]byte, error) {
	root, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	return root.JSON(len(raw)), nil
}

// JSON is the tree as BlockToJSON writes it; size (the document's length)
// sizes the buffer.
func (n *Node) JSON(size int) []byte {
	return appendNodeJSON(make([]byte, 0, size+size/4+64), n)
}

// Parse reads a document of the block-YAML subset into its tree:
// every scalar with the JSON value sigs.k8s.io/yaml gives it, and every
// key and item with its line. The JSON (appendNodeJSON) and the typed
// decoding (decodeNode) are both read from this one tree.
func Parse(raw []byte) (*Node, error) {
	if !readableText(raw) {
		return nil, ErrNotPlain
	}
	raw = raw[:len(raw):len(raw)]
	p, ok := splitLines(raw)
	if !ok || len(p.lines) == 0 || p.lines[0].ind != 0 || isSeqItem(p.lines[0].text) {
		return nil, ErrNotPlain
	}
	root, err := p.mapping(0)
	if err != nil {
		return nil, err
	}
	if p.i != len(p.lines) {
		return nil, ErrNotPlain
	}
	return root, nil
}

// readableText says whether raw holds only what this reader reads the way
// go-yaml does: no byte-order mark, no tab, CR or control character, valid
// UTF-8 that go-yaml accepts, and no line break but '\n'.
func readableText(raw []byte) bool {
	if len(raw) > 0 && raw[0] == 0xEF {
		return false
	}
	for i := 0; i < len(raw); {
		if i+8 <= len(raw) && plainASCII8(binary.LittleEndian.Uint64(raw[i:])) {
			i += 8 // eight plain bytes at once: most of a document
			continue
		}
		c := raw[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && c != '\n') || c == 0x7f {
				return false // tabs, CR, control characters
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(raw[i:])
		if (r == utf8.RuneError && n == 1) || !yamlPrintable(r) || unicodeBreak(r) {
			// Invalid UTF-8, what go-yaml refuses, or a line break this
			// reader does not split at (NEL, LS, PS): left to go-yaml.
			return false
		}
		i += n
	}
	return true
}

// splitLines is the parser over raw's lines that hold something (not
// blank, not a comment), each with its indent; false for a document
// marker or a directive, which are left to go-yaml.
func splitLines(raw []byte) (*yparser, bool) {
	lines := bytes.Count(raw, []byte("\n")) + 1
	p := &yparser{raw: raw, src: string(raw), lines: make([]yline, 0, lines), chunk: lines + lines/4 + 4}
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
			return nil, false
		}
		p.lines = append(p.lines, yline{ind, text, no})
	}
	return p, true
}

// plainASCII8 reports whether the eight bytes of w are all ASCII that the
// loop above takes one by one: no byte of 0x80 or more, none below 0x20
// but '\n', no 0x7f. For ASCII bytes the sums below carry out of no byte:
// b+0x60 has its top bit clear exactly when b < 0x20, and (b^k)+0x7f
// exactly when b == k.
func plainASCII8(w uint64) bool {
	const hi, ones = 0x8080808080808080, 0x0101010101010101
	if w&hi != 0 {
		return false
	}
	low := ^(w + 0x60*ones) & hi               // bytes below 0x20
	nl := ^((w ^ '\n'*ones) + 0x7f*ones) & hi  // bytes equal to '\n'
	del := ^((w ^ 0x7f*ones) + 0x7f*ones) & hi // bytes equal to 0x7f
	return low&^nl|del == 0
}

// unicodeBreak reports whether r is one of the line breaks YAML 1.1 (and
// so go-yaml, and the API server) knows beside '\n' and '\r': NEL, LS and
// PS. A comment ends at one of them, so a line hidden after one is part of
// the document.
func unicodeBreak(r rune) bool { return r == 0x85 || r == 0x2028 || r == 0x2029 }

// HasUnicodeBreak reports whether b holds NEL, LS or PS in UTF-8.
func HasUnicodeBreak(b []byte) bool {
	return bytes.Contains(b, []byte("\u0085")) || bytes.Contains(b, []byte("\u2028")) || bytes.Contains(b, []byte("\u2029"))
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
	// raw is the document and src the same bytes as one string: the
	// tree's keys and values are slices of src, not a string each.
	raw []byte
	src string
	// The tree is allocated in chunks (a pod is some hundred nodes):
	// nodes, and kids, where each node's children are copied when it is
	// complete from stack, where they are collected.
	nodes []Node
	kids  []lkid
	stack []lkid
	chunk int // nodes (and kids) per chunk: about one per line, plus items
}

// Node is a node of a document's tree: what Locate needs of a yaml.v3
// node (its line, a mapping's keys and their lines, a sequence's items, a
// scalar's value), and for a scalar the JSON value it stands for.
type Node struct {
	line int32
	kind byte // 'm' mapping, 's' sequence, 'v' scalar
	tok  ytok // a scalar's JSON kind
	// value is a scalar's text: a string's value (unquoted), a number's
	// digits, "true", "false", "null" ("" when nothing is written), "[]"
	// or "{}".
	value string
	// kids are a mapping's entries or a sequence's items, in order.
	kids []lkid
}

// lkid is an entry of a mapping (its key, the key's line and the value)
// or an item of a sequence (val only).
type lkid struct {
	key  string
	line int32
	val  *Node
}

// ytok is the JSON kind of a one-line scalar.
type ytok byte

const (
	tokNull ytok = iota
	tokString
	tokNumber
	tokTrue
	tokFalse
	tokEmptySeq // []
	tokEmptyMap // {}
)

func isSeqItem(t []byte) bool { return t[0] == '-' && (len(t) == 1 || t[1] == ' ') }

func (p *yparser) newNode(line int, kind byte) *Node {
	if len(p.nodes) == cap(p.nodes) {
		p.nodes = make([]Node, 0, p.chunk)
	}
	p.nodes = p.nodes[:len(p.nodes)+1]
	n := &p.nodes[len(p.nodes)-1]
	n.line, n.kind = int32(line), kind
	return n
}

// finish gives n the kids collected on the stack since base.
func (p *yparser) finish(n *Node, base int) {
	k := len(p.stack) - base
	if k > 0 {
		if len(p.kids)+k > cap(p.kids) {
			p.kids = make([]lkid, 0, max(p.chunk, k))
		}
		start := len(p.kids)
		p.kids = append(p.kids, p.stack[base:]...)
		n.kids = p.kids[start:len(p.kids):len(p.kids)]
	}
	clear(p.stack[base:])
	p.stack = p.stack[:base]
}

// str is b, a slice of the document, as a slice of src (b itself when it
// is not one: a single-quoted value with a doubled quote is a copy).
func (p *yparser) str(b []byte) string {
	if off := cap(p.raw) - cap(b); off >= 0 && off+len(b) <= len(p.src) && p.src[off:off+len(b)] == string(b) {
		return p.src[off : off+len(b)]
	}
	return string(b)
}

// node reads the block that starts at the current line, indented ind.
func (p *yparser) node(ind int) (*Node, error) {
	if isSeqItem(p.lines[p.i].text) {
		return p.sequence(ind)
	}
	return p.mapping(ind)
}

// scalarNode is the node of a one-line value written at line no (v empty:
// nothing written, null).
func (p *yparser) scalarNode(v []byte, no int) (*Node, error) {
	if len(v) == 0 {
		n := p.newNode(no, 'v')
		n.tok = tokNull
		return n, nil
	}
	tok, s, err := scalarToken(v)
	if err != nil {
		if v[0] == '[' || v[0] == '{' {
			return p.flowNode(v, no) // a flow collection on one line (flow.go)
		}
		return nil, err
	}
	n := p.newNode(no, 'v')
	n.tok, n.value = tok, p.str(s)
	return n, nil
}

func (p *yparser) mapping(ind int) (*Node, error) {
	mn := p.newNode(p.lines[p.i].no, 'm')
	base := len(p.stack)
	for p.i < len(p.lines) {
		l := p.lines[p.i]
		if l.ind < ind {
			break
		}
		if l.ind > ind || isSeqItem(l.text) {
			return nil, ErrNotPlain // a continuation line, or a sequence where a key belongs
		}
		key, rest, err := splitKey(l.text)
		if err != nil {
			return nil, err
		}
		for _, k := range p.stack[base:] {
			if k.key == string(key) {
				return nil, ErrNotPlain // duplicate keys: let go-yaml decide
			}
		}
		ks := p.str(key)
		p.i++
		var val *Node
		switch {
		case len(rest) > 0 && (rest[0] == '|' || rest[0] == '>'):
			val, err = p.blockScalar(rest, ind, l.no)
		case len(rest) > 0:
			val, err = p.scalarNode(rest, l.no)
		case p.i < len(p.lines) && p.lines[p.i].ind > ind:
			// key: with the value on the lines below: a deeper block,
			val, err = p.node(p.lines[p.i].ind)
		case p.i < len(p.lines) && p.lines[p.i].ind == ind && isSeqItem(p.lines[p.i].text):
			// a sequence at the same indentation (kubectl's style),
			val, err = p.sequence(ind)
		default:
			// or null.
			val, err = p.scalarNode(nil, l.no)
		}
		if err != nil {
			return nil, err
		}
		p.stack = append(p.stack, lkid{key: ks, line: int32(l.no), val: val})
	}
	p.finish(mn, base)
	return mn, nil
}

func (p *yparser) sequence(ind int) (*Node, error) {
	sn := p.newNode(p.lines[p.i].no, 's')
	base := len(p.stack)
	for p.i < len(p.lines) {
		l := p.lines[p.i]
		if l.ind != ind || !isSeqItem(l.text) {
			if l.ind > ind {
				return nil, ErrNotPlain
			}
			break
		}
		content := l.text[1:]
		skip := 0
		for skip < len(content) && content[skip] == ' ' {
			skip++
		}
		content = content[skip:]
		var err error
		var item *Node
		switch {
		case len(content) == 0:
			p.i++
			if p.i < len(p.lines) && p.lines[p.i].ind > ind {
				item, err = p.node(p.lines[p.i].ind)
			} else {
				item, err = p.scalarNode(nil, l.no)
			}
		case isSeqItem(content) || isKeyLine(content):
			// "- key: value" or "- - x": the item is a block whose first
			// line starts after the dash.
			p.lines[p.i] = yline{ind + 1 + skip, content, l.no}
			item, err = p.node(ind + 1 + skip)
		case content[0] == '|' || content[0] == '>':
			p.i++
			item, err = p.blockScalar(content, ind, l.no)
		default:
			p.i++
			if p.i < len(p.lines) && p.lines[p.i].ind > ind {
				return nil, ErrNotPlain // a multi-line scalar
			}
			item, err = p.scalarNode(content, l.no)
		}
		if err != nil {
			return nil, err
		}
		p.stack = append(p.stack, lkid{line: int32(l.no), val: item})
	}
	p.finish(sn, base)
	return sn, nil
}

// appendNodeJSON writes a tree as the JSON sigs.k8s.io/yaml writes for
// it, byte for byte: keys sorted, strings escaped as encoding/json escapes
// them (<, >, &, U+2028 and U+2029 too). Decoders that keep a value's raw
// JSON (metav1.FieldsV1, runtime.RawExtension) must get the same bytes as
// from the slow path, not merely the same value.
func appendNodeJSON(out []byte, n *Node) []byte {
	switch n.kind {
	case 'm':
		order := make([]int, len(n.kids))
		for i := range order {
			order[i] = i
		}
		sort.Slice(order, func(a, b int) bool { return n.kids[order[a]].key < n.kids[order[b]].key })
		out = append(out, '{')
		for i, k := range order {
			if i > 0 {
				out = append(out, ',')
			}
			out = report.AppendJSONString(out, n.kids[k].key)
			out = append(out, ':')
			out = appendNodeJSON(out, n.kids[k].val)
		}
		return append(out, '}')
	case 's':
		out = append(out, '[')
		for i, it := range n.kids {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendNodeJSON(out, it.val)
		}
		return append(out, ']')
	}
	switch n.tok {
	case tokString:
		return report.AppendJSONString(out, n.value)
	case tokNull:
		return append(out, "null"...)
	}
	return append(out, n.value...) // a number, true, false, [] or {}
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
			return nil, nil, ErrNotPlain
		}
		key, end = k, n
		if end >= len(t) || t[end] != ':' {
			return nil, nil, ErrNotPlain
		}
	default:
		if !plainStart(t[0]) {
			return nil, nil, ErrNotPlain
		}
		end = -1
		for i := 0; i < len(t); i++ {
			if t[i] == ':' && (i+1 == len(t) || t[i+1] == ' ') {
				end = i
				break
			}
			if t[i] == '#' && i > 0 && t[i-1] == ' ' {
				return nil, nil, ErrNotPlain
			}
		}
		if end <= 0 {
			return nil, nil, ErrNotPlain
		}
		key = bytes.TrimRight(t[:end], " ")
		// A key go-yaml would resolve as a boolean or null is stringified
		// by sigs.k8s.io/yaml ("on" becomes "true"): left to them.
		if ks := string(key); ks == "<<" || ks == "true" || ks == "false" || ks == "null" || yaml11Word(key) || !plainText(key) {
			return nil, nil, ErrNotPlain
		}
	}
	if end > 1000 {
		return nil, nil, ErrNotPlain // YAML's simple keys end at 1024 characters
	}
	rest = t[end+1:]
	if len(rest) > 0 && rest[0] != ' ' {
		return nil, nil, ErrNotPlain
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

// yaml11Word reports whether v is one of yaml11Words (all of one to five
// letters: the length says no to most values without a lookup).
func yaml11Word(v []byte) bool { return len(v) <= 5 && yaml11Words[string(v)] }

// yaml11Words are the plain scalars go-yaml v2 resolves to booleans or
// null besides true, false and null: left to it.
var yaml11Words = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "n": true, "N": true, "no": true, "No": true, "NO": true,
	"on": true, "On": true, "ON": true, "off": true, "Off": true, "OFF": true,
	"True": true, "TRUE": true, "False": true, "FALSE": true, "Null": true, "NULL": true,
}

// scalarToken reads a one-line value: its JSON kind and text (a string
// unquoted; see Node.value), or ErrNotPlain for what it leaves to
// go-yaml.
func scalarToken(v []byte) (ytok, []byte, error) {
	switch v[0] {
	case '"', '\'':
		s, n, ok := quoted(v)
		if !ok {
			return 0, nil, ErrNotPlain
		}
		tail := bytes.TrimLeft(v[n:], " ")
		if len(tail) > 0 && (tail[0] != '#' || n == len(v)) {
			return 0, nil, ErrNotPlain
		}
		return tokString, s, nil
	case '[', '{':
		switch t := bytes.TrimRight(v, " "); string(t) {
		case "[]":
			return tokEmptySeq, t, nil
		case "{}":
			return tokEmptyMap, t, nil
		}
		return 0, nil, ErrNotPlain
	}
	// A plain scalar ends at a comment.
	if i := bytes.Index(v, []byte(" #")); i >= 0 {
		v = v[:i]
	}
	v = bytes.TrimRight(v, " ")
	switch string(v) {
	case "true":
		return tokTrue, v, nil
	case "false":
		return tokFalse, v, nil
	case "null":
		return tokNull, v, nil
	}
	if isDecimal(v) {
		return tokNumber, v, nil
	}
	if !(plainStart(v[0]) || digitString(v) || dashString(v)) || !plainText(v) || yaml11Word(v) {
		return 0, nil, ErrNotPlain
	}
	return tokString, v, nil
}

// dashString reports whether a plain scalar that starts with a dash is a
// string to go-yaml ("--flag=1"): a dash and then neither a space nor
// anything a number starts with.
func dashString(v []byte) bool {
	if len(v) < 2 || v[0] != '-' || v[1] == ' ' {
		// "- x" is a sequence entry, which go-yaml refuses after a key
		// on its line, underscores or not (FuzzBlockYAML: "A: - Y_").
		return false
	}
	if bytes.IndexByte(v, '_') >= 0 {
		// go-yaml drops every underscore before it tries a number
		// ("-_0" is 0): a string only with a byte no number can hold.
		return !numberish(v[1:])
	}
	switch c := v[1]; {
	case c == '.', c == '+', c == '-' && len(v) > 2 && v[2] == '-' && len(v) == 3:
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
		case c == '.':
			dots++
		case !numberByte(c):
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

// numberByte says whether c can be part of a YAML 1.1 number, time or
// timestamp (digitString's other bytes): hex digits, a base's letter, a
// sign, '_', ':', a space, and a timestamp's T and Z.
func numberByte(c byte) bool {
	switch {
	case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
	case c == 'x' || c == 'X' || c == 'o' || c == 'O' || c == '_' || c == '+' || c == '-' || c == ':' || c == ' ':
	case c == 't' || c == 'T' || c == 'z' || c == 'Z':
	default:
		return false
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
