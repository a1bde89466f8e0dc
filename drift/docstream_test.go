package drift

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// lineSplit is the document split done one line at a time, the plain way
// (bufio.Reader.ReadLine's lines, each with '\n' appended, the last one too
// when it has no ending): the oracle of docStream, whose bulk path takes
// runs of lines straight from its buffer.
func lineSplit(data []byte) ([]document, error) {
	br := bufio.NewReaderSize(bytes.NewReader(data), 16)
	var docs []document
	var buf []byte
	n, start := 0, 1
	for {
		n++
		var line []byte
		var err error
		for {
			part, isPrefix, e := br.ReadLine()
			line = append(line, part...)
			if e != nil {
				if len(line) > 0 {
					// A last line as long as the buffer, without an
					// ending: it is a line all the same, then EOF.
					line = append(line, '\n')
					br = bufio.NewReaderSize(bytes.NewReader(nil), 16)
					break
				}
				err = e
				break
			}
			if !isPrefix {
				line = append(line, '\n')
				break
			}
		}
		if rest, ok := bytes.CutPrefix(line, []byte("---")); ok {
			if t := strings.TrimSpace(string(rest)); t != "" && t[0] != '#' {
				return docs, fmt.Errorf("document %d: invalid Yaml document separator: %s", len(docs)+1, t)
			}
			if len(buf) > 0 {
				docs = append(docs, document{data: buf, line: start})
				buf = nil
			}
			start = n + 1
			if err != nil {
				return docs, nil
			}
			continue
		}
		if err != nil {
			if len(buf) > 0 {
				docs = append(docs, document{data: buf, line: start})
			}
			return docs, nil
		}
		buf = append(buf, line...)
	}
}

// sameSplit fails t unless docStream (with a small and the real buffer)
// splits data as lineSplit does: documents, their lines, the error.
func sameSplit(t *testing.T, data []byte) {
	t.Helper()
	want, wantErr := lineSplit(data)
	for _, size := range []int{16, 37, 64 << 10} {
		ds := newDocStreamSize(bytes.NewReader(data), size)
		var got []document
		var err error
		for {
			var d document
			d, err = ds.next()
			if err != nil {
				break
			}
			got = append(got, d)
		}
		if errors.Is(err, io.EOF) {
			err = nil
		}
		if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
			t.Fatalf("buffer %d: split differs on %q:\n got %+v (%v)\nwant %+v (%v)", size, data, got, err, want, wantErr)
		}
	}
}

var splitCases = []string{
	"", "\n", "a: 1\n", "a: 1", "---\na: 1\n---\nb: 2\n", "a: 1\n---\n---\n\nb: 2", "--- # c\na\n--- x\nb\n",
	"a\r\nb\r\n---\r\nc\r\n", "a\rb\n", "x\r", "----\n", "---\t\n", "a\n--\n---\nb", "a:\n  - ---\n-- -\n---",
	"k: " + strings.Repeat("v", 100) + "\n---\n" + strings.Repeat("w", 70) + "\r\n",
}

// TestDocStreamMatchesLines: the bulk and line-by-line readings agree on
// the cases above, every fixture and a generated file, whatever the size
// of the reader's buffer.
func TestDocStreamMatchesLines(t *testing.T) {
	for _, c := range splitCases {
		sameSplit(t, []byte(c))
	}
	files, _ := filepath.Glob("../fixtures/drift/*.yaml")
	for _, f := range files {
		data, _ := os.ReadFile(f)
		sameSplit(t, data)
		sameSplit(t, bytes.ReplaceAll(data, []byte("\n"), []byte("\r\n")))
	}
}

// FuzzDocStream: whatever the bytes, the bulk reading splits them as the
// line-by-line one does.
func FuzzDocStream(f *testing.F) {
	for _, c := range splitCases {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, data string) {
		sameSplit(t, []byte(data))
	})
}
