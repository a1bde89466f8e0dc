package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/sandprobe/sandprobe/audit"
	"github.com/sandprobe/sandprobe/egresslog"
	"github.com/sandprobe/sandprobe/report"
)

// ProxyRecord is where the forward proxy writes down the attempts it
// decides: read around a probe for egress.audit-trail.
type ProxyRecord interface {
	// Name says where it is, for findings ("/var/log/squid/access.log",
	// "pod sandbox-system/egress-proxy").
	Name() string
	// Mark notes where the record stands before the probe.
	Mark(ctx context.Context) (RecordMark, error)
	// Since opens what was written after the mark, with the reference time
	// of formats that write no year. A record rotated or truncated since
	// is ErrRotated: what the run wrote may be in the part not read.
	Since(ctx context.Context, m RecordMark) (io.ReadCloser, time.Time, error)
}

// RecordMark is where a record stood.
type RecordMark struct {
	At       time.Time
	Offset   int64
	Identity string // the file's device and inode, the container's restart count
}

// ErrRotated is a record that was rotated, truncated or restarted during
// the run.
var ErrRotated = errors.New("rotated during the run")

// FileRecord is a proxy log on this machine (or mounted into it).
type FileRecord struct{ Path string }

// Name is the file's path.
func (f FileRecord) Name() string { return f.Path }

func fileIdentity(fi os.FileInfo) string {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("device %d inode %d", st.Dev, st.Ino)
	}
	return ""
}

// Mark records the file's size and identity.
func (f FileRecord) Mark(context.Context) (RecordMark, error) {
	fi, err := os.Stat(f.Path)
	if err != nil {
		return RecordMark{}, err
	}
	return RecordMark{At: time.Now(), Offset: fi.Size(), Identity: fileIdentity(fi)}, nil
}

// Since opens the file after the mark; another file at the path, or a
// shorter one, is ErrRotated.
func (f FileRecord) Since(_ context.Context, m RecordMark) (io.ReadCloser, time.Time, error) {
	fh, err := os.Open(f.Path)
	if err != nil {
		return nil, time.Time{}, err
	}
	fi, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, time.Time{}, err
	}
	if id := fileIdentity(fi); id != m.Identity {
		fh.Close()
		return nil, time.Time{}, fmt.Errorf("%s was %w (%s became %s)", f.Path, ErrRotated, m.Identity, id)
	}
	if fi.Size() < m.Offset {
		fh.Close()
		return nil, time.Time{}, fmt.Errorf("%s was %w (truncated from %d to %d bytes)", f.Path, ErrRotated, m.Offset, fi.Size())
	}
	if _, err := fh.Seek(m.Offset, io.SeekStart); err != nil {
		fh.Close()
		return nil, time.Time{}, err
	}
	return fh, fi.ModTime(), nil
}

// Trail reads a proxy's record around each probe run (egress.audit-trail).
type Trail struct {
	Record ProxyRecord
	Format egresslog.Format
	// Client is the probe's address as the proxy sees it, when known.
	Client string
	// Settle is how long to wait for a proxy that writes its record a
	// little after it answers (default 2 s).
	Settle time.Duration
}

// trailAttempts are the attempts a run made through the proxy.
func trailAttempts(run *report.Run, spec ProbeSpec) []audit.TrailAttempt {
	return audit.TrailAttempts(*run, spec.Policy.Spec.Egress.ProxyDenyStatuses())
}

// check finds the run's attempts in the record written since mark (or
// says why it could not: markErr) and adds the findings to run.
func (t *Trail) check(ctx context.Context, spec ProbeSpec, run *report.Run, mark RecordMark, markErr error, from time.Time) {
	attempts := trailAttempts(run, spec)
	if len(attempts) == 0 {
		return
	}
	start := time.Now()
	opt := audit.TrailOptions{Nonce: spec.Nonce, From: from, To: time.Now(), Client: t.Client, Source: t.Record.Name()}
	settle := t.Settle
	if settle == 0 {
		settle = 2 * time.Second
	}
	var fs []report.Finding
	for deadline := time.Now().Add(settle); ; {
		recs, err := t.read(ctx, attempts, mark, markErr)
		fs = audit.Trail(attempts, recs, opt, err)
		missing := false
		for _, f := range fs {
			missing = missing || (f.Status == report.Fail && f.Evidence == "")
		}
		if !missing || err != nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select { // a proxy that writes its record a moment after it answers
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	run.Findings = append(run.Findings, fs...)
	if run.Phases == nil {
		run.Phases = map[string]float64{}
	}
	run.Phases["audit-trail"] = time.Since(start).Seconds()
}

func (t *Trail) read(ctx context.Context, attempts []audit.TrailAttempt, mark RecordMark, markErr error) ([]audit.TrailRecord, error) {
	if markErr != nil {
		return nil, markErr
	}
	rc, ref, err := t.Record.Since(ctx, mark)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	sinks, _, err := egresslog.Scan(ctx, rc, egresslog.Options{Format: t.Format, Reference: ref}, audit.NewTrailSinks(attempts))
	if err != nil && !errors.Is(err, egresslog.ErrNoRecords) {
		return nil, err
	}
	return audit.TrailRecords(sinks), nil
}
