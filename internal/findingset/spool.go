package findingset

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/sandprobe/sandprobe/result"
)

// DefaultSpoolMemory is how many bytes of encoded findings a Spool keeps in
// memory before it moves them to a temporary file.
const DefaultSpoolMemory = 8 << 20

// Spool holds the findings of a run too big to keep as structs: a drift
// over a hundred thousand pods has half a million findings, ~400 bytes
// each in memory. It keeps them encoded (~150 bytes each), in memory up to
// a bound and then in an unlinked temporary file, with an index of about
// forty bytes per target, so what stays in memory grows with the number of
// drifted objects only by that index. Not safe for concurrent use; Close
// releases the file.
type Spool struct {
	dir    string // "" is os.TempDir()
	memMax int

	mem  bytes.Buffer
	file *os.File
	w    *bufio.Writer
	size int64 // bytes written, in mem or the file

	n      int
	counts result.Counts
	width  int // NameWidth
	groups []Group
	segs   [][]segment // per group: runs of consecutive records
	index  map[string]int
	last   int // group of the last record, -1 before the first
	// marks are the offsets of every markEvery-th record, so a reader can
	// cut the spool into batches without decoding it (batches).
	marks []int64
	// attempts are kept as they are (a few per probe target): their
	// times must come back exactly as the probe wrote them.
	attempts map[int]*result.Attempt
	scratch  []byte
	// readBuf is the window of the spool EachIn read last, from winOff.
	readBuf []byte
	winOff  int64
	err     error
}

// markEvery is how many records apart the spool marks an offset: about 40
// KB of records, 8 bytes of index per 256 findings.
const markEvery = 256

// rawBatch is a run of whole records read from the spool, for a worker to
// decode (decode): records first to first+n-1.
type rawBatch struct {
	s        *Spool
	b        []byte
	first, n int
}

// each calls fn with the batch's findings in order; f is only valid
// during the call. Safe for concurrent use (the spool is not written while
// it is read).
func (r rawBatch) each(fn func(f *result.Finding) error) error {
	b := r.b
	var f result.Finding
	for i := 0; i < r.n; i++ {
		n, err := decodeFinding(b, &f)
		if err != nil {
			return fmt.Errorf("read spooled findings: %w", err)
		}
		b = b[n:]
		if len(r.s.attempts) > 0 { // drift has none: no lookup per finding
			f.Attempt = r.s.attempts[r.first+i]
		}
		if err := fn(&f); err != nil {
			return err
		}
	}
	return nil
}

// decode appends the batch's findings to dst.
func (r rawBatch) decode(dst []result.Finding) ([]result.Finding, error) {
	err := r.each(func(f *result.Finding) error { dst = append(dst, *f); return nil })
	return dst, err
}

// readRaw reads the bytes [off, end) of the spool: a slice of the memory
// when it is held there (read-only), else a new buffer.
func (s *Spool) readRaw(ra io.ReaderAt, off, end int64) ([]byte, error) {
	if s.file == nil {
		return s.mem.Bytes()[off:end], nil
	}
	b := make([]byte, end-off)
	if _, err := ra.ReadAt(b, off); err != nil && !(errors.Is(err, io.EOF) && end == s.size) {
		return nil, fmt.Errorf("read spooled findings: %w", err)
	}
	return b, nil
}

// batches calls fn with every record in order, in undecoded batches of
// markEvery records (the last may be shorter), for writers that decode
// them on every core.
func (s *Spool) batches(fn func(rawBatch) error) error {
	ra, err := s.reader()
	if err != nil {
		return err
	}
	for k, off := range s.marks {
		end, n := s.size, s.n-k*markEvery
		if k+1 < len(s.marks) {
			end, n = s.marks[k+1], markEvery
		}
		b, err := s.readRaw(ra, off, end)
		if err != nil {
			return err
		}
		if err := fn(rawBatch{s: s, b: b, first: k * markEvery, n: n}); err != nil {
			return err
		}
	}
	return nil
}

// groupBatch reads groups [g, h) as one batch (GroupRuns must hold).
func (s *Spool) groupBatch(ra io.ReaderAt, g, h int) (rawBatch, error) {
	first, last := s.segs[g][0], s.segs[h-1][0]
	b, err := s.readRaw(ra, first.off, last.end)
	return rawBatch{s: s, b: b, first: first.first, n: last.first + last.n - first.first}, err
}

// spoolWindow is how much of the spool EachIn reads at a time (a variable
// for the tests).
var spoolWindow = 1 << 20

type segment struct {
	off, end int64
	first    int // record number of the segment's first finding
	n        int
}

// NewSpool returns an empty spool that keeps up to memMax bytes of
// encoded findings in memory (0 for DefaultSpoolMemory; negative to
// spill at once) and the rest in a temporary file in dir ("" for
// os.TempDir()).
func NewSpool(dir string, memMax int) *Spool {
	if memMax == 0 {
		memMax = DefaultSpoolMemory
	}
	return &Spool{dir: dir, memMax: memMax, index: map[string]int{}, last: -1, attempts: map[int]*result.Attempt{}}
}

// Add appends findings. A write error is kept and returned by Err and by
// every read: a report must not silently lose findings.
func (s *Spool) Add(fs ...result.Finding) {
	for i := range fs {
		s.add(&fs[i])
	}
}

func (s *Spool) add(f *result.Finding) {
	if s.err != nil {
		return
	}
	g, ok := s.index[f.Target]
	if !ok {
		g = len(s.groups)
		s.index[f.Target] = g
		s.groups = append(s.groups, Group{Target: f.Target})
		s.segs = append(s.segs, nil)
	}
	s.groups[g].Counts.Add(f.Status)
	s.groups[g].Seconds += f.Seconds
	s.counts.Add(f.Status)
	s.width = max(s.width, nameWidth(f))
	if g != s.last {
		s.segs[g] = append(s.segs[g], segment{off: s.size, first: s.n})
		s.last = g
	}
	if f.Attempt != nil {
		s.attempts[s.n] = f.Attempt
	}
	if s.n%markEvery == 0 {
		s.marks = append(s.marks, s.size)
	}
	b := encodeFinding(s.scratch[:0], f)
	s.scratch = b
	s.n++
	s.write(b)
	seg := &s.segs[g][len(s.segs[g])-1]
	seg.n++
	seg.end = s.size
}

func (s *Spool) write(b []byte) {
	s.size += int64(len(b))
	if s.w != nil {
		if _, err := s.w.Write(b); err != nil {
			s.err = fmt.Errorf("spool findings: %w", err)
		}
		return
	}
	if s.mem.Len()+len(b) > s.mem.Cap() && s.memMax > 0 && s.memMax <= 64<<20 {
		// 256 KB, then straight to the bound: not a chain of doublings,
		// each a copy of everything so far.
		want := 256 << 10
		if s.mem.Cap() >= want {
			want = s.memMax + len(b)
		}
		s.mem.Grow(max(want-s.mem.Len(), len(b)))
	}
	s.mem.Write(b)
	if s.memMax >= 0 && s.mem.Len() <= s.memMax {
		return
	}
	f, err := os.CreateTemp(s.dir, "sandprobe-findings-*")
	if err != nil {
		// No room for a file (a read-only root): keep them in memory,
		// bigger but correct.
		s.memMax = math.MaxInt
		return
	}
	// Unlinked at once: nothing is left behind, whatever ends the process.
	os.Remove(f.Name())
	s.file, s.w = f, bufio.NewWriterSize(f, 256<<10)
	if _, err := s.w.Write(s.mem.Bytes()); err != nil {
		s.err = fmt.Errorf("spool findings: %w", err)
	}
	s.mem = bytes.Buffer{}
}

// Err is the first write error, if any.
func (s *Spool) Err() error { return s.err }

// Spilled reports whether the findings moved to a file.
func (s *Spool) Spilled() bool { return s.file != nil }

// Close releases the temporary file.
func (s *Spool) Close() error {
	if s.file == nil {
		return nil
	}
	err := s.file.Close()
	s.file, s.w = nil, nil
	return err
}

// Len is the number of findings spooled.
func (s *Spool) Len() int { return s.n }

// NameWidth is the longest Name of a finding, in bytes (the text report's column).
func (s *Spool) NameWidth() int { return s.width }

// Counts tallies them by status.
func (s *Spool) Counts() result.Counts { return s.counts }

// Groups is one Group per target, in the order first added.
func (s *Spool) Groups() []Group { return s.groups }

func (s *Spool) reader() (io.ReaderAt, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.w != nil {
		if err := s.w.Flush(); err != nil {
			s.err = fmt.Errorf("spool findings: %w", err)
			return nil, s.err
		}
		return s.file, nil
	}
	return bytes.NewReader(s.mem.Bytes()), nil
}

// Slice returns every finding as a slice (memory grows with them again:
// for a writer that needs them all at once).
func (s *Spool) Slice() ([]result.Finding, error) {
	out := make([]result.Finding, 0, s.n)
	err := s.Each(func(f *result.Finding) error { out = append(out, *f); return nil })
	return out, err
}

// Each calls fn with every finding in the order added (FindingSet.Each).
func (s *Spool) Each(fn func(*result.Finding) error) error {
	// One pass over everything, a batch of records at a time (batches),
	// each decoded where it lies.
	return s.batches(func(rb rawBatch) error { return rb.each(fn) })
}

// EachIn calls fn with every finding of Groups()[g], in the order added.
func (s *Spool) EachIn(g int, fn func(*result.Finding) error) error {
	ra, err := s.reader()
	if err != nil {
		return err
	}
	// A target's runs of records are read from a window of the spool
	// kept between calls: groups read in order (a report's blocks) read
	// the spool once, a window at a time, not a read per target.
	var f result.Finding
	for _, seg := range s.segs[g] {
		if seg.off < s.winOff || seg.end > s.winOff+int64(len(s.readBuf)) {
			size := max(int(seg.end-seg.off), spoolWindow)
			size = int(min(int64(size), s.size-seg.off))
			if cap(s.readBuf) < size {
				s.readBuf = make([]byte, size)
			}
			s.readBuf = s.readBuf[:size]
			if _, err := ra.ReadAt(s.readBuf, seg.off); err != nil && !(errors.Is(err, io.EOF) && seg.off+int64(size) == s.size) {
				s.readBuf = s.readBuf[:0]
				return fmt.Errorf("read spooled findings: %w", err)
			}
			s.winOff = seg.off
		}
		buf := s.readBuf[seg.off-s.winOff : seg.end-s.winOff]
		for i := 0; i < seg.n; i++ {
			n, err := decodeFinding(buf, &f)
			if err != nil {
				return fmt.Errorf("read spooled findings: %w", err)
			}
			buf = buf[n:]
			if len(s.attempts) > 0 {
				f.Attempt = s.attempts[seg.first+i]
			}
			if err := fn(&f); err != nil {
				return err
			}
		}
	}
	return nil
}

// The record: every string field as a uvarint length and its bytes, then
// Seconds as IEEE bits, Line as a varint, Judge as a uvarint of bits
// (judgeBits), and Affects as a uvarint count and its strings as the
// fields are. A new Finding field must be
// added to encodeFinding and decodeFinding
// (TestSpoolRoundTrip fills every field by reflection).
const recordStrings = 19

// controlField is Location.Control as a record string: "1" or "".
func controlField(control bool) string {
	if control {
		return "1"
	}
	return ""
}

// judgeBits is a Judge as record bits, fromJudgeBits the way back.
func judgeBits(j result.Judge) uint64 {
	var bits uint64
	if j.Unserved {
		bits |= 1
	}
	if j.FollowUp {
		bits |= 2
	}
	return bits
}

func fromJudgeBits(bits uint64) result.Judge {
	return result.Judge{Unserved: bits&1 != 0, FollowUp: bits&2 != 0}
}

func encodeFinding(b []byte, f *result.Finding) []byte {
	for _, s := range [recordStrings]string{f.Check, f.Target, f.Subject, f.Namespace, string(f.Status), f.Expected, f.Actual, f.Fix, f.Evidence, f.Class, f.File, f.Control, f.Deny, string(f.Severity), string(f.Role),
		f.Where.Namespace, f.Where.Node, f.Where.Stray, controlField(f.Where.Control)} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f.Seconds))
	b = binary.AppendVarint(b, int64(f.Line))
	b = binary.AppendUvarint(b, judgeBits(f.Judge))
	b = binary.AppendUvarint(b, uint64(len(f.Affects)))
	for _, s := range f.Affects {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// decodeAffects decodes the Affects list at the start of b and returns its
// length.
func decodeAffects(b []byte) ([]string, int, error) {
	n, i := binary.Uvarint(b)
	if i <= 0 || n > uint64(len(b)) {
		return nil, 0, io.ErrUnexpectedEOF
	}
	if n == 0 {
		return nil, i, nil
	}
	out := make([]string, 0, n)
	for range n {
		l, w := binary.Uvarint(b[i:])
		if w <= 0 || uint64(len(b)-i-w) < l {
			return nil, 0, io.ErrUnexpectedEOF
		}
		i += w
		out = append(out, string(b[i:i+int(l)]))
		i += int(l)
	}
	return out, i, nil
}

// decodeFinding decodes the record at the start of b into f and returns
// its length.
func decodeFinding(b []byte, f *result.Finding) (int, error) {
	// The strings are slices of one string per record: one allocation
	// per finding, not one per field (the writers read every finding).
	var at [recordStrings][2]int
	i := 0
	for k := range at {
		n, w := binary.Uvarint(b[i:])
		if w <= 0 || uint64(len(b)-i-w) < n {
			return 0, io.ErrUnexpectedEOF
		}
		i += w
		at[k] = [2]int{i, i + int(n)}
		i += int(n)
	}
	rec := string(b[:i])
	var fields [recordStrings]string
	for k, a := range at {
		fields[k] = rec[a[0]:a[1]]
	}
	if len(b)-i < 8 {
		return 0, io.ErrUnexpectedEOF
	}
	secs := math.Float64frombits(binary.LittleEndian.Uint64(b[i:]))
	i += 8
	line, w := binary.Varint(b[i:])
	if w <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	i += w
	judge, w := binary.Uvarint(b[i:])
	if w <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	i += w
	affects, w, err := decodeAffects(b[i:])
	if err != nil {
		return 0, err
	}
	*f = result.Finding{
		Check: fields[0], Target: fields[1], Subject: fields[2], Namespace: fields[3], Status: result.Status(fields[4]),
		Expected: fields[5], Actual: fields[6], Fix: fields[7], Evidence: fields[8], Class: fields[9],
		Seconds: secs, File: fields[10], Line: int(line), Control: fields[11], Deny: fields[12], Severity: result.Severity(fields[13]), Role: result.Role(fields[14]), Judge: fromJudgeBits(judge),
		Where:   result.Location{Namespace: fields[15], Node: fields[16], Stray: fields[17], Control: fields[18] != ""},
		Affects: affects,
	}
	return i + w, nil
}

// Batches calls fn with every finding in order, in batches of markEvery
// records still encoded (the last may be shorter), for writers that
// decode them on every core (Set.Batches).
func (s *Spool) Batches(fn func(Batch) error) error {
	return s.batches(func(rb rawBatch) error { return fn(Batch{First: rb.first, N: rb.n, raw: rb}) })
}

// GroupRuns reports whether every group's records are one run, the groups
// one after another in order (a drift's objects, each judged at once):
// then groups g..h-1 are read in one piece (GroupBatch).
func (s *Spool) GroupRuns() bool {
	next := 0
	for g := range s.groups {
		if len(s.segs[g]) != 1 || s.segs[g][0].first != next {
			return false
		}
		next += s.segs[g][0].n
	}
	return true
}

// GroupLen is the number of findings in group g.
func (s *Spool) GroupLen(g int) int {
	n := 0
	for _, seg := range s.segs[g] {
		n += seg.n
	}
	return n
}

// GroupBatch reads groups [g, h) as one batch; GroupRuns must hold.
func (s *Spool) GroupBatch(g, h int) (Batch, error) {
	ra, err := s.reader()
	if err != nil {
		return Batch{}, err
	}
	rb, err := s.groupBatch(ra, g, h)
	return Batch{First: rb.first, N: rb.n, raw: rb}, err
}
