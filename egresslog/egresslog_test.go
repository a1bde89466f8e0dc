package egresslog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// rec is a record copied out of the scanner, for comparison.
type rec struct {
	Client, Sandbox, Method, Host string
	Port                          int
	Decision                      Decision
	Status                        int
	Out, In                       int64
	Agent                         string
	Time                          int64
}

func (r rec) String() string {
	return fmt.Sprintf("%s %s %s %s:%d %s %d out=%d in=%d ua=%q", r.Client, r.Sandbox, r.Method, r.Host, r.Port, r.Decision, r.Status, r.Out, r.In, r.Agent)
}

type collect struct{ got []rec }

func (c *collect) Add(r *Record) { c.got = append(c.got, recOf(r)) }

// recOf copies a record out of the scanner's buffer.
func recOf(r *Record) rec {
	return rec{string(r.Client), string(r.Sandbox), string(r.Method), string(r.Host), r.Port, r.Decision, r.Status, r.BytesOut, r.BytesIn, string(r.Agent), r.Time}
}

func scanFile(t *testing.T, path string, f Format) ([]rec, Stats) {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	ref := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	sinks, st, err := Scan(context.Background(), fh, Options{Format: f, Reference: ref, Workers: 2, ChunkSize: 1024}, func() *collect { return &collect{} })
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []rec
	for _, s := range sinks {
		out = append(out, s.got...)
	}
	return out, st
}

// The files under testdata/ are real: Squid 5.7 and tinyproxy 1.11.1 on
// this machine, on loopback, asked by curl for an allowed host (GET and
// CONNECT) and a filtered one; except envoy.log, hubble.jsonl and
// audit.jsonl, written from the formats' documentation.
func TestFormats(t *testing.T) {
	ms := func(s string) int64 { tm, _ := time.Parse(time.RFC3339Nano, s); return tm.UnixMilli() }
	tests := []struct {
		file   string
		format Format
		want   []string
		time0  int64
	}{
		{"squid-native.log", FormatSquid, []string{
			`127.0.0.1  GET localhost:39180 allowed 200 out=-1 in=741 ua=""`,
			`127.0.0.1  GET 127.0.0.2:39180 denied 403 out=-1 in=3441 ua=""`,
			`127.0.0.1  CONNECT localhost:39180 allowed 200 out=-1 in=654 ua=""`,
			`127.0.0.1  CONNECT blocked.example:39180 denied 403 out=-1 in=3435 ua=""`,
		}, 1796189515155 - 7},
		{"squid-sandprobe.log", FormatSquid, []string{
			`127.0.0.1  GET localhost:39180 allowed 200 out=139 in=741 ua="sandprobe nonce=abc"`,
			`127.0.0.1  GET 127.0.0.2:39180 denied 403 out=132 in=3441 ua="curl/7.88.1"`,
			`127.0.0.1  CONNECT localhost:39180 allowed 200 out=262 in=654 ua="sandprobe/1 nonce=def"`,
			`127.0.0.1  CONNECT blocked.example:39180 denied 403 out=126 in=3435 ua="curl/7.88.1"`,
		}, 0},
		{"squid-common.log", FormatSquidCommon, []string{
			`127.0.0.1  GET localhost:39180 allowed 200 out=-1 in=741 ua=""`,
			`127.0.0.1  GET 127.0.0.2:39180 denied 403 out=-1 in=3441 ua=""`,
			`127.0.0.1  CONNECT localhost:39180 allowed 200 out=-1 in=654 ua=""`,
			`127.0.0.1  CONNECT blocked.example:39180 denied 403 out=-1 in=3435 ua=""`,
		}, ms("2026-12-02T05:31:55Z")},
		{"squid-combined.log", FormatSquidCombined, []string{
			`127.0.0.1  GET localhost:39180 allowed 200 out=-1 in=741 ua="sandprobe nonce=abc"`,
			`127.0.0.1  GET 127.0.0.2:39180 denied 403 out=-1 in=3441 ua="curl/7.88.1"`,
			`127.0.0.1  CONNECT localhost:39180 allowed 200 out=-1 in=654 ua="sandprobe/1 nonce=def"`,
			`127.0.0.1  CONNECT blocked.example:39180 denied 403 out=-1 in=3435 ua="curl/7.88.1"`,
		}, 0},
		{"tinyproxy.log", FormatTinyproxy, []string{
			`127.0.0.1  GET localhost:39180 allowed 0 out=-1 in=-1 ua=""`,
			`127.0.0.1  GET 127.0.0.2:39180 denied 403 out=-1 in=-1 ua=""`,
			`127.0.0.1  CONNECT localhost:39180 allowed 0 out=-1 in=-1 ua=""`,
			`127.0.0.1  CONNECT blocked.example:39180 denied 403 out=-1 in=-1 ua=""`,
		}, ms("2026-12-02T05:31:40.175Z")},
		{"audit.jsonl", FormatJSON, []string{
			`10.0.1.5 sandboxes/agent-7 CONNECT api.github.com:443 allowed 200 out=1200 in=5600 ua="git/2.43"`,
			`10.0.1.5 sandboxes/agent-7 CONNECT pastebin.com:443 denied 403 out=0 in=0 ua="curl/8.5.0"`,
			`10.0.1.6   registry.npmjs.org:443 denied 0 out=-1 in=-1 ua=""`,
			`   deb.debian.org:80 allowed 0 out=-1 in=-1 ua="sandprobe/1 nonce=abc"`,
		}, ms("2026-12-02T05:00:00Z")}, // 06:00+01:00
		{"envoy.log", FormatEnvoy, []string{
			`10.0.1.5  CONNECT api.github.com:443 allowed 200 out=1543 in=6120 ua="sandprobe/1 nonce=abc"`,
			`10.0.1.5  CONNECT pastebin.com:443 denied 403 out=0 in=19 ua="curl/8.5.0"`,
			`  GET example.com:80 denied 404 out=0 in=0 ua="python-requests/2.31"`,
		}, ms("2026-12-02T05:31:40.168Z")},
		{"hubble.jsonl", FormatHubble, []string{
			`10.0.1.5 sandboxes/agent-7  api.github.com:443 allowed 0 out=-1 in=-1 ua=""`,
			`10.0.1.5 sandboxes/agent-7  104.20.1.2:443 denied 0 out=-1 in=-1 ua=""`,
		}, ms("2026-12-02T05:31:40.168Z")},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", tc.file)
			data, _ := os.ReadFile(path)
			if got := Detect(data); got != tc.format {
				t.Errorf("Detect = %q, want %q", got, tc.format)
			}
			for _, f := range []Format{FormatAuto, tc.format} {
				got, st := scanFile(t, path, f)
				sortRecs(got)
				var gotS []string
				for _, r := range got {
					gotS = append(gotS, r.String())
				}
				want := append([]string(nil), tc.want...)
				if strings.Join(gotS, "\n") != strings.Join(sortStrings(want), "\n") {
					t.Errorf("%s records:\n%s\nwant:\n%s", f, strings.Join(gotS, "\n"), strings.Join(sortStrings(want), "\n"))
				}
				if st.Skipped != 0 {
					t.Errorf("%s: %d lines skipped (first: line %d: %s)", f, st.Skipped, st.FirstSkipped, st.FirstSkipReason)
				}
				if tc.time0 != 0 && st.FirstTime != tc.time0 {
					t.Errorf("first time %d (%s), want %d (%s)", st.FirstTime, time.UnixMilli(st.FirstTime).UTC(), tc.time0, time.UnixMilli(tc.time0).UTC())
				}
			}
		})
	}
}

func sortStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

func sortRecs(rs []rec) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].String() < rs[j-1].String(); j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

// A file of another kind, or a proxy with its logging off, holds no
// record: that is an error naming the first line and why, never an
// empty (and so vacuous) answer.
func TestNoRecords(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		format     Format
		want       string
	}{
		{"empty", "", FormatSquid, "the source is empty"},
		{"wrong format", "hello world\nanother line\n", FormatSquid, "none of 2 lines is a squid record (line 1: no Unix time in the first field)"},
		{"unknown", "hello world\n", FormatAuto, "none of the known formats"},
		{"tinyproxy start-up only", "NOTICE    Dec 02 05:31:39.186 [20461]: Initializing tinyproxy ...\n", FormatTinyproxy, "none of 1 lines is a tinyproxy record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Scan(context.Background(), strings.NewReader(tc.data), Options{Format: tc.format}, func() *collect { return &collect{} })
			if !errors.Is(err, ErrNoRecords) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrNoRecords with %q", err, tc.want)
			}
		})
	}
}

// Chunks end at line ends whatever the chunk size, and a line longer than
// a chunk is dropped without taking its neighbours with it.
func TestChunking(t *testing.T) {
	var b bytes.Buffer
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&b, "1796189515.%03d %6d 10.0.0.%d TCP_TUNNEL/200 %d CONNECT host%d.example.com:443 - HIER_DIRECT/1.2.3.4 -\n", i%1000, i, i%250, i, i%37)
		if i == 500 {
			b.WriteString(strings.Repeat("x", 5000) + "\n")
		}
	}
	for _, size := range []int{128, 333, 4096, 1 << 20} {
		for _, workers := range []int{1, 3} {
			sinks, st, err := Scan(context.Background(), bytes.NewReader(b.Bytes()), Options{Format: FormatSquid, ChunkSize: size, Workers: workers}, func() *collect { return &collect{} })
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, s := range sinks {
				for _, r := range s.got {
					if !strings.HasPrefix(r.Host, "host") || r.Port != 443 {
						t.Fatalf("size %d: torn record %v", size, r)
					}
				}
				n += len(s.got)
			}
			if n != 1000 || st.Records != 1000 {
				t.Errorf("size %d workers %d: %d records (stats %d), want 1000", size, workers, n, st.Records)
			}
		}
	}
}

// tinyproxy's lines of concurrent attempts interleave: each outcome goes
// to the open request for its host, the client to its descriptor's.
func TestTinyproxyInterleaved(t *testing.T) {
	log := `CONNECT   Dec 02 05:31:40.100 [1]: Connect (file descriptor 5): 10.99.1.2
CONNECT   Dec 02 05:31:40.101 [1]: Connect (file descriptor 7): 10.99.1.3
CONNECT   Dec 02 05:31:40.102 [1]: Request (file descriptor 7): CONNECT blocked.lab.test:443 HTTP/1.1
CONNECT   Dec 02 05:31:40.103 [1]: Request (file descriptor 5): CONNECT api.lab.test:443 HTTP/1.1
CONNECT   Dec 02 05:31:40.104 [1]: Connect (file descriptor 9): 10.99.1.4
CONNECT   Dec 02 05:31:40.105 [1]: Request (file descriptor 9): CONNECT api.lab.test:22 HTTP/1.1
INFO      Dec 02 05:31:40.106 [1]: Refused CONNECT method on port 22
CONNECT   Dec 02 05:31:40.107 [1]: Established connection to host "api.lab.test" using file descriptor 8.
NOTICE    Dec 02 05:31:40.108 [1]: Proxying refused on filtered domain "blocked.lab.test"
CONNECT   Dec 31 23:59:59.000 [1]: Connect (file descriptor 5): 10.99.1.2
CONNECT   Dec 31 23:59:59.001 [1]: Request (file descriptor 5): GET http://git.lab.test/ HTTP/1.1
`
	ref := time.Date(2027, 1, 1, 0, 0, 5, 0, time.UTC)
	sinks, st, err := Scan(context.Background(), strings.NewReader(log), Options{Format: FormatTinyproxy, Reference: ref, ChunkSize: 128, Workers: 2}, func() *collect { return &collect{} })
	if err != nil {
		t.Fatal(err)
	}
	got := sinks[0].got
	want := []string{
		`10.99.1.4  CONNECT api.lab.test:22 denied 403 out=-1 in=-1 ua=""`,
		`10.99.1.2  CONNECT api.lab.test:443 allowed 0 out=-1 in=-1 ua=""`,
		`10.99.1.3  CONNECT blocked.lab.test:443 denied 403 out=-1 in=-1 ua=""`,
		`10.99.1.2  GET git.lab.test:80 unknown 0 out=-1 in=-1 ua=""`,
	}
	var gotS []string
	for _, r := range got {
		gotS = append(gotS, r.String())
	}
	if strings.Join(gotS, "\n") != strings.Join(want, "\n") {
		t.Errorf("records:\n%s\nwant:\n%s", strings.Join(gotS, "\n"), strings.Join(want, "\n"))
	}
	// Dec 02 is in 2026 (the reference is 2027-01-01), Dec 31 too.
	if y := time.UnixMilli(st.FirstTime).UTC().Year(); y != 2026 {
		t.Errorf("first record in %d, want 2026", y)
	}
	if last := time.UnixMilli(st.LastTime).UTC(); last != time.Date(2026, 12, 31, 23, 59, 59, 1e6, time.UTC) {
		t.Errorf("last record at %s", last)
	}
}

func TestTimeParsers(t *testing.T) {
	for _, s := range []string{"2026-12-02T05:31:40Z", "2026-12-02T05:31:40.168Z", "2026-12-02T06:31:40.1+01:00", "2024-02-29T23:59:59.999-08:00", "1970-01-01T00:00:00Z", "2026-12-02T05:31:40.168123456Z"} {
		want, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := isoMillis([]byte(s))
		if !ok || got != want.UnixMilli() {
			t.Errorf("isoMillis(%s) = %d, %v; want %d", s, got, ok, want.UnixMilli())
		}
	}
	for _, s := range []string{"02/Dec/2026:05:31:55 +0000", "29/Feb/2024:23:59:59 -0800", "01/Jan/1970:00:00:00 +0130"} {
		want, _ := time.Parse("02/Jan/2006:15:04:05 -0700", s)
		got, ok := clfTime([]byte(s))
		if !ok || got != want.UnixMilli() {
			t.Errorf("clfTime(%s) = %d, %v; want %d", s, got, ok, want.UnixMilli())
		}
	}
}

func TestHostPort(t *testing.T) {
	for _, tc := range []struct {
		in      string
		connect bool
		host    string
		port    int
		ok      bool
	}{
		{"api.github.com:443", true, "api.github.com", 443, true},
		{"[2001:db8::1]:443", true, "2001:db8::1", 443, true},
		{"http://example.com/x?y", false, "example.com", 80, true},
		{"https://user:pw@Example.COM:8443/", false, "Example.COM", 8443, true},
		{"http://[fd00::1]/", false, "fd00::1", 80, true},
		{"error:transaction-end-before-headers", false, "", 0, false},
		{"host:99999", true, "", 0, false},
	} {
		h, p, ok := urlHostPort([]byte(tc.in), tc.connect)
		if string(h) != tc.host || p != tc.port || ok != tc.ok {
			t.Errorf("urlHostPort(%q) = %q %d %v", tc.in, h, p, ok)
		}
	}
}

// failAfter reads r, then fails with err.
type failAfter struct {
	r   io.Reader
	err error
}

func (f *failAfter) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if errors.Is(err, io.EOF) {
		return n, f.err
	}
	return n, err
}

// A source that fails mid-way (a pod log cut off, a disk error) is an
// error, not a short record taken as whole; a cancelled scan says so;
// both on one worker and on several that read their chunks in turn.
func TestScanReadErrorAndCancel(t *testing.T) {
	data := squidBenchLines(5000)
	broken := errors.New("connection reset")
	for _, workers := range []int{1, 3} {
		_, st, err := Scan(context.Background(), &failAfter{bytes.NewReader(data), broken}, Options{Format: FormatSquid, Workers: workers, ChunkSize: 4096}, func() *countSink { return &countSink{} })
		if !errors.Is(err, broken) {
			t.Errorf("workers %d: read error: got %v", workers, err)
		}
		if st.Records == 0 || st.Records > 5000 {
			t.Errorf("workers %d: read error: %d records", workers, st.Records)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, _, err = Scan(ctx, bytes.NewReader(data), Options{Format: FormatSquid, Workers: workers, ChunkSize: 4096}, func() *countSink { return &countSink{} })
		if !errors.Is(err, context.Canceled) {
			t.Errorf("workers %d: cancelled: got %v", workers, err)
		}
		sinks, st, err := Scan(context.Background(), bytes.NewReader(data), Options{Format: FormatSquid, Workers: workers, ChunkSize: 4096}, func() *countSink { return &countSink{} })
		var n int64
		for _, s := range sinks {
			n += s.n
		}
		if err != nil || st.Records != 5000 || n != 5000 || st.Lines != 5000 {
			t.Errorf("workers %d: whole: %v, %d records, %d in the sinks, %d lines", workers, err, st.Records, n, st.Lines)
		}
	}
}

// lineSink keeps each record's line number and line.
type lineSink struct{ lines map[int64]string }

func (s *lineSink) Add(r *Record) { s.lines[r.LineNo] = string(r.Line) }

// Whatever the chunk size, the reader's pace and the workers, every line
// is read once, whole, with its number: lines that straddle chunk ends,
// CRLF line ends (a CR at a chunk's end too), blank lines, a file smaller
// than one chunk and a last line without a line end.
func TestChunkBoundaries(t *testing.T) {
	var b bytes.Buffer
	want := map[int64]string{}
	no := int64(0)
	for i := 0; i < 300; i++ {
		line := fmt.Sprintf("1796189515.%03d %6d 10.0.0.%d TCP_TUNNEL/200 %d CONNECT host%d.example.com:443 - HIER_DIRECT/1.2.3.4 - %d \"ua/%d\"", i%1000, i, i%250, i, i%37, i*7, i)
		no++
		want[no] = line
		b.WriteString(line)
		switch {
		case i == 299: // the last line ends without a line end
		case i%3 == 0:
			b.WriteString("\r\n")
		default:
			b.WriteString("\n")
		}
		if i%50 == 7 {
			b.WriteString("\n") // a blank line keeps its number
			no++
		}
	}
	readers := map[string]func([]byte) io.Reader{
		"whole": func(d []byte) io.Reader { return bytes.NewReader(d) },
		"half":  func(d []byte) io.Reader { return iotest.HalfReader(bytes.NewReader(d)) },
		"bytes": func(d []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(d)) },
		"eof":   func(d []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(d)) },
	}
	for name, reader := range readers {
		for _, size := range []int{200, 333, 4096, 1 << 20} {
			for _, workers := range []int{1, 3} {
				sinks, st, err := Scan(context.Background(), reader(b.Bytes()), Options{Format: FormatSquid, ChunkSize: size, Workers: workers}, func() *lineSink { return &lineSink{map[int64]string{}} })
				if err != nil {
					t.Fatalf("%s size %d workers %d: %v", name, size, workers, err)
				}
				got := map[int64]string{}
				for _, s := range sinks {
					for n, l := range s.lines {
						got[n] = l
					}
				}
				if st.Lines != 300 || st.Records != 300 || st.Skipped != 0 || !maps.Equal(got, want) {
					t.Errorf("%s size %d workers %d: %d lines, %d records, %d skipped; %d of 300 lines read as written", name, size, workers, st.Lines, st.Records, st.Skipped, countSame(got, want))
				}
			}
		}
	}
}

func countSame(got, want map[int64]string) int {
	n := 0
	for k, v := range want {
		if got[k] == v {
			n++
		}
	}
	return n
}

// A chunk reads about step bytes, however large its buffer (the longest
// line): it ends at the first line end past step, and the chunks put
// together are the input, numbered from the first line.
func TestChunkerReadsAStep(t *testing.T) {
	data := squidBenchLines(2000)
	rd := &chunker{r: bytes.NewReader(data), size: 1 << 20, step: 4096, free: make(chan *chunk, 4)}
	var all []byte
	line := int64(1)
	for {
		c, err := rd.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(c.data) > 4096+300 || c.data[len(c.data)-1] != '\n' {
			t.Fatalf("chunk %d: %d bytes, want about 4096 ending at a line end", c.seq, len(c.data))
		}
		if c.firstLine != line {
			t.Fatalf("chunk %d: first line %d, want %d", c.seq, c.firstLine, line)
		}
		line += int64(bytes.Count(c.data, []byte{'\n'}))
		all = append(all, c.data...)
		rd.release(c)
	}
	if !bytes.Equal(all, data) {
		t.Errorf("the chunks hold %d bytes, the input %d", len(all), len(data))
	}
}
