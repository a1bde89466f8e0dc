package probes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/result"
)

// checkRootReadOnly asks whether "/" is *mounted* read-only. A non-root uid
// gets EACCES on a writable root too, so a refused write proves nothing by
// itself. Three kernel answers count: statfs's ST_RDONLY, the mount table's
// "ro" for "/", and EROFS for a write the uid's permissions allow. gVisor
// leaves ST_RDONLY out of statfs and checks permissions before the mount
// flag, so there the mount table and a permitted write carry the proof; on
// Linux all three agree, and a writable root fails on every runtime.
func checkRootReadOnly(_ context.Context, env *Env) []result.Finding {
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return []result.Finding{errorf("/", "statfs /: %v", err)}
	}
	rdonly := st.Flags&stRdonly != 0
	root := rootMount(os.DirFS("/"))
	mountRO := slices.Contains(strings.Split(root.opts, ","), "ro")
	evidence := fmt.Sprintf("statfs(/) flags=%#x (ST_RDONLY %s); fs type %#x", st.Flags, onOff(rdonly), st.Type)
	if root.point != "" {
		evidence += fmt.Sprintf("; mountinfo: / %s (%s)", root.opts, root.fstype)
	}
	erofs := false
	for _, dir := range append([]string{"/"}, permittedRootDirs()...) {
		err := tryCreate(dir, env.Nonce)
		evidence += fmt.Sprintf("; write in %s: %s", dir, describeWrite(err))
		if err == nil {
			return []result.Finding{fail("/", rootReadOnlyExp, "read-write: a file was created in "+dir, evidence)}
		}
		erofs = erofs || errors.Is(err, unix.EROFS)
	}
	switch {
	case rdonly || erofs:
		return []result.Finding{pass("/", rootReadOnlyExp, "read-only mount", evidence)}
	case mountRO:
		return []result.Finding{pass("/", rootReadOnlyExp, "read-only mount (per the mount table; this kernel's statfs does not report ST_RDONLY)", evidence)}
	}
	act := "read-write mount"
	if strings.Contains(evidence, "EACCES") || strings.Contains(evidence, "EPERM") {
		act += " (writes failed with a permission error for this uid, not because the mount is read-only)"
	}
	return []result.Finding{fail("/", rootReadOnlyExp, act, evidence)}
}

const rootReadOnlyExp = "the root filesystem mounted read-only"

// permittedRootDirs lists a few directories on the root filesystem (same
// device as "/") whose permission bits let this uid create a file, so that a
// write there can only fail because of the mount.
func permittedRootDirs() []string {
	var rootSt unix.Stat_t
	if unix.Stat("/", &rootSt) != nil {
		return nil
	}
	uid, groups := os.Geteuid(), []int{os.Getegid()}
	if gs, err := os.Getgroups(); err == nil {
		groups = append(groups, gs...)
	}
	var out []string
	for _, dir := range []string{os.Getenv("HOME"), "/var/tmp", "/tmp", "/var/lock", "/run/lock"} {
		var st unix.Stat_t
		if dir == "" || dir == "/" || slices.Contains(out, dir) || unix.Stat(dir, &st) != nil {
			continue
		}
		if st.Dev != rootSt.Dev || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		perm := st.Mode & 0o777
		ok := perm&0o002 != 0 ||
			(int(st.Uid) == uid && perm&0o200 != 0) ||
			(slices.Contains(groups, int(st.Gid)) && perm&0o020 != 0) ||
			uid == 0
		if ok {
			out = append(out, dir)
		}
	}
	return out
}

// tryCreate creates and removes a file in dir; nil means the write worked.
func tryCreate(dir, nonce string) error {
	name := dir
	if name != "/" {
		name += "/"
	}
	name += ".sandprobe-write-test-" + nonce
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte("sandprobe"))
	cerr := f.Close()
	os.Remove(name)
	return errors.Join(werr, cerr)
}

func describeWrite(err error) string {
	if err == nil {
		return "succeeded"
	}
	return "failed with " + errnoName(err)
}

// errnoName gives "EROFS (read-only file system)" for an error wrapping an errno.
func errnoName(err error) string {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return fmt.Sprintf("%s (%s)", unix.ErrnoName(errno), errno.Error())
	}
	return err.Error()
}

func onOff(b bool) string {
	if b {
		return "set"
	}
	return "not set"
}
