package cache

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sourcegraph/conc/stream"

	"github.com/sandprobe/sandprobe/result"
)

// ManifestSchema is the first line of a seal manifest.
const ManifestSchema = "sandprobe.dev/cache-seal/v1"

// A manifest is text, one entry a line, in the order the walk visits them
// (depth first, names sorted byte-wise):
//
//	sandprobe.dev/cache-seal/v1
//	# sealed 2026-12-02T06:00:00Z
//	f <sha256> <size> <mode> "<path>"
//	l <sha256 of the target> 0 <mode> "<path>"
//	d - 0 <mode> "<path>"
//	end <entries> <sha256 of every entry line>
//
// Lines, not JSON: a verify reads the manifest one line at a time beside
// the walk (a merge of two sorted streams), so neither is ever held whole.
// The end line catches a manifest cut short.

// entry is one file, directory or link of a cache, relative to its root.
type entry struct {
	typ    byte // 'f' file, 'd' directory, 'l' link, 'o' other (socket, fifo, device)
	digest string
	size   int64
	mode   fs.FileMode // permission and special bits
	path   string      // slash-separated, relative to the root
}

func (e entry) line() string {
	d := e.digest
	if d == "" {
		d = "-"
	}
	return fmt.Sprintf("%c %s %d %04o %s", e.typ, d, e.size, uint32(e.mode), strconv.Quote(e.path))
}

func parseEntry(line string) (entry, error) {
	f := strings.SplitN(line, " ", 5)
	if len(f) != 5 || len(f[0]) != 1 || !strings.ContainsRune("fdlo", rune(f[0][0])) {
		return entry{}, fmt.Errorf("not a manifest entry")
	}
	size, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return entry{}, fmt.Errorf("size: %w", err)
	}
	mode, err := strconv.ParseUint(f[3], 8, 32)
	if err != nil {
		return entry{}, fmt.Errorf("mode: %w", err)
	}
	p, err := strconv.Unquote(f[4])
	if err != nil {
		return entry{}, fmt.Errorf("path: %w", err)
	}
	e := entry{typ: f[0][0], digest: f[1], size: size, mode: fs.FileMode(mode), path: p}
	if e.digest == "-" {
		e.digest = ""
	}
	return e, nil
}

// pathLess orders paths as the walk visits them: component by component,
// a directory before what it holds ("a" < "a/b" < "a.b").
func pathLess(a, b string) bool {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		ca, cb := a[i], b[i]
		if ca == cb {
			continue
		}
		if ca == '/' {
			return true
		}
		if cb == '/' {
			return false
		}
		return ca < cb
	}
	return len(a) < len(b)
}

// walkTask is one entry of the walk: its hashing runs on the pool, its
// callback in walk order.
type walkFn func(e entry, err error)

// walkHashed walks root depth first in name order, never following a
// link, hashes every regular file on the pool (sha256) and calls fn with
// each entry in walk order. A directory it cannot read, or a file it
// cannot hash, reaches fn with the error.
func walkHashed(ctx context.Context, root string, opt Options, fn walkFn) error {
	s := stream.New().WithMaxGoroutines(opt.workers())
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if p == root {
			if err != nil {
				return err
			}
			return nil
		}
		rel, rerr := filepath.Rel(root, p)
		if rerr != nil {
			return rerr
		}
		rel = filepath.ToSlash(rel)
		if err != nil {
			e := entry{typ: 'd', path: rel}
			s.Go(func() stream.Callback { return func() { fn(e, err) } })
			return fs.SkipDir
		}
		s.Go(func() stream.Callback {
			e, err := hashEntry(p, rel, d)
			return func() { fn(e, err) }
		})
		return nil
	})
	s.Wait()
	return err
}

// hashEntry describes one walked path; files are hashed whole.
func hashEntry(p, rel string, d fs.DirEntry) (entry, error) {
	e := entry{path: rel}
	fi, err := d.Info()
	if err != nil {
		e.typ = 'o'
		return e, err
	}
	e.mode = fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	switch fi.Mode().Type() {
	case 0:
		e.typ = 'f'
		h := sha256.New()
		n, err := hashFile(p, h)
		if err != nil {
			return e, err
		}
		e.size, e.digest = n, hex.EncodeToString(h.Sum(nil))
	case fs.ModeDir:
		e.typ = 'd'
	case fs.ModeSymlink:
		e.typ = 'l'
		target, err := os.Readlink(p)
		if err != nil {
			return e, err
		}
		sum := sha256.Sum256([]byte(target))
		e.digest = hex.EncodeToString(sum[:])
	default:
		e.typ = 'o'
	}
	return e, nil
}

// SealSummary says what a seal wrote.
type SealSummary struct {
	Entries, Files int
	Bytes          int64
	Unreadable     []string // paths that could not be read: the seal is refused
}

// Seal walks dir and writes its manifest to w. A path it cannot read
// makes it fail: a seal that could not see everything vouches for nothing.
func Seal(ctx context.Context, dir string, w io.Writer, opt Options) (SealSummary, error) {
	var sum SealSummary
	if fi, err := os.Stat(dir); err != nil {
		return sum, err
	} else if !fi.IsDir() {
		return sum, fmt.Errorf("%s is not a directory", dir)
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	fmt.Fprintf(bw, "%s\n# sealed %s\n", ManifestSchema, time.Now().UTC().Format(time.RFC3339))
	all := sha256.New()
	var werr error
	err := walkHashed(ctx, dir, opt, func(e entry, err error) {
		if err != nil {
			sum.Unreadable = append(sum.Unreadable, fmt.Sprintf("%s (%v)", e.path, unwrap(err)))
			return
		}
		line := e.line() + "\n"
		all.Write([]byte(line))
		if _, err := bw.WriteString(line); err != nil && werr == nil {
			werr = err
		}
		sum.Entries++
		if e.typ == 'f' {
			sum.Files++
			sum.Bytes += e.size
		}
	})
	if err != nil {
		return sum, err
	}
	if len(sum.Unreadable) > 0 {
		return sum, fmt.Errorf("cannot read %s and %d more: a seal must see the whole cache", sum.Unreadable[0], len(sum.Unreadable)-1)
	}
	fmt.Fprintf(bw, "end %d %s\n", sum.Entries, hex.EncodeToString(all.Sum(nil)))
	if werr != nil {
		return sum, werr
	}
	return sum, bw.Flush()
}

// manifestReader reads a manifest one entry at a time, checking order and
// the end line.
type manifestReader struct {
	sc       *bufio.Scanner
	line     int
	n        int
	all      hash.Hash
	last     string
	done     bool
	SealedAt string
}

func newManifestReader(r io.Reader) (*manifestReader, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	m := &manifestReader{sc: sc, all: sha256.New()}
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, err
		}
		return nil, errors.New("empty: not a cache manifest")
	}
	if sc.Text() != ManifestSchema {
		return nil, fmt.Errorf("line 1: want %q, got %q: not a manifest `sandprobe cache seal` wrote", ManifestSchema, truncate(sc.Text(), 60))
	}
	m.line = 1
	return m, nil
}

// next returns the next entry, or ok false at the end line.
func (m *manifestReader) next() (entry, bool, error) {
	for m.sc.Scan() {
		m.line++
		text := m.sc.Text()
		if strings.HasPrefix(text, "# sealed ") {
			m.SealedAt = strings.TrimPrefix(text, "# sealed ")
			continue
		}
		if strings.HasPrefix(text, "#") {
			continue
		}
		if rest, ok := strings.CutPrefix(text, "end "); ok {
			n, sum, _ := strings.Cut(rest, " ")
			if n != strconv.Itoa(m.n) || sum != hex.EncodeToString(m.all.Sum(nil)) {
				return entry{}, false, fmt.Errorf("line %d: the end line does not match the %d entries before it: the manifest was altered", m.line, m.n)
			}
			m.done = true
			return entry{}, false, nil
		}
		e, err := parseEntry(text)
		if err != nil {
			return entry{}, false, fmt.Errorf("line %d: %w", m.line, err)
		}
		if m.n > 0 && !pathLess(m.last, e.path) {
			return entry{}, false, fmt.Errorf("line %d: %q is out of order: not a manifest `sandprobe cache seal` wrote", m.line, truncate(e.path, 80))
		}
		m.all.Write([]byte(text + "\n"))
		m.n++
		m.last = e.path
		return e, true, nil
	}
	if err := m.sc.Err(); err != nil {
		return entry{}, false, err
	}
	return entry{}, false, fmt.Errorf("after line %d: no end line: the manifest was cut short", m.line)
}

// CheckManifest reads a whole manifest and reports the first problem: a
// command checks its input before it starts verifying.
func CheckManifest(r io.Reader) (entries int, err error) {
	m, err := newManifestReader(r)
	if err != nil {
		return 0, err
	}
	for {
		_, ok, err := m.next()
		if err != nil {
			return m.n, err
		}
		if !ok {
			return m.n, nil
		}
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func unwrap(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

const sealedExp = "as sealed"

// VerifySealed compares dir with its manifest, streaming both: every
// entry changed (content, type, mode, link target), added or removed since
// the seal is a finding, and one pass says how many entries matched.
func VerifySealed(ctx context.Context, dir string, manifest io.Reader, sink Sink, opt Options) (Summary, error) {
	var sum Summary
	m, err := newManifestReader(manifest)
	if err != nil {
		return sum, err
	}
	target := Target(dir)
	subject := func(rel string) string { return filepath.Join(dir, filepath.FromSlash(rel)) }
	const fix = "find who wrote the cache (only the trusted fill step may), restore it from the sealed source, and seal again"
	var (
		cur      entry
		have     bool
		merr     error
		matched  int
		problems int
	)
	advance := func() {
		if merr != nil {
			have = false
			return
		}
		cur, have, merr = m.next()
	}
	advance()
	removed := func(e entry) {
		problems++
		sink(failure(CheckSealed, target, subject(e.path), sealedExp, "removed since the seal ("+typeName(e.typ)+")", "", fix))
	}
	walkErr := walkHashed(ctx, dir, opt, func(e entry, err error) {
		for have && pathLess(cur.path, e.path) {
			removed(cur)
			advance()
		}
		if err != nil {
			problems++
			sink(couldNot(CheckSealed, target, subject(e.path), unwrap(err)))
			if have && cur.path == e.path {
				advance()
			}
			return
		}
		sum.count(e)
		if !have || cur.path != e.path {
			problems++
			ev := ""
			if e.typ == 'f' {
				ev = fmt.Sprintf("%d bytes, mode %04o", e.size, uint32(e.mode))
			}
			sink(failure(CheckSealed, target, subject(e.path), sealedExp, "added since the seal ("+typeName(e.typ)+")", ev, fix))
			return
		}
		if what := compareEntry(cur, e); what != "" {
			problems++
			sink(failure(CheckSealed, target, subject(e.path), sealedExp, what, "", fix))
		} else {
			matched++
		}
		advance()
	})
	if walkErr != nil {
		return sum, walkErr
	}
	for have {
		removed(cur)
		advance()
	}
	if merr != nil {
		return sum, merr
	}
	if problems == 0 {
		sink(sealedPass(target, dir, sum, matched, m.SealedAt))
	}
	return sum, nil
}

// count adds a walked entry to the summary's tallies.
func (s *Summary) count(e entry) {
	switch e.typ {
	case 'f':
		s.Files++
		s.Bytes += e.size
	case 'd':
		s.Dirs++
	case 'l':
		s.Links++
	}
}

// sealedPass is the pass of a cache that matched its seal entry for entry,
// with what was walked and re-hashed as its proof.
func sealedPass(target, dir string, sum Summary, matched int, sealedAt string) result.Finding {
	ev := fmt.Sprintf("%d files (%d bytes), %d directories, %d links walked and re-hashed (sha256)", sum.Files, sum.Bytes, sum.Dirs, sum.Links)
	if sealedAt != "" {
		ev += "; sealed " + sealedAt
	}
	return passFinding(CheckSealed, target, dir, sealedExp, fmt.Sprintf("all %d entries as sealed", matched), ev)
}

// compareEntry says how a walked entry differs from its sealed self.
func compareEntry(sealed, now entry) string {
	switch {
	case sealed.typ != now.typ:
		return fmt.Sprintf("was a %s, now a %s", typeName(sealed.typ), typeName(now.typ))
	case sealed.typ == 'f' && (sealed.digest != now.digest || sealed.size != now.size):
		if sealed.size != now.size {
			return fmt.Sprintf("content changed since the seal (%d → %d bytes)", sealed.size, now.size)
		}
		return fmt.Sprintf("content changed since the seal (same size, %d bytes, another sha256)", now.size)
	case sealed.typ == 'l' && sealed.digest != now.digest:
		return "link target changed since the seal"
	case sealed.mode != now.mode:
		return fmt.Sprintf("mode changed since the seal (%04o → %04o)", uint32(sealed.mode), uint32(now.mode))
	}
	return ""
}

func typeName(t byte) string {
	switch t {
	case 'f':
		return "file"
	case 'd':
		return "directory"
	case 'l':
		return "symlink"
	}
	return "special file"
}
