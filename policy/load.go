package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// MaxPolicyBytes bounds a policy file; a policy is a page of YAML, not a data set.
const MaxPolicyBytes = 1 << 20

// maxNodes bounds how many YAML nodes a document may expand to, so an alias
// bomb ("billion laughs") is an error instead of an out-of-memory kill.
const maxNodes = 100_000

// FieldError is one problem with a policy, located by its YAML path.
type FieldError struct {
	Path string // "spec.egress.allow[2].reason"; "" for the document itself
	Line int    // 1-based line in the file, 0 when unknown
	Msg  string
}

func (e *FieldError) Error() string {
	loc := e.Path
	if loc == "" {
		loc = "policy"
	}
	if e.Line > 0 {
		return fmt.Sprintf("%s: %s (line %d)", loc, e.Msg, e.Line)
	}
	return fmt.Sprintf("%s: %s", loc, e.Msg)
}

// Problems returns every FieldError joined into err, in file order.
func Problems(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		var fe *FieldError
		// Identity, not errors.Is: only a FieldError itself is one problem;
		// an error that wraps one is reported as it reads.
		if errors.As(e, &fe) && fe == e { //nolint:errorlint // identity, see above
			out = append(out, fe)
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		out = append(out, &FieldError{Msg: e.Error()})
	}
	walk(err)
	return out
}

// LoadFile reads, decodes, defaults and validates a policy file.
func LoadFile(path string) (*Policy, []byte, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	p, err := Load(data)
	return p, data, err
}

// ReadFile reads a policy file, at most one byte past MaxPolicyBytes (so
// that an oversized file is reported as such, not read whole).
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &FileError{Path: path, Err: err}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxPolicyBytes+1))
	if err != nil {
		return nil, &FileError{Path: path, Err: err}
	}
	return data, nil
}

// FileError is a file that could not be read. It reads as "FILE: message",
// the message without the path again ("policy.yaml: no such file or
// directory").
type FileError struct {
	Path string
	Err  error
}

func (e *FileError) Error() string {
	msg := e.Err.Error()
	var pe *fs.PathError
	if errors.As(e.Err, &pe) {
		msg = pe.Err.Error()
	}
	return e.Path + ": " + msg
}

func (e *FileError) Unwrap() error { return e.Err }

// Load decodes a policy strictly, applies defaults and validates it. The
// error, if any, joins one *FieldError per problem found.
func Load(data []byte) (*Policy, error) {
	p, _, err := load(data)
	return p, err
}

// load is Load, returning the line of every path the file writes too.
func load(data []byte) (*Policy, map[string]int, error) {
	p, lines, err := decode(data)
	if err != nil {
		return nil, nil, err
	}
	// Before the defaults fill them: a port written as 0 is a mistake,
	// not "the default port".
	zero := p.writtenZeroPorts(lines)
	p.Default()
	if err := p.validate(lines, zero...); err != nil {
		return nil, nil, err
	}
	return p, lines, nil
}

// decode turns YAML into a Policy, refusing unknown fields, duplicate keys
// and values of the wrong type. It returns the line of every path it saw so
// that later validation errors can point into the file too.
func decode(data []byte) (*Policy, map[string]int, error) {
	if len(data) > MaxPolicyBytes {
		return nil, nil, &FieldError{Msg: fmt.Sprintf("file is larger than %d bytes", MaxPolicyBytes)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, &FieldError{Msg: "file is empty: expected a SandboxPolicy document"}
		}
		return nil, nil, &FieldError{Msg: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, nil, &FieldError{Line: extra.Line, Msg: "more than one YAML document: a policy file holds exactly one SandboxPolicy"}
	} else if !errors.Is(err, io.EOF) {
		return nil, nil, &FieldError{Msg: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}

	w := &walker{lines: map[string]int{}}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, nil, &FieldError{Line: root.Line, Msg: "expected a mapping (apiVersion, kind, metadata, spec)"}
	}
	value := w.walk(root, reflect.TypeFor[Policy](), "")
	if len(w.errs) > 0 {
		return nil, nil, errors.Join(w.errs...)
	}
	raw, err := json.Marshal(value)
	if err != nil {
		return nil, nil, &FieldError{Msg: "internal: re-encode policy: " + err.Error()}
	}
	// Decoded onto the strict defaults: a field the file leaves out keeps
	// its secure value, one it writes replaces it.
	p := strictDefaults()
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, &FieldError{Msg: "decode: " + err.Error()}
	}
	return &p, w.lines, nil
}

// walker checks a YAML tree against a Go type and converts it to plain JSON
// values. It collects every problem instead of stopping at the first.
type walker struct {
	errs  []error
	lines map[string]int
	nodes int
}

func (w *walker) fail(n *yaml.Node, path, format string, args ...any) {
	w.errs = append(w.errs, &FieldError{Path: path, Line: n.Line, Msg: fmt.Sprintf(format, args...)})
}

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

func (w *walker) walk(n *yaml.Node, t reflect.Type, path string) any {
	w.nodes++
	if w.nodes > maxNodes {
		if w.nodes == maxNodes+1 {
			w.fail(n, path, "document expands to more than %d nodes (alias bomb?)", maxNodes)
		}
		return nil
	}
	if n.Kind == yaml.AliasNode {
		return w.walk(n.Alias, t, path)
	}
	if path != "" {
		if _, seen := w.lines[path]; !seen {
			w.lines[path] = n.Line
		}
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		return w.walkUnmarshaler(n, t, path)
	}
	switch t.Kind() {
	case reflect.Struct:
		return w.walkStruct(n, t, path)
	case reflect.Map:
		return w.walkMap(n, t, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			w.fail(n, path, "expected a list, got %s", describe(n))
			return nil
		}
		out := make([]any, 0, len(n.Content))
		for i, item := range n.Content {
			out = append(out, w.walk(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)))
		}
		return out
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Int32:
		return w.walkScalar(n, t, path)
	}
	w.fail(n, path, "internal: unsupported type %s", t)
	return nil
}

// walkUnmarshaler checks a value of a type with its own JSON decoding (a
// duration, a quantity) by decoding it as plain values.
func (w *walker) walkUnmarshaler(n *yaml.Node, t reflect.Type, path string) any {
	v := w.plain(n, path)
	raw, err := json.Marshal(v)
	if err == nil {
		err = reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(raw)
	}
	if err != nil {
		w.fail(n, path, "%s", err.Error())
		return nil
	}
	return v
}

// walkStruct checks a mapping against a struct's JSON fields: no unknown
// field (with a suggestion), no duplicate key.
func (w *walker) walkStruct(n *yaml.Node, t reflect.Type, path string) any {
	if n.Kind != yaml.MappingNode {
		w.fail(n, path, "expected a mapping, got %s", describe(n))
		return nil
	}
	fields := jsonFields(t)
	out := map[string]any{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		sub := join(path, key)
		if _, dup := out[key]; dup {
			w.fail(k, sub, "duplicate key")
			continue
		}
		f, ok := fields[key]
		if !ok {
			w.fail(k, sub, "unknown field%s", suggest(key, fields))
			out[key] = nil
			continue
		}
		out[key] = w.walk(v, f, sub)
	}
	return out
}

// walkMap checks a mapping with string keys against a map type.
func (w *walker) walkMap(n *yaml.Node, t reflect.Type, path string) any {
	if n.Kind != yaml.MappingNode {
		w.fail(n, path, "expected a mapping, got %s", describe(n))
		return nil
	}
	out := map[string]any{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		sub := join(path, k.Value)
		if k.Kind != yaml.ScalarNode {
			w.fail(k, path, "map keys must be strings")
			continue
		}
		if _, dup := out[k.Value]; dup {
			w.fail(k, sub, "duplicate key")
			continue
		}
		out[k.Value] = w.walk(v, t.Elem(), sub)
	}
	return out
}

// walkScalar checks a string, a boolean or a whole number: the YAML tag
// must be the type's, so `yes` is no boolean and `1.0` no integer.
func (w *walker) walkScalar(n *yaml.Node, t reflect.Type, path string) any {
	switch t.Kind() {
	case reflect.String:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			hint := ""
			if n.Kind == yaml.ScalarNode {
				hint = fmt.Sprintf(" (quote it: %q)", n.Value)
			}
			w.fail(n, path, "expected a string, got %s%s", describe(n), hint)
			return nil
		}
		return n.Value
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			w.fail(n, path, "expected true or false, got %s", describe(n))
			return nil
		}
		b, _ := strconv.ParseBool(strings.ToLower(n.Value))
		return b
	default: // reflect.Int, Int64, Int32
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			w.fail(n, path, "expected a whole number, got %s", describe(n))
			return nil
		}
		var i int64
		if err := n.Decode(&i); err != nil {
			w.fail(n, path, "number out of range: %s", n.Value)
			return nil
		}
		return i
	}
}

// plain converts a YAML node to untyped JSON values (for custom unmarshalers).
func (w *walker) plain(n *yaml.Node, path string) any {
	w.nodes++
	if w.nodes > maxNodes {
		return nil
	}
	switch n.Kind {
	case yaml.AliasNode:
		return w.plain(n.Alias, path)
	case yaml.MappingNode:
		out := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			out[n.Content[i].Value] = w.plain(n.Content[i+1], join(path, n.Content[i].Value))
		}
		return out
	case yaml.SequenceNode:
		out := []any{}
		for i, c := range n.Content {
			out = append(out, w.plain(c, fmt.Sprintf("%s[%d]", path, i)))
		}
		return out
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return n.Value
	}
	return v
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.Tag {
	case "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	case "!!int":
		return "the number " + n.Value
	case "!!float":
		return "the number " + n.Value
	case "!!bool":
		return "the boolean " + n.Value
	}
	return strconv.Quote(n.Value)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// jsonFields maps JSON names to field types for a struct.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// suggest offers the closest known field name for a typo.
func suggest(key string, fields map[string]reflect.Type) string {
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	best, bestD := "", 3
	for _, k := range names {
		if d := editDistance(strings.ToLower(key), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return fmt.Sprintf(" (known: %s)", strings.Join(names, ", "))
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
