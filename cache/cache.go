// Package cache owns the package caches a node keeps between the phases of
// an attempt: sealing a cache directory at a trusted point (a manifest of
// every entry's hash), verifying it against that seal (every file changed,
// added or removed since), and re-hashing the content-addressed stores in
// it — npm's _cacache, the NuGet global packages folder, pip's wheel
// cache, Go's module cache — against their own keys, with no seal needed.
//
// Everything streams: files are walked in a fixed order and hashed on
// every core through an ordered pipeline (conc's stream), so memory stays
// flat whatever the cache's size and the findings come out in path order.
// Findings name files and what is wrong with them, never their content.
// The probe does not import this package; it runs outside the sandbox
// (`sandprobe cache`, `sandprobe drift --cache`).
package cache

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/sandprobe/sandprobe/result"
)

// Check IDs of the findings this package makes.
const (
	// CheckSealed compares a cache with the manifest sealed at a trusted point.
	CheckSealed = "cache.sealed"
	// CheckIntegrity re-hashes content-addressed entries against their keys.
	CheckIntegrity = "cache.integrity"
)

// Options tune a run.
type Options struct {
	// Workers is how many files are hashed at once (default: every core).
	Workers int
}

func (o Options) workers() int {
	if o.Workers > 0 {
		return o.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// Sink receives findings, in order, from one goroutine at a time.
type Sink func(result.Finding)

// Summary says what a run read.
type Summary struct {
	Files, Dirs, Links int
	Bytes              int64
	// Stores are the content-addressed stores found and re-hashed.
	Stores []StoreSummary
}

// StoreSummary is one content-addressed store a verify recognised.
type StoreSummary struct {
	Kind    string // "npm", "nuget", "pip", "go"
	Root    string
	Entries int // entries re-hashed against their keys
	Bad     int
}

// bufPool holds the copy buffers every hashing worker uses.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// copyBuf copies r into w through a pooled buffer.
func copyBuf(w io.Writer, r io.Reader) (int64, error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	return io.CopyBuffer(w, r, *bp)
}

// hashFile streams a file through h and returns the bytes read.
func hashFile(path string, h io.Writer) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return copyBuf(h, f)
}

// finding helpers: each names a file of the cache and says what is wrong.
func failure(check, target, subject, expected, actual, evidence, fix string) result.Finding {
	return result.Finding{Check: check, Target: target, Subject: subject, Status: result.Fail,
		Expected: expected, Actual: actual, Evidence: evidence, Fix: fix}
}

func couldNot(check, target, subject string, err error) result.Finding {
	return result.Finding{Check: check, Target: target, Subject: subject, Status: result.Error,
		Actual: fmt.Sprintf("could not read: %v; what it holds is unchecked", err),
		Fix:    "let sandprobe read the whole cache (run it as the cache's owner or root)"}
}

// Target names a cache directory in reports.
func Target(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	return "cache" + abs
}

// Verify re-hashes every content-addressed store it recognises under dir
// (npm, NuGet, pip, Go) and, with a manifest, compares dir with its seal.
// It reports each problem to sink and, per store and for the seal, one
// pass that says what was verified. An error means it could not run at
// all (dir unreadable, a manifest that is not one); a file it could not
// read is an error finding.
func Verify(ctx context.Context, dir string, manifest io.Reader, sink Sink, opt Options) (Summary, error) {
	var sum Summary
	if fi, err := os.Stat(dir); err != nil {
		return sum, err
	} else if !fi.IsDir() {
		return sum, fmt.Errorf("%s is not a directory", dir)
	}
	if manifest != nil {
		s, err := VerifySealed(ctx, dir, manifest, sink, opt)
		if err != nil {
			return sum, err
		}
		sum = s
	}
	stores, err := DetectStores(dir)
	if err != nil {
		return sum, err
	}
	for _, st := range stores {
		ss, err := st.verify(ctx, sink, opt)
		if err != nil {
			return sum, err
		}
		sum.Stores = append(sum.Stores, ss)
	}
	return sum, nil
}

// store is one content-addressed store under a cache directory.
type store struct {
	kind, root, target string
	verify             func(ctx context.Context, sink Sink, opt Options) (StoreSummary, error)
}

// DetectStores finds the content-addressed stores in dir: dir itself or
// its children (a cache root holding several, ~/.npm beside ~/.nuget).
func DetectStores(dir string) ([]store, error) {
	target := Target(dir)
	var out []store
	candidates := []string{dir}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() {
			candidates = append(candidates, filepath.Join(dir, e.Name()))
		}
	}
	seen := map[string]bool{}
	for _, c := range candidates {
		for _, d := range detectors {
			root, ok := d.detect(c)
			if !ok || seen[root] {
				continue
			}
			seen[root] = true
			out = append(out, d.make(root, target))
		}
	}
	return out, nil
}

type detector struct {
	detect func(dir string) (string, bool)
	make   func(root, target string) store
}

var detectors = []detector{
	{detectNpm, newNpmStore},
	{detectNuGet, newNuGetStore},
	{detectPip, newPipStore},
	{detectGo, newGoStore},
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// passFinding is a store's (or the seal's) one pass: what was verified.
func passFinding(check, target, subject, expected, actual, evidence string) result.Finding {
	return result.Finding{Check: check, Target: target, Subject: subject, Status: result.Pass,
		Expected: expected, Actual: actual, Evidence: evidence}
}

// Check describes one of this package's checks for `sandprobe checks`,
// the docs and SARIF.
type Check struct {
	ID, Proves, Fix string
	Severity        result.Severity
}

// Checks are the checks `sandprobe cache verify` (and drift --cache) run.
func Checks() []Check {
	return []Check{
		{CheckSealed, "every file of the cache directory is as it was sealed (cache seal, at a trusted point): nothing changed (content, mode, type, link target), added or removed since; the manifest is read beside the walk and refused if out of order, cut short or altered",
			"find who wrote the cache (only the trusted fill step may), restore it from the sealed source, and seal again", result.High},
		{CheckIntegrity, "every entry of each content-addressed store in the cache matches its own key, with no seal: npm _cacache content against its address and index lines against their SHA-1, bucket and content; NuGet .nupkg against .nupkg.sha512 and metadata and every extracted file against the package; pip wheel members against RECORD; Go module zips against .ziphash and extracted trees against the zip",
			"remove the damaged entry and refill it from its registry in the trusted step; then seal the cache", result.High},
	}
}
