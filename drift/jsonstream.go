package drift

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"unicode"
	"unicode/utf8"

	xunicode "golang.org/x/text/encoding/unicode"
	"golang.org/x/text/transform"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// This file reads a stream the way kubectl apply -f does before it splits
// YAML (cli-runtime's FileVisitor and StreamVisitor over apimachinery's
// YAMLOrJSONDecoder, v0.37):
//
//   - the bytes are decoded from UTF-8 with a byte order mark dropped, or
//     from UTF-16 when a UTF-16 mark says so; an invalid byte becomes
//     U+FFFD;
//   - a stream whose first 4096 bytes start, after Unicode white space,
//     with `{` is read as JSON values one after another (`{}{}` or one a
//     line), each a document;
//   - when a JSON value cannot be read and at most one was, the rest (from
//     the end of that one, white space up to the first line end dropped)
//     is read as YAML; after two or more it is an error.
//
// A JSON value is decoded as JSON (`\/`, surrogate pairs and all), not as
// YAML: go-yaml v2 refuses both escapes.

// jsonDocs is the JSON part of a stream being read.
type jsonDocs struct {
	src   io.Reader // what the decoder reads, after rec
	dec   *json.Decoder
	rec   []byte // what the decoder read from src since the last value ended
	base  int64  // the stream offset of rec[0]
	lines int    // line ends before base
	count int    // values read
}

// Read records what the decoder reads: after a bad value the YAML reading
// starts again from the end of the last good one.
func (j *jsonDocs) Read(p []byte) (int, error) {
	n, err := j.src.Read(p)
	j.rec = append(j.rec, p[:n]...)
	return n, err
}

// begin decodes the stream as kubectl does and guesses JSON or YAML from
// its first 4096 bytes (utilyaml.GuessJSONStream).
func (s *docStream) begin() {
	in := transform.NewReader(s.src, xunicode.BOMOverride(xunicode.UTF8.NewDecoder()))
	head := make([]byte, 4096)
	n, err := io.ReadFull(in, head)
	head = head[:n]
	var r io.Reader = bytes.NewReader(head)
	switch err {
	case nil:
		r = io.MultiReader(r, in)
	case io.EOF, io.ErrUnexpectedEOF:
	default:
		r = io.MultiReader(r, errReader{err})
	}
	if utilyaml.IsJSONBuffer(head) {
		s.js = &jsonDocs{src: r}
		s.js.dec = json.NewDecoder(s.js)
		return
	}
	s.br = bufio.NewReaderSize(r, s.size)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// nextJSON returns the next JSON value of the stream as a document; ok is
// false when the stream goes on as YAML (s.br then reads it).
func (s *docStream) nextJSON() (d document, err error, ok bool) {
	j := s.js
	var raw json.RawMessage
	err = j.dec.Decode(&raw)
	if err == nil {
		end := int(j.dec.InputOffset() - j.base)
		start := end - len(raw)
		d = document{data: raw, line: j.lines + bytes.Count(j.rec[:start], []byte("\n")) + 1, json: true}
		j.lines += bytes.Count(j.rec[:end], []byte("\n"))
		j.rec = append(j.rec[:0], j.rec[end:]...)
		j.base += int64(end)
		j.count++
		s.count++
		return d, nil, true
	}
	if err == io.EOF { //nolint:errorlint // json.Decoder's clean end, as kubectl tests it
		s.done = true
		return document{}, io.EOF, true
	}
	bad := fmt.Errorf("document %d: %w", s.count+1, err)
	if j.count > 1 {
		// Two values make it a JSON stream: kubectl does not switch.
		s.done = true
		return document{}, bad, true
	}
	// The rest from the end of the last good value, white space dropped up
	// to and including the first line end (kubectl's consumeWhitespace,
	// which needs four bytes ahead of each rune it looks at).
	br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(j.rec), j.src), max(s.size, 16))
	lines := j.lines
	for {
		ahead, perr := br.Peek(4)
		r, size := utf8.DecodeRune(ahead)
		if perr != nil || r == utf8.RuneError {
			s.done = true
			return document{}, bad, true
		}
		if !unicode.IsSpace(r) {
			break
		}
		br.Discard(size)
		if r == '\n' {
			lines++
			break
		}
	}
	s.js, s.br = nil, br
	s.n, s.start = lines, lines+1
	return document{}, nil, false
}
