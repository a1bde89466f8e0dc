package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/cache"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/result"
)

// cacheCommands are `sandprobe cache seal` and `sandprobe cache verify`:
// the package cache sealed at a trusted point (after the trusted step
// filled it) and verified before phases use it, and between them.
func cacheCommands() []command {
	return []command{
		{"seal", "hash every file of a package cache into a manifest kept outside it (atomically), at a trusted point", "DIR --manifest FILE", 1, (*app).cmdCacheSeal},
		{"verify", "name every file of a package cache changed, added or removed since its seal, and every content-addressed entry that does not match its key", "DIR [--manifest FILE [--manifest-sha256 HEX]] [flags]", 1, (*app).cmdCacheVerify},
	}
}

func (a *app) cmdCacheSeal(fs *pflag.FlagSet) runFunc {
	var manifest string
	fs.StringVar(&manifest, "manifest", "", "where to write the manifest: outside DIR, where neither the sandboxes nor the cache sync can write (required)")
	return func(ctx context.Context, args []string) int {
		const name = "sandprobe cache seal"
		dir := args[0]
		if err := checkCacheDir(dir); err != nil {
			fmt.Fprintf(a.stderr, "%s: DIR: %v\n", name, err)
			return report.ExitBadInput
		}
		if manifest == "" {
			fmt.Fprintf(a.stderr, "%s: --manifest is required: where the seal is kept, outside DIR\n", name)
			return report.ExitBadInput
		}
		if err := outsideDir(manifest, dir); err != nil {
			fmt.Fprintf(a.stderr, "%s: --manifest: %v\n", name, err)
			return report.ExitBadInput
		}
		start := time.Now()
		h := sha256.New()
		var sum cache.SealSummary
		err := report.WriteFileAtomic(manifest, func(w io.Writer) error {
			var err error
			sum, err = cache.Seal(ctx, dir, io.MultiWriter(w, h), cache.Options{})
			return err
		})
		if err != nil {
			fmt.Fprintf(a.stderr, "%s: %s; nothing written\n", name, oneLineErr(err))
			return report.ExitCouldNotRun
		}
		fmt.Fprintf(a.stdout, "sealed %s: %d entries, %d files (%d bytes) in %.1fs -> %s sha256:%s\n",
			dir, sum.Entries, sum.Files, sum.Bytes, time.Since(start).Seconds(), manifest, hex.EncodeToString(h.Sum(nil)))
		return report.ExitOK
	}
}

// cacheVerifyOptions are the flags of `sandprobe cache verify`.
type cacheVerifyOptions struct {
	manifest, manifestSHA string
	out                   outputs
	lf                    logFlags
}

func (a *app) cmdCacheVerify(fs *pflag.FlagSet) runFunc {
	var o cacheVerifyOptions
	fs.StringVar(&o.manifest, "manifest", "", "compare with this seal (written by cache seal), kept outside DIR; without it only the content-addressed stores are verified")
	fs.StringVar(&o.manifestSHA, "manifest-sha256", "", "the seal's SHA-256 as cache seal printed it, kept apart from the manifest: a manifest that does not match is refused")
	o.out.register(fs)
	o.lf.register(fs)
	return func(ctx context.Context, args []string) int {
		const name = "sandprobe cache verify"
		if err := o.out.check(); err != nil {
			fmt.Fprintf(a.stderr, "%s: %v\n", name, err)
			return report.ExitBadInput
		}
		dir := args[0]
		job, err := newCacheJob(dir, o.manifest, o.manifestSHA)
		if err != nil {
			fmt.Fprintf(a.stderr, "%s: %v\n", name, err)
			return report.ExitBadInput
		}
		start := time.Now()
		spool := report.NewSpool("", 0)
		defer spool.Close()
		notes, err := job.run(ctx, func(f result.Finding) { spool.Add(f) })
		if err != nil {
			fmt.Fprintf(a.stderr, "%s: %s\n", name, oneLineErr(err))
			return report.ExitCouldNotRun
		}
		if err := spool.Err(); err != nil {
			fmt.Fprintf(a.stderr, "%s: %v\n", name, err)
			return report.ExitCouldNotRun
		}
		run := report.Run{Backend: "cache", StartedAt: start.UTC(), Seconds: time.Since(start).Seconds(), Notes: notes, Spooled: spool}
		stampRun(&run)
		run.Phases = map[string]float64{"cache": run.Seconds}
		if err := o.out.write(ctx, a, run, o.lf.verbose); err != nil {
			fmt.Fprintf(a.stderr, "%s: %v\n", name, err)
			return report.ExitCouldNotRun
		}
		return run.ExitCode()
	}
}

// cacheJob is one cache directory to verify, its input checked: the
// manifest read whole once (and pinned by its SHA-256) before any verdict,
// so a damaged seal is bad input, never half a verdict.
type cacheJob struct {
	dir, manifest string
}

func checkCacheDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, unwrapPath(err))
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: not a directory", dir)
	}
	return nil
}

func newCacheJob(dir, manifest, manifestSHA string) (*cacheJob, error) {
	if err := checkCacheDir(dir); err != nil {
		return nil, fmt.Errorf("DIR: %w", err)
	}
	if manifestSHA != "" && manifest == "" {
		return nil, errors.New("--manifest-sha256: only with --manifest")
	}
	if manifest == "" {
		stores, err := cache.DetectStores(dir)
		if err != nil {
			return nil, fmt.Errorf("DIR: %w", err)
		}
		if len(stores) == 0 {
			return nil, fmt.Errorf("DIR: %s holds no content-addressed store this version knows (npm _cacache, NuGet packages, pip wheels, Go module cache) and no --manifest was given: nothing to verify", dir)
		}
		return &cacheJob{dir: dir}, nil
	}
	if err := outsideDir(manifest, dir); err != nil {
		return nil, fmt.Errorf("--manifest: %w", err)
	}
	f, err := os.Open(manifest)
	if err != nil {
		return nil, fmt.Errorf("--manifest: %s: %w", manifest, unwrapPath(err))
	}
	defer f.Close()
	h := sha256.New()
	if _, err := cache.CheckManifest(io.TeeReader(f, h)); err != nil {
		return nil, fmt.Errorf("--manifest: %s: %w", manifest, err)
	}
	if manifestSHA != "" {
		want := strings.TrimPrefix(strings.ToLower(manifestSHA), "sha256:")
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			return nil, fmt.Errorf("--manifest-sha256: %s has sha256:%s, want sha256:%s: the seal was altered since it was written", manifest, got, want)
		}
	}
	return &cacheJob{dir: dir, manifest: manifest}, nil
}

// run verifies the cache; notes say what was read.
func (j *cacheJob) run(ctx context.Context, sink cache.Sink) ([]string, error) {
	var r io.Reader
	if j.manifest != "" {
		f, err := os.Open(j.manifest)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	sum, err := cache.Verify(ctx, j.dir, r, sink, cache.Options{})
	if err != nil {
		return nil, fmt.Errorf("verify %s: %w", j.dir, err)
	}
	var notes []string
	if j.manifest == "" {
		notes = append(notes, fmt.Sprintf("%s: no --manifest: only content-addressed entries were verified; a file outside them, or an entry re-pointed at other content whose address is right, is seen only against a seal", j.dir))
	}
	for _, s := range sum.Stores {
		notes = append(notes, fmt.Sprintf("%s: %s store %s: %d entries re-hashed, %d problems", j.dir, s.Kind, s.Root, s.Entries, s.Bad))
	}
	return notes, nil
}
