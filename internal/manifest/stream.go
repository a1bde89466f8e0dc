package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Document is one YAML document of a stream, or one value of a JSON
// stream, and the line it starts on.
type Document struct {
	Data []byte
	Line int // 1-based line of the document's first line in its file
	// JSON: the document is one value of a JSON stream (json.go), read as
	// JSON, not as YAML.
	JSON bool
}

// Split splits a stream into documents exactly as kubectl does (the API
// machinery's YAMLOrJSONDecoder): a stream whose first character is `{`
// is a series of JSON values, possibly followed by YAML (json.go); YAML
// is split at `---` lines as its YAMLReader splits it. It also says where
// each document starts.
func Split(r io.Reader) ([]Document, error) {
	ds := NewStream(r)
	var docs []Document
	for {
		d, err := ds.Next()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return docs, err
		}
		docs = append(docs, d)
	}
}

// Stream is Split one document at a time (drift -f streams files that do
// not fit in memory).
type Stream struct {
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
	// Borrow returns each document's Data without a copy: it is valid
	// until the next call to Next.
	Borrow bool
}

// NewStream reads the documents of r.
func NewStream(r io.Reader) *Stream { return newStreamSize(r, 64<<10) }

func newStreamSize(r io.Reader, size int) *Stream {
	return &Stream{src: r, size: size, start: 1}
}

// Next returns the next document, or io.EOF after the last.
func (s *Stream) Next() (Document, error) {
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
			return Document{}, err
		}
		if rest, ok := bytes.CutPrefix(line, []byte("---")); ok {
			if t := strings.TrimSpace(string(rest)); t != "" && t[0] != '#' {
				s.done = true
				return Document{}, fmt.Errorf("document %d: invalid Yaml document separator: %s", s.count+1, t)
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
	return Document{}, io.EOF
}

// bulk takes, straight from the reader's buffer, the complete lines at
// its start that the line-by-line reading would only append: up to the
// next line that starts with "---", with no '\r' (ReadLine drops a
// "\r\n" ending: those lines go one by one). It reports whether it took
// any. A document is copied once, not a line at a time.
func (s *Stream) bulk() bool {
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

func (s *Stream) emit(start int) Document {
	d := Document{Data: s.buf.Bytes(), Line: start}
	if !s.Borrow {
		d.Data = bytes.Clone(d.Data)
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
func (s *Stream) readLine() ([]byte, error) {
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
