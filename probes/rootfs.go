package probes

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/report"
)

// checkRootReadOnly asks whether "/" is *mounted* read-only. A non-root uid
// gets EACCES on a writable root too, so a refused write proves nothing by
// itself: the mount flag decides, the write's errno is evidence.
func checkRootReadOnly(_ context.Context, env *Env) []report.Finding {
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return []report.Finding{errorf("/", "statfs /: %v", err)}
	}
	rdonly := st.Flags&unix.ST_RDONLY != 0
	writeErr := tryCreate("/", env.Nonce)
	evidence := fmt.Sprintf("statfs(/) flags=%#x (ST_RDONLY %s); fs type %#x; write attempt: %s",
		st.Flags, onOff(rdonly), st.Type, describeWrite(writeErr))
	const exp = "the root filesystem mounted read-only"
	switch {
	case writeErr == nil:
		return []report.Finding{fail("/", exp, "read-write: a file was created in /", evidence)}
	case !rdonly:
		act := "read-write mount"
		if errors.Is(writeErr, unix.EACCES) || errors.Is(writeErr, unix.EPERM) {
			act += fmt.Sprintf(" (the write failed with %s, but that is a permission check for this uid, not a read-only mount)", errnoName(writeErr))
		}
		return []report.Finding{fail("/", exp, act, evidence)}
	}
	return []report.Finding{pass("/", exp, "read-only mount", evidence)}
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
