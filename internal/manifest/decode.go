package manifest

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode"
)

// decodeNode decodes a block-YAML tree (Parse) straight into the
// typed object v points to, as sigs.k8s.io/json
// (UnmarshalCaseSensitivePreserveInts, what strictish calls) decodes the
// tree's JSON, without writing or scanning that JSON: at 100,000 pods the
// YAML → JSON → struct round trip was half of drift -f. It takes only
// what it can prove decodes the same — fields matched case-sensitively,
// unknown fields skipped, strings, booleans, decimal integers that fit,
// null, [] and {}, pointers, slices, maps with string keys, and types with
// their own UnmarshalJSON (Quantity, IntOrString, Time), which get the
// JSON of their value — and returns ErrNotPlain for anything else
// (a type mismatch, a float or an interface{} field, []byte, a ",string"
// or ambiguous field), so the caller reads that document the old way and
// gets the old result or the old error. FuzzDecodeNode holds it to
// strictish over the tree's JSON.
func decodeNode(n *Node, v reflect.Value, pl *tplan) error {
	switch pl.kind {
	case kUnmarshal:
		// As encoding/json: the value's JSON, null included, to the
		// type's own UnmarshalJSON.
		return v.Addr().Interface().(json.Unmarshaler).UnmarshalJSON(appendNodeJSON(nil, n))
	case kPtr:
		if n.kind == 'v' && n.tok == tokNull {
			v.SetZero()
			return nil
		}
		if v.IsNil() {
			v.Set(reflect.New(pl.t.Elem()))
		}
		return decodeNode(n, v.Elem(), pl.elem)
	case kUnsupported:
		return ErrNotPlain
	}
	switch n.kind {
	case 'm':
		return decodeMapping(n, v, pl)
	case 's':
		if pl.kind != kSlice {
			return ErrNotPlain
		}
		s := reflect.MakeSlice(pl.t, len(n.kids), len(n.kids))
		for i, it := range n.kids {
			if err := decodeNode(it.val, s.Index(i), pl.elem); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	}
	return decodeScalar(n, v, pl)
}

// decodeScalar is decodeNode for a scalar token (null, a string, a
// boolean, a number, [] or {}).
func decodeScalar(n *Node, v reflect.Value, pl *tplan) error {
	switch n.tok {
	case tokNull:
		// null empties a map or a slice and leaves anything else alone.
		if pl.kind == kMap || pl.kind == kSlice {
			v.SetZero()
		}
		return nil
	case tokString:
		if pl.kind != kString {
			return ErrNotPlain
		}
		v.SetString(n.value)
		return nil
	case tokTrue, tokFalse:
		if pl.kind != kBool {
			return ErrNotPlain
		}
		v.SetBool(n.tok == tokTrue)
		return nil
	case tokNumber:
		return decodeNumber(n, v, pl)
	case tokEmptySeq:
		if pl.kind != kSlice {
			return ErrNotPlain
		}
		v.Set(reflect.MakeSlice(pl.t, 0, 0))
		return nil
	case tokEmptyMap:
		return decodeMapping(&Node{kind: 'm'}, v, pl)
	}
	return ErrNotPlain
}

// decodeNumber sets a decimal integer that fits the field.
func decodeNumber(n *Node, v reflect.Value, pl *tplan) error {
	switch pl.kind {
	case kInt:
		i, err := strconv.ParseInt(n.value, 10, 64)
		if err != nil || v.OverflowInt(i) {
			return ErrNotPlain
		}
		v.SetInt(i)
		return nil
	case kUint:
		u, err := strconv.ParseUint(n.value, 10, 64)
		if err != nil || v.OverflowUint(u) {
			return ErrNotPlain
		}
		v.SetUint(u)
		return nil
	}
	return ErrNotPlain
}

func decodeMapping(n *Node, v reflect.Value, pl *tplan) error {
	switch pl.kind {
	case kStruct:
		for _, k := range n.kids {
			f := pl.fields[k.key]
			if f == nil {
				continue // an unknown field: ignored, as strictish ignores it
			}
			if f.plan == nil {
				return ErrNotPlain
			}
			if err := decodeNode(k.val, v.FieldByIndex(f.index), f.plan); err != nil {
				return err
			}
		}
		return nil
	case kMap:
		if pl.t == stringMapType {
			// Labels, annotations, selectors: without reflection.
			m := v.Addr().Interface().(*map[string]string)
			if *m == nil {
				*m = make(map[string]string, len(n.kids))
			}
			for _, k := range n.kids {
				switch val := k.val; {
				case val.kind == 'v' && val.tok == tokString:
					(*m)[k.key] = val.value
				case val.kind == 'v' && val.tok == tokNull:
					(*m)[k.key] = ""
				default:
					return ErrNotPlain
				}
			}
			return nil
		}
		if v.IsNil() {
			v.Set(reflect.MakeMapWithSize(pl.t, len(n.kids)))
		}
		// One key and one element, reset for each entry, as encoding/json
		// does: SetMapIndex copies them.
		key, elem := reflect.New(pl.t.Key()).Elem(), reflect.New(pl.elem.t).Elem()
		for _, k := range n.kids {
			elem.SetZero()
			if err := decodeNode(k.val, elem, pl.elem); err != nil {
				return err
			}
			key.SetString(k.key)
			v.SetMapIndex(key, elem)
		}
		return nil
	}
	return ErrNotPlain
}

var stringMapType = reflect.TypeFor[map[string]string]()

// tplan is how decodeNode decodes into one Go type.
type tplan struct {
	t      reflect.Type
	kind   planKind
	elem   *tplan            // kPtr, kSlice, kMap: the element's plan
	fields map[string]*fplan // kStruct: by JSON name, exactly
}

// fplan is one JSON field of a struct: where it is (through embedded
// structs) and its plan; a nil plan is a field decodeNode leaves to
// encoding/json (",string", or a name two fields claim).
type fplan struct {
	index []int
	plan  *tplan
}

type planKind byte

const (
	kUnsupported planKind = iota
	kStruct
	kMap
	kSlice
	kPtr
	kString
	kBool
	kInt
	kUint
	kUnmarshal
)

var (
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// plans are the plans built so far, by the type decoded into: each is
// built once and never changed after (encoding/json keeps its field lists
// the same way).
var plans sync.Map // reflect.Type → *tplan

func buildPlan(t reflect.Type, seen map[reflect.Type]*tplan) *tplan {
	if pl := seen[t]; pl != nil {
		return pl
	}
	pl := &tplan{t: t}
	seen[t] = pl
	if t.Kind() != reflect.Pointer && (reflect.PointerTo(t).Implements(jsonUnmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType)) {
		// encoding/json calls UnmarshalJSON of a named type (UnmarshalText
		// and unnamed types with promoted methods are left to it).
		if t.Name() != "" && reflect.PointerTo(t).Implements(jsonUnmarshalerType) {
			pl.kind = kUnmarshal
		}
		return pl
	}
	switch t.Kind() {
	case reflect.Pointer:
		if t.Name() != "" || t.Elem().Kind() == reflect.Pointer {
			return pl
		}
		pl.kind, pl.elem = kPtr, buildPlan(t.Elem(), seen)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return pl // []byte is base64 in JSON
		}
		pl.kind, pl.elem = kSlice, buildPlan(t.Elem(), seen)
	case reflect.Map:
		kt := t.Key()
		if kt.Kind() != reflect.String || reflect.PointerTo(kt).Implements(textUnmarshalerType) {
			return pl
		}
		pl.kind, pl.elem = kMap, buildPlan(t.Elem(), seen)
	case reflect.String:
		pl.kind = kString
	case reflect.Bool:
		pl.kind = kBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		pl.kind = kInt
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		pl.kind = kUint
	case reflect.Struct:
		pl.kind, pl.fields = kStruct, map[string]*fplan{}
		pl.addFields(t, nil, seen)
		if pl.kind != kStruct {
			pl.fields = nil
		}
	}
	return pl
}

// addFields adds the JSON fields of struct st (at index, for a promoted
// one) to a struct's plan, as encoding/json names them; a shape the fast
// path leaves to encoding/json makes the plan kUnsupported.
func (pl *tplan) addFields(st reflect.Type, index []int, seen map[reflect.Type]*tplan) {
	for i := 0; i < st.NumField(); i++ {
		sf := st.Field(i)
		tag := sf.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if tag == "-" || (!sf.IsExported() && !sf.Anonymous) {
			continue
		}
		at := append(append([]int(nil), index...), i)
		if !validTagName(name) {
			name = ""
		}
		if sf.Anonymous && !sf.IsExported() && name != "" {
			pl.kind = kUnsupported
			return
		}
		if sf.Anonymous && name == "" {
			// Promoted fields: only an embedded struct value
			// (encoding/json's other cases are left to it).
			if sf.Type.Kind() != reflect.Struct {
				pl.kind = kUnsupported
				return
			}
			pl.addFields(sf.Type, at, seen)
			continue
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		f := &fplan{index: at}
		if !hasOption(opts, "string") {
			f.plan = buildPlan(sf.Type, seen)
		}
		if _, twice := pl.fields[name]; twice {
			// Two fields with one name: encoding/json picks by
			// depth and tags; leave the name to it.
			f.plan = nil
		}
		pl.fields[name] = f
	}
}

func hasOption(opts, want string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o == want {
			return true
		}
	}
	return false
}

// validTagName is encoding/json's rule for a usable name in a tag.
func validTagName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

// Decode decodes a plain block-YAML document's tree (Parse) into the
// value v points to, without the JSON round trip, as decodeNode says;
// ErrNotPlain when the caller must read the document the reference way.
func Decode(n *Node, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return ErrNotPlain
	}
	t := rv.Elem().Type()
	pl, ok := plans.Load(t)
	if !ok {
		pl, _ = plans.LoadOrStore(t, buildPlan(t, map[reflect.Type]*tplan{}))
	}
	return decodeNode(n, rv.Elem(), pl.(*tplan))
}
