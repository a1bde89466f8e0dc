package manifest

import (
	"bytes"
	"strings"
)

// People write manifests with two shapes yaml.Marshal never writes: flow
// collections on one line (`labels: {app: x}`, `drop: [ALL]`,
// `command: ["sh", "-c"]`, `- {name: tmp, mountPath: /tmp}`) and block
// scalars (`args: - |` scripts, `>-` annotations). Read here, in the
// narrow forms that go-yaml v2 reads one way only; anything else in them
// (a flow collection over several lines, a ':' or '#' inside a plain flow
// scalar, a trailing comma, an entry without a value, a block scalar with
// an indentation indicator, keep chomping, leading blank lines, a line
// more indented or with trailing spaces in a folded scalar) still goes to
// go-yaml. FuzzBlockYAML holds the equivalence; blockCases seeds it.

// maxFlowDepth bounds nesting: deeper documents go to go-yaml.
const maxFlowDepth = 16

// flowNode reads a one-line flow collection that v starts with (the rest
// of a line, after a key or a dash): only a comment may follow it.
func (p *yparser) flowNode(v []byte, no int) (*Node, error) {
	f := flowReader{p: p, v: v, no: no}
	n, err := f.collection(0)
	if err != nil {
		return nil, err
	}
	tail := v[f.pos:]
	if t := bytes.TrimLeft(tail, " "); len(t) > 0 && (t[0] != '#' || len(t) == len(tail)) {
		return nil, ErrNotPlain // text after the collection, or a comment without a space before it
	}
	return n, nil
}

type flowReader struct {
	p   *yparser
	v   []byte
	pos int
	no  int
}

func (f *flowReader) spaces() {
	for f.pos < len(f.v) && f.v[f.pos] == ' ' {
		f.pos++
	}
}

func (f *flowReader) peek() byte {
	if f.pos < len(f.v) {
		return f.v[f.pos]
	}
	return 0
}

// collection reads [ … ] or { … } at pos; an empty one is the same token
// as in block YAML.
func (f *flowReader) collection(depth int) (*Node, error) {
	if depth > maxFlowDepth {
		return nil, ErrNotPlain
	}
	open := f.v[f.pos]
	closer := byte(']')
	if open == '{' {
		closer = '}'
	}
	f.pos++
	f.spaces()
	if f.peek() == closer {
		f.pos++
		n := f.p.newNode(f.no, 'v')
		n.tok, n.value = tokEmptySeq, "[]"
		if open == '{' {
			n.tok, n.value = tokEmptyMap, "{}"
		}
		return n, nil
	}
	kind := byte('s')
	if open == '{' {
		kind = 'm'
	}
	n := f.p.newNode(f.no, kind)
	base := len(f.p.stack)
	for {
		f.spaces()
		var key string
		if kind == 'm' {
			k, err := f.key()
			if err != nil {
				return nil, err
			}
			for _, e := range f.p.stack[base:] {
				if e.key == k {
					return nil, ErrNotPlain // duplicate keys: let go-yaml decide
				}
			}
			key = k
			f.spaces()
		}
		val, err := f.value(depth, closer)
		if err != nil {
			return nil, err
		}
		f.p.stack = append(f.p.stack, lkid{key: key, line: int32(f.no), val: val})
		f.spaces()
		switch f.peek() {
		case ',':
			f.pos++
			f.spaces()
			if c := f.peek(); c == ']' || c == '}' || c == ',' {
				return nil, ErrNotPlain // a trailing comma or an empty entry
			}
			continue
		case closer:
			f.pos++
			f.p.finish(n, base)
			return n, nil
		}
		return nil, ErrNotPlain // the line ends inside the collection, or a stray character
	}
}

// key reads a flow mapping's key and the ": " after it.
func (f *flowReader) key() (string, error) {
	var k []byte
	if c := f.peek(); c == '"' || c == '\'' {
		s, n, ok := quoted(f.v[f.pos:])
		if !ok {
			return "", ErrNotPlain
		}
		k = s
		f.pos += n
	} else {
		end := f.pos
		for end < len(f.v) && !flowStop(f.v[end]) {
			end++
		}
		k = bytes.TrimRight(f.v[f.pos:end], " ")
		if len(k) == 0 || !plainStart(k[0]) || yaml11Word(k) || !plainText(k) {
			return "", ErrNotPlain
		}
		switch string(k) {
		case "<<", "true", "false", "null":
			return "", ErrNotPlain
		}
		f.pos = end
	}
	if f.pos+1 >= len(f.v) || f.v[f.pos] != ':' || f.v[f.pos+1] != ' ' {
		return "", ErrNotPlain // "key:value", "key :", a key with no value
	}
	f.pos += 2
	return f.p.str(k), nil
}

// value reads an entry's value: a nested collection, a quoted scalar or a
// plain one.
func (f *flowReader) value(depth int, closer byte) (*Node, error) {
	switch c := f.peek(); c {
	case '[', '{':
		return f.collection(depth + 1)
	case '"', '\'':
		s, n, ok := quoted(f.v[f.pos:])
		if !ok {
			return nil, ErrNotPlain
		}
		f.pos += n
		node := f.p.newNode(f.no, 'v')
		node.tok, node.value = tokString, f.p.str(s)
		return node, nil
	case 0, ',', ']', '}':
		return nil, ErrNotPlain // an empty value
	}
	end := f.pos
	for end < len(f.v) && !flowStop(f.v[end]) {
		end++
	}
	if end < len(f.v) && f.v[end] != ',' && f.v[end] != closer {
		return nil, ErrNotPlain // ':', '?', '#' or an opening bracket inside a plain scalar
	}
	text := bytes.TrimRight(f.v[f.pos:end], " ")
	tok, s, err := scalarToken(text)
	if err != nil || tok == tokEmptySeq || tok == tokEmptyMap {
		return nil, ErrNotPlain
	}
	f.pos = end
	node := f.p.newNode(f.no, 'v')
	node.tok, node.value = tok, f.p.str(s)
	return node, nil
}

// flowStop: where a plain scalar in a flow collection ends (go-yaml ends
// one at '?' too), or what this reader does not take inside one.
func flowStop(c byte) bool {
	switch c {
	case ',', '[', ']', '{', '}', ':', '?', '#':
		return true
	}
	return false
}

// blockScalar reads a literal (|) or folded (>) scalar whose header h
// ends the line; its content is the lines below indented more than
// parent; no is the header's line. p.i is past the header's line and
// ends past the content.
func (p *yparser) blockScalar(h []byte, parent, no int) (*Node, error) {
	literal := h[0] == '|'
	strip := len(h) > 1 && h[1] == '-'
	rest := h[1:]
	if strip {
		rest = h[2:]
	}
	if t := bytes.TrimLeft(rest, " "); len(t) > 0 && (t[0] != '#' || len(t) == len(rest)) {
		return nil, ErrNotPlain // keep chomping, an indentation indicator, text after the header
	}
	off := cap(p.raw) - cap(h) // h is a slice of raw
	nl := bytes.IndexByte(p.raw[off:], '\n')
	if nl < 0 {
		return nil, ErrNotPlain
	}
	lines, last, err := p.blockLines(off+nl+1, no, parent, literal)
	if err != nil {
		return nil, err
	}
	for p.i < len(p.lines) && p.lines[p.i].no <= last {
		p.i++
	}
	n := p.newNode(no, 'v')
	n.tok, n.value = tokString, joinBlock(lines, literal, strip)
	return n, nil
}

// blockLines reads a block scalar's content from raw[pos:], the lines
// after its header (line no): each line without its indentation (nil for
// a blank one), trailing blank lines dropped, and the last line's number.
func (p *yparser) blockLines(pos, no, parent int, literal bool) ([][]byte, int, error) {
	ind := -1
	var lines [][]byte
	last := no
	for line := no + 1; pos < len(p.raw); line++ {
		end := bytes.IndexByte(p.raw[pos:], '\n')
		if end < 0 {
			return nil, 0, ErrNotPlain // the last line has no line break
		}
		l := p.raw[pos : pos+end]
		s := 0
		for s < len(l) && l[s] == ' ' {
			s++
		}
		if s == len(l) { // a blank line
			if ind < 0 || s > ind {
				return nil, 0, ErrNotPlain // leading blank lines, or one holding spaces past the indent
			}
			lines = append(lines, nil)
			pos += end + 1
			continue
		}
		if ind < 0 {
			if s <= parent {
				return nil, 0, ErrNotPlain // an empty scalar
			}
			ind = s
		}
		if s < ind {
			break
		}
		text := l[ind:]
		if text[len(text)-1] == ' ' || (!literal && s > ind) {
			return nil, 0, ErrNotPlain // trailing spaces; a more-indented folded line
		}
		lines = append(lines, text)
		last = line
		pos += end + 1
	}
	for len(lines) > 0 && lines[len(lines)-1] == nil {
		lines = lines[:len(lines)-1] // trailing blank lines: clip and strip drop them
	}
	if len(lines) == 0 {
		return nil, 0, ErrNotPlain
	}
	return lines, last, nil
}

// joinBlock is a block scalar's value from its lines: a literal keeps
// each line break; a folded one joins adjacent lines with a space and
// keeps one break per blank line; clip ends it with a line break, strip
// does not.
func joinBlock(lines [][]byte, literal, strip bool) string {
	var b strings.Builder
	for i, l := range lines {
		switch {
		case i == 0:
		case literal:
			b.WriteByte('\n')
		case l == nil:
			b.WriteByte('\n') // each blank line between two lines is a line break
		case lines[i-1] != nil:
			b.WriteByte(' ') // two adjacent lines fold into one
		}
		b.Write(l)
	}
	if !strip {
		b.WriteByte('\n')
	}
	return b.String()
}
