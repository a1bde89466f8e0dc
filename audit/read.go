package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sandprobe/sandprobe/egresslog"
	"github.com/sandprobe/sandprobe/report"
)

// Source is one record to read: a file, or a reader (stdin, a pod's log).
type Source struct {
	Name   string
	Open   func() (io.ReadCloser, time.Time, error) // the stream and its modification time (zero: now)
	Format egresslog.Format
}

// FileSource reads a file ("-" is r, standard input).
func FileSource(path string, format egresslog.Format, stdin io.Reader) Source {
	return Source{Name: path, Format: format, Open: func() (io.ReadCloser, time.Time, error) {
		if path == "-" {
			return io.NopCloser(stdin), time.Time{}, nil
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, time.Time{}, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, time.Time{}, err
		}
		if fi.IsDir() {
			f.Close()
			return nil, time.Time{}, fmt.Errorf("%s is a directory", path)
		}
		return f, fi.ModTime(), nil
	}}
}

// Read scans every source into one tally. A source that cannot be opened
// or holds no record is an error naming it; the caller decides whether
// the others still count (egress-usage: no, exit 3).
func Read(ctx context.Context, sources []Source, workers int) (*Tally, []report.UsageSource, error) {
	var total *Tally
	var out []report.UsageSource
	var errs []error
	for _, s := range sources {
		us := report.UsageSource{Name: s.Name, Format: string(s.Format)}
		rc, mtime, err := s.Open()
		if err != nil {
			us.Error = err.Error()
			out = append(out, us)
			errs = append(errs, fmt.Errorf("%s: %w", s.Name, err))
			continue
		}
		tallies, st, err := egresslog.Scan(ctx, rc, egresslog.Options{Format: s.Format, Workers: workers, Reference: mtime}, NewTally)
		rc.Close()
		us.Format, us.Lines, us.Records, us.Skipped = string(st.Format), st.Lines, st.Records, st.Skipped
		if st.FirstTime != 0 {
			us.From, us.To = time.UnixMilli(st.FirstTime).UTC(), time.UnixMilli(st.LastTime).UTC()
		}
		for _, t := range tallies {
			if total == nil {
				total = t // the first worker's tally takes the others in
				continue
			}
			total.Merge(t)
		}
		if err != nil {
			us.Error = err.Error()
			if errors.Is(err, egresslog.ErrNoRecords) {
				err = fmt.Errorf("%s: %w", s.Name, err)
			} else {
				err = fmt.Errorf("read %s: %w", s.Name, err)
			}
			errs = append(errs, err)
		}
		out = append(out, us)
	}
	if total == nil {
		total = NewTally()
	}
	return total, out, errors.Join(errs...)
}
