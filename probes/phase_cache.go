package probes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/result"
)

const cacheReadOnlyExp = "a read-only mount (writes refused with EROFS), with no writable mount under it"

// checkCacheReadOnly proves each declared package-cache mount refuses
// writes because it is mounted read-only, not merely because this uid
// lacks permission (EACCES): a cache a phase can write poisons every later
// phase on the node, and the sync every node. The kernel's answers count
// as for the root: statfs's ST_RDONLY, the mount table's "ro", EROFS for a
// write; and no read-write mount may sit anywhere under the cache.
func checkCacheReadOnly(_ context.Context, env *Env) []result.Finding {
	mounts := visibleMounts(readMounts(os.DirFS("/")))
	var out []result.Finding
	for _, dir := range env.Policy.Spec.Phases.Caches {
		out = append(out, cacheReadOnly(dir, env.Nonce, mounts))
	}
	return out
}

func cacheReadOnly(dir, nonce string, mounts []mountEntry) result.Finding {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail(dir, cacheReadOnlyExp, "does not exist: the cache is not mounted here", "")
	case err != nil:
		return errorf(dir, "stat %s: %s", dir, errnoName(err))
	case !fi.IsDir():
		return fail(dir, cacheReadOnlyExp, "not a directory", "")
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return errorf(dir, "statfs %s: %s", dir, errnoName(err))
	}
	rdonly := st.Flags&stRdonly != 0
	own := mountOf(dir, mounts)
	evidence := fmt.Sprintf("statfs flags=%#x (ST_RDONLY %s)", st.Flags, onOff(rdonly))
	if own.point != "" {
		evidence += fmt.Sprintf("; mountinfo: %s %s (%s)", own.point, own.opts, own.fstype)
	}
	werr := tryCreate(dir, nonce)
	evidence += "; write in " + dir + ": " + describeWrite(werr)
	if werr == nil {
		return fail(dir, cacheReadOnlyExp, "writable: a file was created (and removed) in the cache", evidence)
	}
	var under []string
	for _, m := range mounts {
		if strings.HasPrefix(m.point, strings.TrimSuffix(dir, "/")+"/") && !m.readOnly() {
			under = append(under, m.point)
		}
	}
	if len(under) > 0 {
		return fail(dir, cacheReadOnlyExp, "a read-write mount under the cache: "+strings.Join(under, ", "), evidence)
	}
	switch {
	case rdonly || errors.Is(werr, unix.EROFS):
		return pass(dir, cacheReadOnlyExp, "read-only mount", evidence)
	case own.point != "" && own.readOnly():
		return pass(dir, cacheReadOnlyExp, "read-only mount (per the mount table; this kernel's statfs does not report ST_RDONLY)", evidence)
	}
	act := "read-write mount"
	if errors.Is(werr, unix.EACCES) || errors.Is(werr, unix.EPERM) {
		act += " (the write failed with a permission error for this uid, not because the mount is read-only: another uid, or a chmod, writes it)"
	}
	return fail(dir, cacheReadOnlyExp, act, evidence)
}

// mountOf is the mount that holds path: the visible mount with the
// longest mount point that is path or one of its parents.
func mountOf(path string, mounts []mountEntry) mountEntry {
	var best mountEntry
	for _, m := range mounts {
		p := strings.TrimSuffix(m.point, "/")
		if (path == m.point || m.point == "/" || strings.HasPrefix(path, p+"/")) && len(m.point) >= len(best.point) {
			best = m
		}
	}
	return best
}
