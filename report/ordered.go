package report

import (
	"io"
	"runtime"
	"sync"

	"github.com/sourcegraph/conc/stream"

	"github.com/sandprobe/sandprobe/internal/findingset"
)

// orderedOut formats a report's pieces on every core and writes them in
// the order they were given. A report is written after the scan, alone,
// and formatting its findings was most of the writing: the reader hands
// out batches of findings in order, each is formatted by whichever core
// is free, and the bytes are written in order. The first error stops the
// writing (later pieces are formatted, not written).
type orderedOut struct {
	st  *stream.Stream
	w   io.Writer
	err error
}

// outBufs are the pieces' buffers, reused once written.
var outBufs = sync.Pool{New: func() any { return new([]byte) }}

func newOrderedOut(w io.Writer) *orderedOut {
	return &orderedOut{st: stream.New().WithMaxGoroutines(runtime.GOMAXPROCS(0)), w: w}
}

// Go formats one piece: format appends it to x and returns it. It runs on
// another goroutine: what it reads must not change until Wait.
func (o *orderedOut) Go(format func(x []byte) ([]byte, error)) {
	o.st.Go(func() stream.Callback {
		buf := outBufs.Get().(*[]byte)
		x, err := format((*buf)[:0])
		return func() {
			if o.err == nil {
				if err != nil {
					o.err = err
				} else {
					_, o.err = o.w.Write(x)
				}
			}
			*buf = x
			outBufs.Put(buf)
		}
	})
}

// Wait waits for every piece and returns the first error.
func (o *orderedOut) Wait() error {
	o.st.Wait()
	return o.err
}

// batchFindings is about how many findings one piece formats.
const batchFindings = 512

// eachBatch reads the set's findings in order, in batches, and runs work
// with each on every core (a spool's batches decoded there too); the
// callbacks work returns run in order, one at a time. The first error
// (reading, or a callback's) is returned.
func eachBatch(set FindingSet, work func(first int, fs []Finding) (func() error, error)) error {
	st := stream.New().WithMaxGoroutines(runtime.GOMAXPROCS(0))
	var cerr error
	submit := func(first int, get func() ([]Finding, error)) {
		st.Go(func() stream.Callback {
			fs, err := get()
			var cb func() error
			if err == nil {
				cb, err = work(first, fs)
			}
			return func() {
				if cerr == nil {
					if err != nil {
						cerr = err
					} else {
						cerr = cb()
					}
				}
			}
		})
	}
	err := set.Batches(func(b findingset.Batch) error {
		submit(b.First, b.Findings)
		return nil
	})
	st.Wait()
	if err == nil {
		err = cerr
	}
	return err
}

// writeBatches writes every finding of set, in order, formatted on every
// core in batches (eachBatch): format appends the findings fs, the first
// of them number first, to x.
func writeBatches(w io.Writer, set FindingSet, format func(x []byte, first int, fs []Finding) ([]byte, error)) error {
	return eachBatch(set, func(first int, fs []Finding) (func() error, error) {
		buf := outBufs.Get().(*[]byte)
		x, err := format((*buf)[:0], first, fs)
		return func() error {
			_, err := w.Write(x)
			*buf = x
			outBufs.Put(buf)
			return err
		}, err
	})
}

// writeGroups writes the set's groups in order, formatted on every core
// in batches of whole groups: format appends group g, whose findings are
// fs (in the order added), to x.
func writeGroups(w io.Writer, set FindingSet, format func(x []byte, g int, fs []Finding) ([]byte, error)) error {
	if sp, ok := set.(*Spool); ok && sp.GroupRuns() {
		return writeGroupRuns(w, sp, format)
	}
	o := newOrderedOut(w)
	type group struct{ g, from, to int }
	var groups []group
	fs := make([]Finding, 0, batchFindings)
	flush := func() {
		gs, batch := groups, fs
		groups, fs = nil, make([]Finding, 0, batchFindings)
		o.Go(func(x []byte) ([]byte, error) {
			var err error
			for _, g := range gs {
				if x, err = format(x, g.g, batch[g.from:g.to]); err != nil {
					break
				}
			}
			return x, err
		})
	}
	var err error
	for g := range set.Groups() {
		from := len(fs)
		if err = set.EachIn(g, func(f *Finding) error { fs = append(fs, *f); return nil }); err != nil {
			break
		}
		groups = append(groups, group{g, from, len(fs)})
		if len(fs) >= batchFindings {
			flush()
		}
	}
	if err == nil && len(groups) > 0 {
		flush()
	}
	if werr := o.Wait(); err == nil {
		err = werr
	}
	return err
}

// writeGroupRuns is writeGroups for a spool whose groups are runs one
// after another: a batch of groups is read in one piece and decoded on the
// worker that formats it.
func writeGroupRuns(w io.Writer, sp *Spool, format func(x []byte, g int, fs []Finding) ([]byte, error)) error {
	o := newOrderedOut(w)
	groups := len(sp.Groups())
	var err error
	for g := 0; g < groups && err == nil; {
		h, n := g, 0
		for h < groups && n < batchFindings {
			n += sp.GroupLen(h)
			h++
		}
		var rb findingset.Batch
		if rb, err = sp.GroupBatch(g, h); err != nil {
			break
		}
		from := g
		o.Go(func(x []byte) ([]byte, error) {
			fs, err := rb.Findings()
			if err != nil {
				return x, err
			}
			at := 0
			for gi := from; gi < h; gi++ {
				k := sp.GroupLen(gi)
				if x, err = format(x, gi, fs[at:at+k]); err != nil {
					return x, err
				}
				at += k
			}
			return x, nil
		})
		g = h
	}
	if werr := o.Wait(); err == nil {
		err = werr
	}
	return err
}
