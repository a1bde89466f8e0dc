package drift

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/sandprobe/sandprobe/report"
)

// This file gives findings on objects read from files their place: the file
// and the line of the field to fix (or of the object, when the field is
// absent — a missing runAsNonRoot lands on the container that lacks it), so
// SARIF can annotate a pull request on that line.

// document is one YAML document of a file and the line it starts on.
type document struct {
	data []byte
	line int // 1-based line of the document's first line in its file
	// json: the document is one value of a JSON stream (jsonstream.go),
	// read as JSON, not as YAML.
	json bool
}

// splitDocuments splits a stream into documents exactly as kubectl does
// (the API machinery's YAMLOrJSONDecoder): a stream whose first
// character is `{` is a series of JSON values, possibly followed by YAML
// (jsonstream.go); YAML is split at `---` lines as its YAMLReader splits
// it. It also says where each document starts.
func splitDocuments(r io.Reader) ([]document, error) {
	ds := newDocStream(r)
	var docs []document
	for {
		d, err := ds.next()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return docs, err
		}
		docs = append(docs, d)
	}
}

// docStream is splitDocuments one document at a time (drift -f streams
// files that do not fit in memory).
type docStream struct {
	src   io.Reader // the stream as given; br and js read it once begun
	size  int       // br's buffer
	js    *jsonDocs // the JSON values at the start of a JSON stream
	br    *bufio.Reader
	buf   bytes.Buffer
	line  []byte // the line being read, when it is longer than br's buffer
	n     int    // lines read
	start int    // first line of the document being read
	count int    // documents returned
	done  bool
	// borrow returns each document's data without a copy: it is valid
	// until the next call.
	borrow bool
}

func newDocStream(r io.Reader) *docStream { return newDocStreamSize(r, 64<<10) }

func newDocStreamSize(r io.Reader, size int) *docStream {
	return &docStream{src: r, size: size, start: 1}
}

// next returns the next document, or io.EOF after the last.
func (s *docStream) next() (document, error) {
	if s.br == nil && s.js == nil && !s.done {
		s.begin()
	}
	if s.js != nil {
		if d, err, ok := s.nextJSON(); ok {
			return d, err
		}
		// kubectl reads the rest of the stream as YAML.
	}
	for !s.done {
		if s.bulk() {
			continue
		}
		s.n++
		line, err := s.readLine()
		if err != nil && !errors.Is(err, io.EOF) {
			s.done = true
			return document{}, err
		}
		if rest, ok := bytes.CutPrefix(line, []byte("---")); ok {
			if t := strings.TrimSpace(string(rest)); t != "" && t[0] != '#' {
				s.done = true
				return document{}, fmt.Errorf("document %d: invalid Yaml document separator: %s", s.count+1, t)
			}
			if s.buf.Len() > 0 {
				start := s.start
				s.start = s.n + 1
				if err != nil {
					s.done = true
				}
				return s.emit(start), nil
			}
			if err != nil {
				s.done = true
				break
			}
			// A separator that opens a document is kept in it, as the
			// YAMLReader keeps it (go-yaml reads it as the explicit start
			// of the document: "---\n%YAML 1.1\n" is an empty document).
			s.start = s.n
			s.buf.Write(line)
			continue
		}
		if err != nil { // EOF: the line read with it is empty
			s.done = true
			if s.buf.Len() > 0 {
				return s.emit(s.start), nil
			}
			break
		}
		s.buf.Write(line)
	}
	return document{}, io.EOF
}

// bulk takes, straight from the reader's buffer, the complete lines at
// its start that the line-by-line reading would only append: up to the
// next line that starts with "---", with no '\r' (ReadLine drops a
// "\r\n" ending: those lines go one by one). It reports whether it took
// any. A document is copied once, not a line at a time.
func (s *docStream) bulk() bool {
	n := s.br.Buffered()
	if n < 4 {
		return false
	}
	data, _ := s.br.Peek(n)
	if bytes.HasPrefix(data, []byte("---")) {
		return false
	}
	end := bytes.Index(data, []byte("\n---")) + 1
	if end == 0 {
		end = bytes.LastIndexByte(data, '\n') + 1
	}
	if end == 0 || bytes.IndexByte(data[:end], '\r') >= 0 {
		return false
	}
	s.buf.Write(data[:end])
	s.n += bytes.Count(data[:end], []byte("\n"))
	s.br.Discard(end)
	return true
}

func (s *docStream) emit(start int) document {
	d := document{data: s.buf.Bytes(), line: start}
	if !s.borrow {
		d.data = bytes.Clone(d.data)
	}
	s.buf.Reset()
	s.count++
	return d
}

// readLine reads one line of any length as bufio.Reader.ReadLine splits
// them (a "\n" or "\r\n" ending dropped), with '\n' appended; at the end,
// an empty line and io.EOF. The line is valid until the next call: it is
// most often a slice of the reader's buffer (a copy per line was a fifth
// of drift -f's allocations).
func (s *docStream) readLine() ([]byte, error) {
	part, err := s.br.ReadSlice('\n')
	if err == nil {
		return crlf(part), nil
	}
	s.line = append(s.line[:0], part...)
	for errors.Is(err, bufio.ErrBufferFull) {
		part, err = s.br.ReadSlice('\n')
		s.line = append(s.line, part...)
	}
	switch {
	case err == nil:
		return crlf(s.line), nil
	case errors.Is(err, io.EOF) && len(s.line) > 0 && len(s.line)%yamlReaderBuffer == 0:
		// kubectl's YAMLReader reads lines through a 4096-byte
		// bufio.Reader: a last line without an ending that fills it
		// exactly comes with EOF and is dropped. So is it here: a field
		// kubectl never sends must not make a pass.
		return nil, io.EOF
	case errors.Is(err, io.EOF) && len(s.line) > 0:
		// The last line has no ending: it is a line, and EOF comes next.
		return append(s.line, '\n'), nil
	}
	return nil, err
}

// yamlReaderBuffer is the size of the bufio.Reader kubectl's YAMLReader
// reads lines with (apimachinery's NewYAMLToJSONDecoder).
const yamlReaderBuffer = 4096

// crlf turns a line's "\r\n" ending into "\n".
func crlf(l []byte) []byte {
	if n := len(l); n >= 2 && l[n-2] == '\r' {
		l[n-2] = '\n'
		return l[:n-1]
	}
	return l
}

// origin is where one object was read: its file, the document and, for an
// item of a List, the item's index path inside it.
type origin struct {
	file  string
	doc   *document
	items []int
	node  *yaml.Node // parsed on first use
	parse sync.Once
	// lite is the document's line tree from the block-YAML reader, when
	// it read the document (FileScan's pods): Locate walks it instead of
	// parsing the document again with yaml.v3.
	lite *lnode
}

// origins maps the objects read from files, by the name findings give
// them ("pod/ns/name", "networkpolicy/ns/name", "adminnetworkpolicy/name"),
// to where they were read.
type origins map[string]*origin

func (s origins) add(key string, src *origin) {
	if src == nil || src.file == "" {
		return
	}
	if _, dup := s[key]; !dup {
		s[key] = src
	}
}

// Locate fills in File and Line of the findings on objects read from m's
// files: the line of the field named in the finding's subject, or of the
// nearest enclosing field that is written there. Findings on other objects
// are left as they are.
func (m *Manifests) Locate(fs []report.Finding) {
	for i := range fs {
		key, path := findingObject(&fs[i])
		src := m.origins[key]
		if src == nil {
			continue
		}
		fs[i].File, fs[i].Line = src.file, src.line(path)
	}
}

// policyKinds are the kinds whose findings name the policy in the subject
// ("networkpolicy/allow-all spec.egress[0].to[0]"): the line to fix is in
// that policy, not in the pod it selects.
var policyKinds = map[string]bool{
	"networkpolicy": true, "ciliumnetworkpolicy": true, "ciliumclusterwidenetworkpolicy": true,
	"adminnetworkpolicy": true, "baselineadminnetworkpolicy": true, "clusternetworkpolicy": true,
}

// findingObject is the object a finding asks to change, as a sources key,
// and the field path inside it.
func findingObject(f *report.Finding) (key, path string) {
	if obj, rest, ok := strings.Cut(f.Subject, " "); ok {
		if kind, name, ok := strings.Cut(obj, "/"); ok && policyKinds[kind] {
			if kind == "networkpolicy" && !strings.Contains(name, "/") {
				// NetworkPolicies select pods of their own namespace only.
				obj = kind + "/" + f.Namespace + "/" + name
			}
			return obj, rest
		}
	}
	return f.Target, f.Subject
}

// line is the line of path inside the object: the deepest part of it that
// the file spells out.
func (s *origin) line(path string) int {
	if s.lite != nil && len(s.items) == 0 {
		return s.doc.line + walkLines(s.lite, path) - 1
	}
	root := s.root()
	if root == nil {
		return s.doc.line
	}
	n := walk(root, path)
	return s.doc.line + n.Line - 1
}

// root parses the object's document (once) and finds the object in it.
// A policy's origin is read by every pod checked in parallel (FileScan):
// the first to need it parses it.
func (s *origin) root() *yaml.Node {
	s.parse.Do(func() { s.node = s.parseRoot() })
	return s.node
}

func (s *origin) parseRoot() *yaml.Node {
	var doc yaml.Node
	if err := yaml.Unmarshal(s.doc.data, &doc); err != nil || len(doc.Content) == 0 {
		return nil
	}
	n := doc.Content[0]
	for _, i := range s.items {
		items := mapValue(n, "items")
		if items == nil || items.Kind != yaml.SequenceNode || i >= len(items.Content) {
			return nil
		}
		n = items.Content[i]
	}
	return n
}

// walk follows a finding's field path ("spec.containers[agent].ports[0]",
// "spec.securityContext.sysctls[kernel.msgmax]") as far as the document
// spells it out and returns the node it reached: for a mapping entry, its
// key (the line a reader looks for).
func walk(n *yaml.Node, path string) *yaml.Node {
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

// walkLines is walk over a block-YAML line tree: the line walk's node
// would be on (TestWalkLinesMatchesWalk).
func walkLines(n *lnode, path string) int {
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
		var next *lnode
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

func (n *lnode) entry(key string) (int, *lnode) {
	for _, k := range n.kids {
		if k.key == key {
			return int(k.line), k.val
		}
	}
	return 0, nil
}

func (n *lnode) item(index string) *lnode {
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
