// Package egresslog reads what forward proxies and flow exporters wrote
// down about egress — Squid's access.log (native, common and combined
// formats), tinyproxy's log, an agentbox-style JSON audit, Envoy's access
// log in its default format and Hubble flow exports (JSON) — as streams.
// A file is cut into chunks at line ends and the chunks are parsed on
// every core; each worker hands its records to a sink of its own, so
// nothing is kept per line and memory stays flat whatever the log's size.
// What the records mean for a policy is package audit's business.
package egresslog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/sourcegraph/conc/pool"
)

// Format names a record format.
type Format string

// The formats Scan reads. FormatAuto sniffs the first lines.
const (
	FormatAuto          Format = "auto"
	FormatSquid         Format = "squid"          // Squid's native access.log (logformat squid), optionally with log_mime_hdrs or sandprobe's two extra fields
	FormatSquidCommon   Format = "squid-common"   // Squid's (or any) common log format, with Squid's trailing TAG:HIERARCHY
	FormatSquidCombined Format = "squid-combined" // common + "referer" "user-agent"
	FormatTinyproxy     Format = "tinyproxy"      // tinyproxy's log at LogLevel Connect or finer
	FormatJSON          Format = "json"           // the agentbox-style JSON audit (docs/egress.md)
	FormatEnvoy         Format = "envoy"          // Envoy's default access log format
	FormatHubble        Format = "hubble"         // Hubble flows as JSON (hubble observe -o json, the flow exporter)
)

// Formats lists every concrete format, for flags and errors.
var Formats = []Format{FormatSquid, FormatSquidCommon, FormatSquidCombined, FormatTinyproxy, FormatJSON, FormatEnvoy, FormatHubble}

// ParseFormat checks a format name; "" is auto.
func ParseFormat(s string) (Format, error) {
	if s == "" || s == string(FormatAuto) {
		return FormatAuto, nil
	}
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("unknown log format %q (want auto, squid, squid-common, squid-combined, tinyproxy, json, envoy or hubble)", s)
}

// Decision is what the proxy (or the network) did with an attempt.
type Decision uint8

// Decisions. Unknown is a record that says neither (a client that went
// away before the proxy decided, an ssl-bump step, a flow mid-connection).
const (
	Unknown Decision = iota
	Allowed
	Denied
)

func (d Decision) String() string {
	switch d {
	case Allowed:
		return "allowed"
	case Denied:
		return "denied"
	}
	return "unknown"
}

// Record is one attempt as a record wrote it down. Its byte slices point
// into the scanner's buffer and are valid only during Sink.Add: a sink
// that keeps one copies it.
type Record struct {
	Time     int64 // Unix milliseconds; 0 when the record has no time
	Client   []byte
	Sandbox  []byte // the sandbox, where the record names it (Hubble's namespace/pod, the JSON audit's sandbox)
	Method   []byte
	Host     []byte // the destination as written: a name or an IP literal, no brackets
	Port     int    // 0 when the record does not say
	Decision Decision
	Status   int   // the HTTP status the proxy answered; 0 when none
	BytesOut int64 // from the sandbox towards the destination; -1 when the record does not say
	BytesIn  int64 // towards the sandbox; -1 when the record does not say
	Agent    []byte
	User     []byte // the proxy user (Proxy-Authorization), where recorded
	Line     []byte // the whole line, for evidence
	LineNo   int64  // 1-based line number in its source
}

// reset empties r for the next line, field by field: assigning a whole
// Record{} to one that lives on the heap cost a sixth of the parse.
func (r *Record) reset(line []byte, no int64) {
	r.Time, r.Port, r.Decision, r.Status = 0, 0, Unknown, 0
	r.Client, r.Sandbox, r.Method, r.Host, r.Agent, r.User = nil, nil, nil, nil, nil, nil
	r.BytesOut, r.BytesIn = -1, -1
	r.Line, r.LineNo = line, no
}

// Sink receives the records of one worker. Scan never calls one sink
// from two goroutines.
type Sink interface {
	Add(r *Record)
}

// Options tune a scan.
type Options struct {
	Format Format
	// Workers is how many goroutines parse (0: GOMAXPROCS).
	Workers int
	// ChunkSize is how many bytes a worker takes at once (0: 1 MiB). A
	// line longer than this is skipped as too long.
	ChunkSize int
	// Reference dates the records of formats that write no year
	// (tinyproxy): each takes the year that puts it at most a day after
	// Reference (the file's modification time). Zero: now.
	Reference time.Time
	// Location is the time zone of formats that write local time without
	// an offset (tinyproxy). Nil: UTC.
	Location *time.Location
}

// Stats says what a scan read.
type Stats struct {
	Format  Format
	Lines   int64 // non-empty lines
	Records int64 // lines (or line groups) that made a record
	Skipped int64 // lines that are not records of the format
	// FirstSkipped is the first skipped line's number and why, for the
	// one-line error a file of the wrong format gets.
	FirstSkipped     int64
	FirstSkipReason  string
	FirstTime        int64 // earliest record time (Unix ms), 0 when none
	LastTime         int64
	Bytes            int64
	firstSkippedSeen bool
}

func (s *Stats) skip(lineNo int64, why string) {
	s.Skipped++
	if !s.firstSkippedSeen || lineNo < s.FirstSkipped {
		s.FirstSkipped, s.FirstSkipReason, s.firstSkippedSeen = lineNo, why, true
	}
}

func (s *Stats) seen(t int64) {
	if t == 0 {
		return
	}
	if s.FirstTime == 0 || t < s.FirstTime {
		s.FirstTime = t
	}
	if t > s.LastTime {
		s.LastTime = t
	}
}

func (s *Stats) merge(o Stats) {
	s.Lines += o.Lines
	s.Records += o.Records
	if o.firstSkippedSeen {
		s.skip(o.FirstSkipped, o.FirstSkipReason)
		s.Skipped += o.Skipped - 1
	}
	s.seen(o.FirstTime)
	s.seen(o.LastTime)
}

// ErrNoRecords is a source in which not one line was a record of its
// format: the wrong file, the wrong format, or a proxy whose logging is
// off.
var ErrNoRecords = errors.New("no records")

// chunk is a piece of the input that ends at a line end.
type chunk struct {
	seq       int
	firstLine int64
	buf       []byte
	data      []byte
}

// lineParser turns one line into a record; ok false with a reason skips
// it, without one ignores it (a line of the format that is no attempt).
type lineParser func(line []byte, r *Record, p *parseState) (ok bool, why string)

// parseState is what one worker keeps between lines (scratch space).
type parseState struct {
	ref  time.Time
	loc  *time.Location
	json jsonScratch
}

// Scan reads r as records of opt.Format and hands each to a sink: one
// per worker, made by newSink, returned for the caller to merge. A source
// that holds lines but no record is ErrNoRecords.
func Scan[S Sink](ctx context.Context, r io.Reader, opt Options, newSink func() S) ([]S, Stats, error) {
	workers := opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	size := opt.ChunkSize
	if size <= 0 {
		size = 1 << 20
	}
	ref := opt.Reference
	if ref.IsZero() {
		ref = time.Now()
	}
	loc := opt.Location
	if loc == nil {
		loc = time.UTC
	}
	rd := &chunker{r: r, size: size, step: min(size, fillSize), free: make(chan *chunk, 2*workers+2)}
	first, err := rd.next()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, Stats{}, err
	}
	format := opt.Format
	if format == "" || format == FormatAuto {
		if first == nil {
			return nil, Stats{Format: FormatAuto}, fmt.Errorf("%w: the source is empty", ErrNoRecords)
		}
		if format = Detect(first.data); format == "" {
			return nil, Stats{Format: FormatAuto}, fmt.Errorf("%w: the first lines are none of the known formats (%s); give the format", ErrNoRecords, formatList())
		}
	}
	var st Stats
	var sinks []S
	if format == FormatTinyproxy {
		sink := newSink()
		st, err = scanOrdered(ctx, rd, first, workers, tinyproxyEvents(ref, loc), sink)
		sinks = []S{sink}
	} else {
		sinks, st, err = scanParallel(ctx, rd, first, workers, parserFor(format), ref, loc, newSink)
	}
	st.Format = format
	st.Bytes = rd.read
	if err != nil {
		return sinks, st, err
	}
	if st.Records == 0 {
		if st.Lines == 0 {
			return sinks, st, fmt.Errorf("%w: the source is empty", ErrNoRecords)
		}
		return sinks, st, fmt.Errorf("%w: none of %d lines is a %s record (line %d: %s)", ErrNoRecords, st.Lines, format, st.FirstSkipped, st.FirstSkipReason)
	}
	return sinks, st, nil
}

func formatList() string {
	var b bytes.Buffer
	for i, f := range Formats {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(f))
	}
	return b.String()
}

func parserFor(f Format) lineParser {
	switch f {
	case FormatSquid:
		return parseSquidNative
	case FormatSquidCommon, FormatSquidCombined:
		return parseCommon
	case FormatJSON:
		return parseJSONAudit
	case FormatEnvoy:
		return parseEnvoy
	case FormatHubble:
		return parseHubble
	}
	return func([]byte, *Record, *parseState) (bool, string) { return false, "no parser" }
}

// scanParallel parses chunks on every worker, each into its own sink.
// Each worker reads its next chunk itself, in turn (chunks): no goroutine
// stands between the file and them, whose every hand-off would wait on
// the scheduler of a loaded machine.
func scanParallel[S Sink](ctx context.Context, rd *chunker, first *chunk, workers int, parse lineParser, ref time.Time, loc *time.Location, newSink func() S) ([]S, Stats, error) {
	sinks := make([]S, workers)
	stats := make([]Stats, workers)
	src := &chunks{ctx: ctx, rd: rd, first: first}
	p := pool.New().WithMaxGoroutines(workers)
	for w := 0; w < workers; w++ {
		sinks[w] = newSink()
		p.Go(func() {
			ps := &parseState{ref: ref, loc: loc}
			// The worker's own counts, copied out once at the end: the
			// workers' entries of stats share a cache line, and counting
			// there a line at a time made the cores fight over it.
			var own Stats
			st, sink := &own, sinks[w]
			defer func() { stats[w] = own }()
			rec := new(Record)
			// The lines one by one as eachLine gives them, without its
			// closure: this loop is the scan's hot path.
			for c := src.next(); c != nil; c = src.next() {
				data, no := c.data, c.firstLine-1
				for len(data) > 0 {
					no++
					line := data
					if i := bytes.IndexByte(data, '\n'); i >= 0 {
						line, data = data[:i], data[i+1:]
					} else {
						data = nil
					}
					if n := len(line); n > 0 && line[n-1] == '\r' {
						line = line[:n-1]
					}
					if len(line) == 0 {
						continue
					}
					st.Lines++
					rec.reset(line, no)
					if ok, why := parse(line, rec, ps); !ok {
						if why != "" { // "" is a line of the format that is no attempt
							st.skip(no, why)
						}
						continue
					}
					st.Records++
					st.seen(rec.Time)
					sink.Add(rec)
				}
				rd.release(c)
			}
		})
	}
	p.Wait()
	var st Stats
	for _, s := range stats {
		st.merge(s)
	}
	return sinks, st, src.err
}

// chunks gives the workers of scanParallel the first chunk, then every
// next one, one worker at a time.
type chunks struct {
	mu    sync.Mutex
	ctx   context.Context
	rd    *chunker
	first *chunk
	done  bool
	err   error // why the chunks ended early
}

// next is the next chunk, or nil at the end, after an error or when the
// context is done.
func (s *chunks) next() *chunk {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil
	}
	if c := s.first; c != nil {
		s.first = nil
		return c
	}
	if err := s.ctx.Err(); err != nil {
		s.done, s.err = true, err
		return nil
	}
	c, err := s.rd.next()
	if err != nil {
		s.done = true
		if !errors.Is(err, io.EOF) {
			s.err = err
		}
		return nil
	}
	return c
}

// feed sends the first chunk and every next one to work.
func feed(ctx context.Context, rd *chunker, first *chunk, work chan<- *chunk) error {
	c := first
	for c != nil {
		select {
		case work <- c:
		case <-ctx.Done():
			return ctx.Err()
		}
		var err error
		c, err = rd.next()
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
	}
	return nil
}

// eachLine calls fn for every non-empty line of a chunk, with its number.
func eachLine(c *chunk, st *Stats, fn func(line []byte, no int64)) {
	data, no := c.data, c.firstLine
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		var line []byte
		if i < 0 {
			line, data = data, nil
		} else {
			line, data = data[:i], data[i+1:]
		}
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if len(line) > 0 {
			st.Lines++
			fn(line, no)
		}
		no++
	}
}

// fillSize is how much a chunk holds as a rule: the worker that reads it
// parses it while it is still in its core's cache, and of a chunk's buffer
// (size, the longest line) only the pages a line that long needs are ever
// touched, where every fresh page is a fault that costs tens of
// microseconds on a virtual machine.
const fillSize = 256 << 10

// chunker cuts a reader into chunks that end at a line end. Buffers come
// back through release, so at most a few are ever allocated.
type chunker struct {
	r     io.Reader
	size  int
	step  int // how much a chunk reads as a rule: min(size, fillSize)
	carry []byte
	seq   int
	line  int64
	read  int64
	eof   bool
	skip  bool // inside a line longer than a chunk: drop up to its end
	// free holds the buffers workers gave back: a few are ever made, and
	// none is left for the collector (sync.Pool's would be, at every GC).
	free chan *chunk
}

func (c *chunker) release(ch *chunk) {
	select {
	case c.free <- ch:
	default:
	}
}

func (c *chunker) get() *chunk {
	select {
	case ch := <-c.free:
		return ch
	default:
		return &chunk{buf: make([]byte, c.size)}
	}
}

func (c *chunker) next() (*chunk, error) {
	for {
		if c.eof && len(c.carry) == 0 {
			return nil, io.EOF
		}
		ch := c.get()
		n, err := c.fill(ch.buf)
		if err != nil {
			c.release(ch)
			return nil, err
		}
		if n == 0 && c.eof {
			c.release(ch)
			return nil, io.EOF
		}
		data := ch.buf[:n]
		if c.skip {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				c.release(ch)
				if c.eof {
					c.skip = false
					return nil, io.EOF
				}
				continue
			}
			c.skip = false
			data = data[i+1:]
		}
		end := len(data)
		if !c.eof {
			i := bytes.LastIndexByte(data, '\n')
			if i < 0 {
				// One line longer than a chunk: drop it (counted as a line
				// by nobody; the next chunk starts after it).
				c.skip = true
				c.line++
				c.release(ch)
				continue
			}
			end = i + 1
			c.carry = append(c.carry[:0], data[end:]...)
		}
		ch.data = data[:end]
		ch.seq = c.seq
		ch.firstLine = c.line + 1
		c.seq++
		c.line += int64(bytes.Count(ch.data, []byte{'\n'}))
		return ch, nil
	}
}

// fill puts the carried part line into buf, then reads about fillSize
// bytes more, and on until a line ends or buf is full; it returns how
// many bytes buf holds.
func (c *chunker) fill(buf []byte) (int, error) {
	n := copy(buf, c.carry)
	c.carry = c.carry[:0]
	searched := n // the carried part holds no line end
	want := min(len(buf), n+c.step)
	for !c.eof && n < len(buf) {
		if n >= want {
			if bytes.IndexByte(buf[searched:n], '\n') >= 0 {
				break
			}
			searched, want = n, min(len(buf), n+c.step)
		}
		m, err := c.r.Read(buf[n:want])
		n += m
		c.read += int64(m)
		if errors.Is(err, io.EOF) {
			c.eof = true
		} else if err != nil {
			return n, err
		}
	}
	return n, nil
}
