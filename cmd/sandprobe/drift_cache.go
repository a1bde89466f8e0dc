package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/cache"
	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/result"
)

// driftCacheFlags are drift's package-cache sources: the node's caches
// checked from outside in the same run as the sandboxes, as `cache verify`
// checks them.
type driftCacheFlags struct {
	dirs, manifests stringList
}

const groupCache = "Package cache flags"

func (f *driftCacheFlags) register(fs *pflag.FlagSet) {
	group(fs, groupCache, func() {
		fs.Var(&f.dirs, "cache", "also verify this package cache directory, as `cache verify` does: its content-addressed stores (npm, NuGet, pip, Go) and, with --cache-manifest, its seal; repeatable")
		fs.Var(&f.manifests, "cache-manifest", "the seal (cache seal's manifest) of the --cache given in the same position; give one for every --cache or none")
	})
}

// jobs checks the flags and every manifest before anything runs.
func (f *driftCacheFlags) jobs() ([]*cacheJob, error) {
	if len(f.manifests) > 0 && len(f.manifests) != len(f.dirs) {
		return nil, fmt.Errorf("--cache-manifest: %d given for %d --cache: give one for every --cache, in the same order, or none", len(f.manifests), len(f.dirs))
	}
	var out []*cacheJob
	for i, dir := range f.dirs {
		manifest := ""
		if len(f.manifests) > 0 {
			manifest = f.manifests[i]
		}
		j, err := newCacheJob(dir, manifest, "")
		if err != nil {
			return nil, fmt.Errorf("--cache %s: %w", dir, err)
		}
		out = append(out, j)
	}
	return out, nil
}

// driftCaches verifies each cache into the run's spool; a cache that could
// not be verified is an error finding naming it, never a pass.
func driftCaches(ctx context.Context, jobs []*cacheJob, spool *report.Spool, col *drift.Collector) error {
	for _, j := range jobs {
		notes, err := j.run(ctx, func(f result.Finding) { spool.Add(f) })
		if err != nil {
			col.AddError(cache.Target(j.dir), "cache", err)
			continue
		}
		for _, n := range notes {
			col.Note("%s", n)
		}
	}
	return ctx.Err()
}
