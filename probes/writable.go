package probes

import (
	"context"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/result"
)

func checkWritable(_ context.Context, env *Env) []result.Finding {
	var out []result.Finding
	for _, dir := range env.Policy.Spec.Filesystem.Writable {
		err := tryCreate(dir, env.Nonce)
		evidence := describeDir(dir)
		if err != nil {
			f := fail(dir, "writable by uid "+fmt.Sprint(os.Getuid()), "not writable: "+errnoName(err), evidence)
			if os.IsNotExist(err) {
				f.Actual = "does not exist"
			}
			out = append(out, f)
			continue
		}
		out = append(out, pass(dir, "writable", "a file was created and removed", evidence))
	}
	return out
}

// describeDir says who owns a directory, its mode and whether its mount is read-only.
func describeDir(dir string) string {
	fi, err := os.Stat(dir)
	if err != nil {
		return "stat: " + errnoName(err)
	}
	mode := fi.Mode().Perm()
	if fi.Mode()&os.ModeSticky != 0 {
		mode |= 0o1000
	}
	s := fmt.Sprintf("mode %04o", uint32(mode))
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s += fmt.Sprintf(", owner %d:%d", st.Uid, st.Gid)
	}
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) == nil {
		s += fmt.Sprintf(", mount %s", map[bool]string{true: "read-only", false: "read-write"}[fs.Flags&stRdonly != 0])
		if fs.Type == tmpfsMagic {
			s += " tmpfs"
		}
	}
	return s
}
