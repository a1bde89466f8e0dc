package manifest

import (
	"errors"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Object is the node of the object at items (the index path of a List's
// item, nil for the document itself) in a YAML or JSON document, parsed
// by yaml.v3: what Walk finds lines in when the block-YAML reader did not
// read the document. Nil when the document does not parse or holds no
// such item.
func Object(data []byte, items []int) *yaml.Node {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return nil
	}
	n := doc.Content[0]
	for _, i := range items {
		items := mapValue(n, "items")
		if items == nil || items.Kind != yaml.SequenceNode || i >= len(items.Content) {
			return nil
		}
		n = items.Content[i]
	}
	return n
}

// Walk follows a finding's field path ("spec.containers[agent].ports[0]",
// "spec.securityContext.sysctls[kernel.msgmax]") as far as the document
// spells it out and returns the node it reached: for a mapping entry, its
// key (the line a reader looks for).
func Walk(n *yaml.Node, path string) *yaml.Node {
	at := n
	for _, seg := range pathSegments(path) {
		var next, show *yaml.Node
		switch {
		case seg.key != "" && n.Kind == yaml.MappingNode:
			show, next = mapEntry(n, seg.key)
		case seg.key != "":
			return at
		case n.Kind == yaml.SequenceNode:
			next = sequenceItem(n, seg.index)
			show = next
		case n.Kind == yaml.MappingNode:
			// A bracket on a map ("annotations[key]").
			show, next = mapEntry(n, seg.index)
		}
		if next == nil {
			return at
		}
		n, at = next, show
	}
	return at
}

// Line is Walk over a block-YAML tree: the line (in the document, from
// 1) of the deepest part of path the document spells out, the line Walk's
// node would be on (TestWalkLinesMatchesWalk).
func (n *Node) Line(path string) int {
	at := int(n.line)
	for path != "" {
		seg, rest, step, ok := nextSegment(path)
		if !ok {
			break
		}
		path = rest
		if !step {
			continue
		}
		var next *Node
		show := 0
		switch {
		case seg.key != "" && n.kind == 'm':
			show, next = n.entry(seg.key)
		case seg.key != "":
			return at
		case n.kind == 's':
			if next = n.item(seg.index); next != nil {
				show = int(next.line)
			}
		case n.kind == 'm':
			show, next = n.entry(seg.index)
		}
		if next == nil {
			return at
		}
		n, at = next, show
	}
	return at
}

// Has reports whether a mapping node has the key.
func (n *Node) Has(key string) bool {
	line, _ := n.entry(key)
	return line != 0
}

// Get is the value of a mapping node's key: nil when n is no mapping or
// has no such key (a key with nothing after it is a null scalar).
func (n *Node) Get(key string) *Node {
	if n == nil || n.kind != 'm' {
		return nil
	}
	_, v := n.entry(key)
	return v
}

// Items are a sequence node's items, none for `[]`; ok is false when n is
// anything else (a mapping, a null, another scalar).
func (n *Node) Items() (items []*Node, ok bool) {
	switch {
	case n == nil:
		return nil, false
	case n.kind == 's':
		items = make([]*Node, len(n.kids))
		for i, k := range n.kids {
			items[i] = k.val
		}
		return items, true
	case n.kind == 'v' && n.tok == tokEmptySeq:
		return nil, true
	}
	return nil, false
}

// Text is a string scalar's value; ok is false for any other node (a
// number, a boolean, a null, a collection) and for nil.
func (n *Node) Text() (string, bool) {
	if n == nil || n.kind != 'v' || n.tok != tokString {
		return "", false
	}
	return n.value, true
}

// IsMapping says whether n is a mapping node with at least one key ({} is
// a scalar of the tree).
func (n *Node) IsMapping() bool { return n != nil && n.kind == 'm' }

func (n *Node) entry(key string) (int, *Node) {
	for _, k := range n.kids {
		if k.key == key {
			return int(k.line), k.val
		}
	}
	return 0, nil
}

func (n *Node) item(index string) *Node {
	if i, err := atoi(index); err == nil {
		if i >= 0 && i < len(n.kids) {
			return n.kids[i].val
		}
		return nil
	}
	for _, it := range n.kids {
		if it.val != nil && it.val.kind == 'm' {
			if _, v := it.val.entry("name"); v != nil && v.value == index {
				return it.val
			}
		}
	}
	return nil
}

// segment is one step of a field path: a key, or a bracket (an index or a
// list item's name).
type segment struct{ key, index string }

func pathSegments(path string) []segment {
	var out []segment
	for path != "" {
		seg, rest, step, ok := nextSegment(path)
		if !ok {
			break
		}
		if step {
			out = append(out, seg)
		}
		path = rest
	}
	return out
}

// nextSegment splits the first step off path: step is false for a dot
// (no step), ok false for an unclosed bracket (the path ends there).
func nextSegment(path string) (seg segment, rest string, step, ok bool) {
	switch path[0] {
	case '.':
		return segment{}, path[1:], false, true
	case '[':
		end := strings.IndexByte(path, ']')
		if end < 0 {
			return segment{}, "", false, false
		}
		return segment{index: path[1:end]}, path[end+1:], true, true
	}
	end := strings.IndexAny(path, ".[")
	if end < 0 {
		end = len(path)
	}
	return segment{key: path[:end]}, path[end:], true, true
}

func mapEntry(n *yaml.Node, key string) (k, v *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i], n.Content[i+1]
		}
	}
	return nil, nil
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	_, v := mapEntry(n, key)
	return v
}

// sequenceItem is the item at an index, or the item whose name is the
// bracket's text (containers, volumes, env and sysctls are named).
func sequenceItem(n *yaml.Node, index string) *yaml.Node {
	if i, err := atoi(index); err == nil {
		if i >= 0 && i < len(n.Content) {
			return n.Content[i]
		}
		return nil
	}
	for _, it := range n.Content {
		if v := mapValue(it, "name"); v != nil && v.Value == index {
			return it
		}
	}
	return nil
}

// errNotIndex says a bracket holds a name, not an index.
var errNotIndex = errors.New("not an index")

// atoi is strconv.Atoi for a bracket's text, without the error it builds
// for every name ("[agent]": Locate asks for each finding's path).
func atoi(s string) (int, error) {
	if s == "" {
		return 0, errNotIndex
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && !(i == 0 && (c == '-' || c == '+') && len(s) > 1) {
			return 0, errNotIndex
		}
	}
	return strconv.Atoi(s)
}
