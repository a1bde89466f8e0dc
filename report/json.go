package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"
)

// JSON writes the run as one indented JSON document, with its schema
// (ReportSchema) and summary (Summarize) first.
//
// The findings are streamed: the run around them is marshalled once with
// an empty list, and each finding is written into it as it is read, so a
// report of half a million findings is never built in memory. The bytes
// are exactly json.Encoder's with two-space indentation
// (TestWritersMatchLegacy, TestFindingJSONMatchesEncoding).
type JSON struct{}

// findingsHole is where the empty findings list sits in the marshalled run.
var findingsHole = []byte("\n  \"findings\": []")

func (JSON) Write(w io.Writer, run Run) error {
	set := run.Set()
	head := run
	head.Schema, head.Summary = ReportSchema, run.Summarize()
	// The probes' raw results go the same way: at 1,000 nodes they are
	// half of a 14 MB report.
	head.Findings, head.Spooled, head.Probes = []Finding{}, nil, nil
	doc, err := json.MarshalIndent(head, "", "  ")
	if err != nil {
		return err
	}
	i := bytes.Index(doc, findingsHole)
	if i < 0 {
		return fmt.Errorf("encode report: no findings list in %.80q", doc)
	}
	cut := i + len(findingsHole) - len("[]")
	b := bufio.NewWriterSize(w, 64<<10)
	b.Write(doc[:cut])
	if set.Len() == 0 {
		b.WriteString("[]")
	} else {
		b.WriteString("[\n    ")
		// The findings' pieces (hundreds of KB each) go straight to w.
		if err := b.Flush(); err != nil {
			return err
		}
		if err := writeFindingsJSON(w, set); err != nil {
			return err
		}
		b.WriteString("\n  ]")
	}
	if len(run.Probes) > 0 {
		b.WriteString(",\n  \"probes\": [")
		for i := range run.Probes {
			p, err := json.MarshalIndent(&run.Probes[i], "    ", "  ")
			if err != nil {
				return err
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("\n    ")
			b.Write(p)
		}
		b.WriteString("\n  ]")
	}
	b.Write(doc[cut+len("[]"):])
	b.WriteByte('\n')
	return b.Flush()
}

// writeFindingsJSON writes the findings list's elements: encoded in
// batches on every core (writeBatches), written in order.
func writeFindingsJSON(b io.Writer, set FindingSet) error {
	return writeBatches(b, set, func(x []byte, first int, fs []Finding) ([]byte, error) {
		var err error
		for i := range fs {
			if i > 0 || first > 0 {
				x = append(x, ",\n    "...)
			}
			if x, err = appendFindingJSON(x, &fs[i]); err != nil {
				break
			}
		}
		return x, err
	})
}

// appendFindingJSON writes f as encoding/json would at depth 2 of the
// report (an element of "findings"), omitempty fields left out. A new
// Finding field must be added here (TestFindingJSONMatchesEncoding fills
// every field by reflection).
func appendFindingJSON(x []byte, f *Finding) ([]byte, error) {
	const in = "\n      "
	x = append(x, '{')
	field := func(name string, v string, omitEmpty bool) {
		if omitEmpty && v == "" {
			return
		}
		if x[len(x)-1] != '{' {
			x = append(x, ',')
		}
		x = append(x, in...)
		x = append(x, '"')
		x = append(x, name...)
		x = append(x, `": `...)
		x = AppendJSONString(x, v)
	}
	field("check", f.Check, false)
	field("target", f.Target, true)
	field("subject", f.Subject, true)
	field("namespace", f.Namespace, true)
	field("status", string(f.Status), false)
	field("severity", string(f.Severity), true)
	field("expected", f.Expected, true)
	field("actual", f.Actual, true)
	field("fix", f.Fix, true)
	field("evidence", f.Evidence, true)
	field("class", f.Class, true)
	if f.Seconds != 0 {
		if math.IsNaN(f.Seconds) || math.IsInf(f.Seconds, 0) {
			return x, fmt.Errorf("encode report: finding %s: seconds %v", f.Name(), f.Seconds)
		}
		x = append(x, ","+in+`"seconds": `...)
		x = appendJSONFloat(x, f.Seconds)
	}
	if f.Attempt != nil {
		compact, err := json.Marshal(f.Attempt)
		if err != nil {
			return x, err
		}
		var ind bytes.Buffer
		if err := json.Indent(&ind, compact, "      ", "  "); err != nil {
			return x, err
		}
		x = append(x, ","+in+`"attempt": `...)
		x = append(x, ind.Bytes()...)
	}
	field("control", f.Control, true)
	field("deny", f.Deny, true)
	field("file", f.File, true)
	if f.Line != 0 {
		x = append(x, ","+in+`"line": `...)
		x = strconv.AppendInt(x, int64(f.Line), 10)
	}
	if len(f.Affects) > 0 {
		x = append(x, ","+in+`"affects": [`...)
		for i, a := range f.Affects {
			if i > 0 {
				x = append(x, ',')
			}
			x = append(x, in+"  "...)
			x = AppendJSONString(x, a)
		}
		x = append(x, in+"]"...)
	}
	return append(x, "\n    }"...), nil
}

// appendJSONFloat formats like encoding/json's float64 encoder.
func appendJSONFloat(x []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	x = strconv.AppendFloat(x, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9, as encoding/json does.
		if n := len(x); n >= 4 && x[n-4] == 'e' && x[n-3] == '-' && x[n-2] == '0' {
			x[n-2] = x[n-1]
			x = x[:n-1]
		}
	}
	return x
}

const hexDigits = "0123456789abcdef"

// jsonPlain are the ASCII bytes encoding/json writes as they are.
var jsonPlain = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// AppendJSONString quotes s as encoding/json does with HTML escaping (its
// default): <, > and & as \u escapes, control characters, invalid UTF-8 as
// \ufffd, and U+2028/U+2029.
func AppendJSONString(x []byte, s string) []byte {
	x = append(x, '"')
	x = appendJSONInner(x, s)
	return append(x, '"')
}

// appendJSONInner is AppendJSONString without the quotes.
func appendJSONInner(x []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if jsonPlain[c] {
				i++
				continue
			}
			x = append(x, s[start:i]...)
			switch c {
			case '\\', '"':
				x = append(x, '\\', c)
			case '\b':
				x = append(x, '\\', 'b')
			case '\f':
				x = append(x, '\\', 'f')
			case '\n':
				x = append(x, '\\', 'n')
			case '\r':
				x = append(x, '\\', 'r')
			case '\t':
				x = append(x, '\\', 't')
			default:
				x = append(x, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			x = append(x, s[start:i]...)
			x = append(x, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			x = append(x, s[start:i]...)
			x = append(x, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(x, s[start:]...)
}
