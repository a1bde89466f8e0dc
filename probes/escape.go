package probes

// The escape checks (area "escape") look for what lets a process out of its
// container: a runtime socket, the host's namespaces, writable kernel
// interfaces, host devices and filesystems, other processes to trace, a
// kernel that takes modules. They only look — stat, open for reading,
// access(2), connect(2) to a socket, reading /proc — and never write a
// kernel interface, load a module or attach to a process.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// underGVisor reports whether the probe runs on gVisor's kernel: there the
// namespaces, /proc, /sys and /dev are the Sentry's own, not the host's.
func underGVisor(env *Env) bool { return env.Runtime != nil && env.Runtime.Kind == KindGVisor }

// accessAs asks the kernel whether this process may use path in mode
// (unix.W_OK, unix.R_OK) with its effective ids and capabilities, as
// faccessat(2) with AT_EACCESS answers it. nil means it may; nothing is
// opened or written.
func accessAs(path string, mode uint32) error {
	return unix.Faccessat(unix.AT_FDCWD, path, mode, unix.AT_EACCESS)
}

var errNoWriteBit = errors.New("no write bit in its mode")

// writableFile reports whether this process may write the file path and
// the file can be written at all: a kernel attribute without a write bit
// (mode 0444) has no store behind it, though CAP_DAC_OVERRIDE makes
// access(2) say yes to it. nil means writable.
func writableFile(path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return err
	}
	if st.Mode&0o222 == 0 {
		return errNoWriteBit
	}
	return accessAs(path, unix.W_OK)
}

// accessWord says what accessAs answered, for evidence.
func accessWord(err error) string {
	if err == nil {
		return "writable"
	}
	return "not writable: " + errnoName(err)
}

// proc is one process as /proc shows it.
type proc struct {
	pid, ppid int
	comm      string
	state     byte // R, S, D, Z (zombie), X (dead), …
	uid       int  // real uid
	kthread   bool // a kernel thread (PF_KTHREAD): only the host's PID namespace shows them
}

// pfKthread is the kernel thread flag in /proc/PID/stat's flags field.
const pfKthread = 0x00200000

// listProcs reads every process visible under procDir ("/proc").
func listProcs(procDir string) ([]proc, error) {
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", procDir, err)
	}
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, ok := readProc(filepath.Join(procDir, e.Name()), pid)
		if ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// readProc parses /proc/PID/stat ("pid (comm) state ppid … flags …": the
// name may hold blanks and parentheses, so split after the last ')') and
// the real uid from /proc/PID/status. A process that exits meanwhile is skipped.
func readProc(dir string, pid int) (proc, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return proc{}, false
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return proc{}, false
	}
	p := proc{pid: pid, comm: s[open+1 : closing], uid: -1}
	rest := strings.Fields(s[closing+1:])
	if len(rest) > 6 {
		p.state = rest[0][0]
		p.ppid, _ = strconv.Atoi(rest[1])
		flags, _ := strconv.ParseUint(rest[6], 10, 64)
		p.kthread = flags&pfKthread != 0
	}
	if st, err := os.ReadFile(filepath.Join(dir, "status")); err == nil {
		for _, line := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					p.uid, _ = strconv.Atoi(f[0])
				}
			}
		}
	}
	return p, true
}

// gone reports whether a process has exited (a zombie, dead, or reaped):
// it has no memory left, so /proc answers for it without any check.
func (p proc) gone(procDir string) bool {
	if p.state == 'Z' || p.state == 'X' {
		return true
	}
	now, ok := readProc(filepath.Join(procDir, strconv.Itoa(p.pid)), p.pid)
	return !ok || now.state == 'Z' || now.state == 'X'
}

// nsInode is the inode of a namespace link ("pid:[4026531836]" -> 4026531836).
func nsInode(link string) uint64 {
	_, v, ok := strings.Cut(link, "[")
	if !ok {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSuffix(v, "]"), 10, 64)
	return n
}

// devNode is a device node the sandbox can see.
type devNode struct {
	path         string
	block        bool
	major, minor uint32
}

func (d devNode) String() string {
	kind := "char"
	if d.block {
		kind = "block"
	}
	return fmt.Sprintf("%s (%s %d:%d)", d.path, kind, d.major, d.minor)
}

// deviceNodes lists the device nodes under devDir ("/dev", walked to a
// small depth, without following links) and every mount point that is a
// device node (a device bind-mounted elsewhere: -v /dev/sda:/disk).
func deviceNodes(devDir string, mounts []mountEntry) []devNode {
	seen := map[string]bool{}
	var out []devNode
	add := func(p string) {
		var st unix.Stat_t
		if seen[p] || unix.Lstat(p, &st) != nil {
			return
		}
		seen[p] = true
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFCHR, unix.S_IFBLK:
			out = append(out, devNode{path: p, block: st.Mode&unix.S_IFMT == unix.S_IFBLK,
				major: unix.Major(uint64(st.Rdev)), minor: unix.Minor(uint64(st.Rdev))})
		}
	}
	base := strings.Count(filepath.Clean(devDir), "/")
	filepath.WalkDir(devDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // an unreadable directory hides nothing it could show
		}
		if d.IsDir() {
			if p != devDir && strings.Count(p, "/")-base > 3 {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type()&fs.ModeDevice != 0 {
			add(p)
		}
		return nil
	})
	for _, m := range mounts {
		add(m.point)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// regularFiles lists the regular files directly in each dir (no recursion).
func regularFiles(dirs ...string) []string {
	var out []string
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.Type().IsRegular() {
				out = append(out, filepath.Join(d, e.Name()))
			}
		}
	}
	return out
}

// firstN joins at most n items, saying how many more there were.
func firstN(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}

// count says "1 process" or "3 processes".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// isNotExist is true for ENOENT and ENOTDIR.
func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR)
}
