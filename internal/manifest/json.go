package manifest

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
func (s *Stream) begin() {
	in := decodedStream(s.src)
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
func (s *Stream) nextJSON() (d Document, err error, ok bool) {
	j := s.js
	var raw json.RawMessage
	err = j.dec.Decode(&raw)
	if err == nil {
		end := int(j.dec.InputOffset() - j.base)
		start := end - len(raw)
		d = Document{Data: raw, Line: j.lines + bytes.Count(j.rec[:start], []byte("\n")) + 1, JSON: true}
		j.lines += bytes.Count(j.rec[:end], []byte("\n"))
		j.rec = append(j.rec[:0], j.rec[end:]...)
		j.base += int64(end)
		j.count++
		s.count++
		return d, nil, true
	}
	if err == io.EOF { //nolint:errorlint // json.Decoder's clean end, as kubectl tests it
		s.done = true
		return Document{}, io.EOF, true
	}
	bad := fmt.Errorf("document %d: %w", s.count+1, err)
	if j.count > 1 {
		// Two values make it a JSON stream: kubectl does not switch.
		s.done = true
		return Document{}, bad, true
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
			return Document{}, bad, true
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
	return Document{}, nil, false
}

// decodedStream is src as FileVisitor decodes it, the same bytes as
// transform.NewReader(src, unicode.BOMOverride(unicode.UTF8.NewDecoder())):
// UTF-16 (by its byte order mark) through that decoder itself, what
// follows a UTF-8 mark as it is, anything else through utf8Reader, which passes valid UTF-8 on without the copy a
// byte at a time that x/text makes (a sixth of drift -f's reading).
func decodedStream(src io.Reader) io.Reader {
	br := bufio.NewReaderSize(src, 16)
	head, _ := br.Peek(3)
	switch {
	case bytes.HasPrefix(head, []byte{0xFE, 0xFF}), bytes.HasPrefix(head, []byte{0xFF, 0xFE}):
		return transform.NewReader(br, xunicode.BOMOverride(xunicode.UTF8.NewDecoder()))
	case bytes.HasPrefix(head, []byte{0xEF, 0xBB, 0xBF}):
		// After a UTF-8 mark x/text passes the bytes on as they are
		// (transform.Nop): no U+FFFD for a bad byte.
		br.Discard(3)
		return br
	}
	return &utf8Reader{r: br}
}

// utf8Reader replaces each byte that is not part of valid UTF-8 with
// U+FFFD, as x/text's UTF-8 decoder does (a rune cut by a read waits for
// the next one).
type utf8Reader struct {
	r   io.Reader
	in  []byte // read, not yet decoded: an incomplete rune, or a bad chunk
	out []byte // decoded, not yet returned
	err error
}

func (u *utf8Reader) Read(p []byte) (int, error) {
	for {
		if len(u.out) > 0 {
			n := copy(p, u.out)
			u.out = u.out[n:]
			return n, nil
		}
		if u.err != nil {
			if len(u.in) > 0 {
				u.out, u.in = appendValidUTF8(nil, u.in), nil
				continue
			}
			return 0, u.err
		}
		if len(p) == 0 {
			return 0, nil
		}
		if len(u.in) == 0 && len(p) >= utf8.UTFMax {
			// Straight into p: most chunks are valid and stay as read.
			n, err := u.r.Read(p)
			u.err = err
			data := p[:n]
			cut := len(data)
			if err == nil {
				cut = incompleteRuneAt(data)
			}
			if utf8.Valid(data[:cut]) {
				u.in = append(u.in, data[cut:]...)
				if cut > 0 {
					return cut, nil
				}
				continue
			}
			u.in = append(u.in, data...)
		} else {
			var buf [32 << 10]byte
			n, err := u.r.Read(buf[:])
			u.err = err
			u.in = append(u.in, buf[:n]...)
		}
		cut := len(u.in)
		if u.err == nil {
			cut = incompleteRuneAt(u.in)
		}
		u.out = appendValidUTF8(u.out[:0], u.in[:cut])
		u.in = append([]byte(nil), u.in[cut:]...)
	}
}

// utf8Lead is what a byte that starts a multi-byte rune says: its size
// and the range its second byte must be in (0 for a byte no rune starts
// with).
func utf8Lead(c byte) (size int, lo, hi byte) {
	switch {
	case c >= 0xC2 && c <= 0xDF:
		return 2, 0x80, 0xBF
	case c == 0xE0:
		return 3, 0xA0, 0xBF
	case c == 0xED:
		return 3, 0x80, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		return 3, 0x80, 0xBF
	case c == 0xF0:
		return 4, 0x90, 0xBF
	case c >= 0xF1 && c <= 0xF3:
		return 4, 0x80, 0xBF
	case c == 0xF4:
		return 4, 0x80, 0x8F
	}
	return 0, 0, 0
}

// incompleteRuneAt is where a rune cut by the end of b starts (a later
// read may complete it), or len(b).
func incompleteRuneAt(b []byte) int {
	for k := max(0, len(b)-utf8.UTFMax+1); k < len(b); k++ {
		if size, _, _ := utf8Lead(b[k]); size > 0 && k+size > len(b) {
			return k
		}
	}
	return len(b)
}

// appendValidUTF8 appends b, the rest of the stream or a part with no rune
// cut at its end, with each ill-formed sequence replaced by one U+FFFD:
// its maximal subpart, the W3C way x/text's decoder takes.
func appendValidUTF8(out, b []byte) []byte {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			out = append(out, c)
			i++
			continue
		}
		size, lo, hi := utf8Lead(c)
		cont := func(j int) bool { return j < len(b) && b[j] >= 0x80 && b[j] <= 0xBF }
		bad := 0
		switch {
		case size == 0:
			bad = 1
		case i+1 >= len(b) || b[i+1] < lo || b[i+1] > hi:
			bad = 1
		case size >= 3 && !cont(i+2):
			bad = 2
		case size == 4 && !cont(i+3):
			bad = 3
		}
		if bad > 0 {
			out = append(out, "\uFFFD"...)
			i += bad
			continue
		}
		out = append(out, b[i:i+size]...)
		i += size
	}
	return out
}
