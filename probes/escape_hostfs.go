package probes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/result"
)

// osRootDirs are what the root of an installed system holds; a mounted
// filesystem root with most of them is a system's root, not a volume of data.
var osRootDirs = []string{"etc", "usr", "bin", "sbin", "lib", "var", "boot", "root", "home", "proc", "sys", "dev"}

func checkHostFS(_ context.Context, env *Env) []result.Finding {
	mounts := visibleMounts(readMounts(os.DirFS("/")))
	return judgeHostFS(deviceNodes("/dev", mounts), mounts)
}

// judgeHostFS fails on any block device node (a disk the sandbox could read
// or write beneath every filesystem permission) and on any mount of a whole
// filesystem that holds a system's root directory tree: the host's "/"
// mounted in (hostPath: /, -v /:/host).
func judgeHostFS(nodes []devNode, mounts []mountEntry) []result.Finding {
	const expBlock = "no block device node"
	const expRoot = "no host root filesystem mounted"
	var out []result.Finding
	var blocks []string
	for _, d := range nodes {
		if d.block {
			blocks = append(blocks, fmt.Sprintf("%s [opens for reading %s, access(2) write %s]", d, yesNo(opensForReading(d.path)), yesNo(accessAs(d.path, unix.W_OK) == nil)))
		}
	}
	if len(blocks) > 0 {
		out = append(out, fail("block devices", expBlock, fmt.Sprintf("%s visible: %s", count(len(blocks), "block device is", "block devices are"), firstN(blocks, 3)),
			"a block device gives the raw disk under every filesystem permission; evidence from stat(2), access(2) and an open for reading (the device cgroup answers only an open), nothing read"))
	} else {
		out = append(out, pass("block devices", expBlock, "none", fmt.Sprintf("%s under /dev and the mount points, none a block device", count(len(nodes), "device node", "device nodes"))))
	}
	var roots []string
	checked := 0
	for _, m := range mounts {
		if m.point == "/" || m.root != "/" || under(m.point, "/proc", "/sys", "/dev") {
			continue
		}
		checked++
		if have := osTree(m.point); looksLikeSystemRoot(have) {
			mode := "read-write"
			if m.readOnly() {
				mode = "read-only"
			}
			roots = append(roots, fmt.Sprintf("%s (%s %s from %s, holds %s)", m.point, mode, m.fstype, m.source, strings.Join(have, " ")))
		}
	}
	if len(roots) > 0 {
		out = append(out, fail("host root", expRoot, "a system's root filesystem is mounted: "+firstN(roots, 2), "mounts whose root is a filesystem's top and that hold a system's directory tree"))
	} else {
		out = append(out, pass("host root", expRoot, "none", fmt.Sprintf("%d whole-filesystem mounts besides /, /proc, /sys, /dev; none holds a system's directory tree", checked)))
	}
	return out
}

// osTree lists which of a system root's directories dir holds.
func osTree(dir string) []string {
	var have []string
	for _, d := range osRootDirs {
		if fi, err := os.Lstat(filepath.Join(dir, d)); err == nil && (fi.IsDir() || fi.Mode()&os.ModeSymlink != 0) {
			have = append(have, d)
		}
	}
	return have
}

// looksLikeSystemRoot: etc, usr or bin, and most of the rest — a volume of
// data (a workspace with its own bin/ and lib/) does not have them all.
func looksLikeSystemRoot(have []string) bool {
	return slices.Contains(have, "etc") && (slices.Contains(have, "usr") || slices.Contains(have, "bin")) && len(have) >= 6
}

// under reports whether p is one of the dirs or inside one.
func under(p string, dirs ...string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// opensForReading opens path read-only and closes it unread: unlike
// access(2), open(2) asks the device cgroup too (docker --device …:r).
func opensForReading(path string) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}
