//go:build linux

package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/policy"
)

// Init is the sandbox's first process: it runs as root inside the new
// namespaces, builds the filesystem, drops every privilege the Sandbox does
// not keep, and execs the probe. It only returns on failure (exit 125).
func Init() int {
	// Capability bounding sets, seccomp filters and setns are per thread:
	// everything from here to exec must happen on this one.
	runtime.LockOSThread()
	specFile := os.NewFile(3, "spec")
	raw, err := io.ReadAll(io.LimitReader(specFile, 1<<20))
	specFile.Close()
	if err != nil {
		return initFail(fmt.Errorf("read spec: %w", err))
	}
	var spec initSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return initFail(fmt.Errorf("decode spec: %w", err))
	}
	if err := setup(spec); err != nil {
		return initFail(err)
	}
	return initFail(errors.New("exec returned")) // unreachable: setup execs
}

func initFail(err error) int {
	fmt.Fprintf(os.Stderr, "sandbox-init: %v\n", err)
	return 125
}

func setup(s initSpec) error {
	sb := s.Sandbox
	if err := joinNetwork(sb.NetNS); err != nil {
		return err
	}
	if err := buildRoot(s); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(sb.Hostname)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if err := pivot(s.Root); err != nil {
		return err
	}
	for _, path := range sortedKeys(sb.Files) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("seed %s: %w", path, err)
		}
		if err := os.WriteFile(path, []byte(sb.Files[path]), 0o644); err != nil {
			return fmt.Errorf("seed %s: %w", path, err)
		}
	}
	for _, path := range sb.Sockets {
		if err := listenSocket(path); err != nil {
			return err
		}
	}
	if sb.ReadOnlyRoot {
		if err := unix.MountSetattr(-1, "/", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return fmt.Errorf("make / read-only: %w", err)
		}
	}
	if err := dropPrivileges(sb); err != nil {
		return err
	}
	if err := runPhase(sb); err != nil {
		return err
	}
	return unix.Exec(s.Argv[0], s.Argv, sb.Env)
}

// joinNetwork enters a named network namespace, or brings up loopback in the
// fresh one the sandbox was cloned into.
func joinNetwork(name string) error {
	if name == "" {
		return loopbackUp()
	}
	fd, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w (is the lab up?)", name, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("join network namespace %s: %w", name, err)
	}
	return nil
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

// skipped top-level directories get sandbox-own content instead of the host's.
var skipped = []string{"proc", "sys", "dev", "tmp", "run", "lost+found"}

// buildRoot assembles the new root on a tmpfs: the host's top-level
// directories bound read-only, fresh /proc, /dev and /run, and a tmpfs for
// each writable path.
func buildRoot(s initSpec) error {
	sb, root := s.Sandbox, s.Root
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=16m"); err != nil {
		return fmt.Errorf("mount root tmpfs: %w", err)
	}
	for _, step := range []func(string, Sandbox) error{bindHostDirs, mountKernelFS, bindHostRoot} {
		if err := step(root, sb); err != nil {
			return err
		}
	}
	if err := placeProbe(s); err != nil {
		return err
	}
	// Last the policy's own: binds, writable tmpfs, then credentials over
	// them, then volumes over everything.
	for _, step := range []func(string, Sandbox) error{bindExtra, mountWritable, mountCredentials, mountVolumes} {
		if err := step(root, sb); err != nil {
			return err
		}
	}
	return nil
}

// bindHostDirs binds the host's top-level directories read-only (and
// copies its top-level symlinks), but for those the sandbox gets its own.
func bindHostDirs(root string, sb Sandbox) error {
	entries, err := os.ReadDir("/")
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if slices.Contains(skipped, name) || slices.Contains(sb.Writable, "/"+name) {
			continue
		}
		src, dst := "/"+name, filepath.Join(root, name)
		switch {
		case e.Type()&os.ModeSymlink != 0:
			link, err := os.Readlink(src)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, dst); err != nil {
				return err
			}
		case e.IsDir():
			if err := bindReadOnly(src, dst, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// mountKernelFS mounts a fresh /proc (its host-wide tunables read-only,
// as runc has them), /sys and a minimal /dev.
func mountKernelFS(root string, sb Sandbox) error {
	if err := os.Mkdir(filepath.Join(root, "proc"), 0o555); err != nil {
		return err
	}
	if err := unix.Mount("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if !sb.WritableProc { // what runc does: the host-wide tunables stay read-only
		for _, p := range []string{"proc/sys", "proc/sysrq-trigger"} {
			if err := remountReadOnly(filepath.Join(root, p)); err != nil {
				return err
			}
		}
	}
	if sb.WritableSys {
		if err := bind("/sys", filepath.Join(root, "sys"), true); err != nil {
			return err
		}
	} else if err := bindReadOnly("/sys", filepath.Join(root, "sys"), true); err != nil {
		return err
	}
	if err := buildDev(filepath.Join(root, "dev"), sb.Devices); err != nil {
		return err
	}
	return nil
}

// bindHostRoot binds the host's root filesystem, read-only, where the
// sandbox declares it (a sabotage: the host visible inside).
func bindHostRoot(root string, sb Sandbox) error {
	if sb.HostRoot != "" {
		dst := filepath.Join(root, sb.HostRoot)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		// The root filesystem alone (no MS_REC): its submounts stay out.
		if err := unix.Mount("/", dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind the host root at %s: %w", sb.HostRoot, err)
		}
		if err := unix.MountSetattr(-1, dst, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID}); err != nil {
			return fmt.Errorf("make the host root at %s read-only: %w", sb.HostRoot, err)
		}
	}
	return nil
}

// placeProbe makes /tmp, binds the probe binary in read-only, and the
// network namespace's resolver files as `ip netns exec` does.
func placeProbe(s initSpec) error {
	sb, root := s.Sandbox, s.Root
	// /tmp and /run exist but belong to the root filesystem (read-only)
	// unless the policy makes them writable.
	if err := os.Mkdir(filepath.Join(root, "tmp"), 0o1777); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		return err
	}
	binDir := filepath.Join(root, filepath.Dir(ProbePath))
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	probe := s.Probe
	if probe == "" {
		probe = s.Binary
	}
	if err := bindReadOnly(probe, filepath.Join(root, ProbePath), false); err != nil {
		return err
	}
	if sb.NetNS != "" { // what `ip netns exec` does: per-namespace resolver files
		for _, f := range []string{"resolv.conf", "hosts"} {
			src := filepath.Join("/etc/netns", sb.NetNS, f)
			if _, err := os.Stat(src); err == nil {
				if err := unix.Mount(src, filepath.Join(root, "etc", f), "", unix.MS_BIND, ""); err != nil {
					return fmt.Errorf("bind %s: %w", src, err)
				}
			}
		}
	}
	return nil
}

// bindExtra binds the extra host paths the sandbox needs read-only.
func bindExtra(root string, sb Sandbox) error {
	for _, b := range sb.Binds {
		dst := filepath.Join(root, b)
		if _, err := os.Stat(dst); err == nil {
			continue // visible through a bound host directory already
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("bind %s: %w", b, err)
		}
		if err := bindReadOnly(b, dst, false); err != nil {
			return err
		}
	}
	return nil
}

// mountWritable mounts a tmpfs at each writable path.
func mountWritable(root string, sb Sandbox) error {
	for _, w := range sb.Writable {
		dst := filepath.Join(root, w)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return fmt.Errorf("writable path %s: cannot create it under the read-only host directories: %w", w, err)
		}
		opts := "mode=1777"
		if sb.SizeLimit != "" {
			opts += ",size=" + sb.SizeLimit
		}
		if err := unix.Mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("mount tmpfs at %s: %w", w, err)
		}
	}
	return nil
}

// mountCredentials binds the declared credentials read-only.
func mountCredentials(root string, sb Sandbox) error {
	// After the tmpfs mounts, so a credential under a writable path stays visible.
	for _, m := range sb.Mounts {
		fi, err := os.Stat(m.Source)
		if err != nil {
			return fmt.Errorf("mount %s: %w", m.Source, err)
		}
		dst := filepath.Join(root, m.Target)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("mount %s at %s: %w", m.Source, m.Target, err)
		}
		if err := bindReadOnly(m.Source, dst, fi.IsDir()); err != nil {
			return err
		}
	}
	return nil
}

// mountVolumes binds the volumes, over anything else at their paths.
func mountVolumes(root string, sb Sandbox) error {
	// Last, so a volume at a writable path replaces its tmpfs: the shared
	// workspace outlives the sandbox.
	for _, v := range sb.Volumes {
		dst := filepath.Join(root, v.Target)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("volume %s at %s: %w", v.Source, v.Target, err)
		}
		if _, err := os.Stat(dst); err == nil {
			if err := unix.Mount(v.Source, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("volume %s: %w", v.Source, err)
			}
			if !v.Writable {
				if err := unix.MountSetattr(-1, dst, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID}); err != nil {
					return fmt.Errorf("make volume %s read-only: %w", v.Source, err)
				}
			}
			continue
		}
		fi, err := os.Stat(v.Source)
		if err != nil {
			return fmt.Errorf("volume %s: %w", v.Source, err)
		}
		if v.Writable {
			err = bind(v.Source, dst, fi.IsDir())
		} else {
			err = bindReadOnly(v.Source, dst, fi.IsDir())
		}
		if err != nil {
			return fmt.Errorf("volume %s at %s: %w", v.Source, v.Target, err)
		}
	}
	return nil
}

// runPhase runs the sandbox's phase script as the sandbox's own process
// (its uid, no capabilities, its seccomp filter) before the probe starts.
func runPhase(sb Sandbox) error {
	if len(sb.Phase) == 0 {
		return nil
	}
	script := strings.Join(sb.Phase, "\n")
	pid, err := syscall.ForkExec("/bin/sh", []string{"sh", "-ec", script}, &syscall.ProcAttr{
		Dir: "/", Env: sb.Env, Files: []uintptr{0, 2, 2}, // its stdout to stderr: stdout is the probe's result
	})
	if err != nil {
		return fmt.Errorf("phase script: %w", err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		return fmt.Errorf("phase script: %w", err)
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return fmt.Errorf("phase script failed: %v", ws)
	}
	return nil
}

// bindReadOnly bind-mounts src at dst (recursively for directories) and makes
// the whole tree read-only with mount_setattr.
func bindReadOnly(src, dst string, dir bool) error {
	if err := bind(src, dst, dir); err != nil {
		return err
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID}
	if err := unix.MountSetattr(-1, dst, unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("make %s read-only: %w", src, err)
	}
	return nil
}

// bind bind-mounts src at dst (recursively for directories), creating dst.
func bind(src, dst string, dir bool) error {
	if dir {
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
	} else {
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			return err
		}
		f.Close()
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	return nil
}

// remountReadOnly binds path over itself read-only (nothing when it is absent).
func remountReadOnly(path string) error {
	if _, err := os.Stat(path); os.IsNotExist(err) {
		return nil
	}
	if err := unix.Mount(path, path, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", path, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(-1, path, unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("make %s read-only: %w", path, err)
	}
	return nil
}

// listenSocket leaves a listening Unix socket at path, mode 0666, open
// across exec (no close-on-exec): the probe inherits it, so connections to
// it are accepted into its backlog while the probe runs.
func listenSocket(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return fmt.Errorf("bind socket %s: %w", path, err)
	}
	if err := unix.Listen(fd, 16); err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	return os.Chmod(path, 0o666)
}

// buildDev gives the sandbox a minimal /dev: the harmless character devices,
// a private /dev/shm and the usual symlinks.
func buildDev(dev string, hostDevices []string) error {
	if err := os.Mkdir(dev, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		dst := filepath.Join(dev, n)
		f, err := os.Create(dst)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Mount("/dev/"+n, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", n, err)
		}
	}
	for _, d := range hostDevices { // sabotage: host devices at the same path
		dst := filepath.Join(dev, strings.TrimPrefix(d, "/dev/"))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		f, err := os.Create(dst)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Mount(d, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", d, err)
		}
	}
	shm := filepath.Join(dev, "shm")
	if err := os.Mkdir(shm, 0o1777); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=64m"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return nil
}

func pivot(root string) error {
	if err := os.Chdir(root); err != nil {
		return err
	}
	if err := os.Mkdir(".oldroot", 0o700); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", ".oldroot"); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Unmount("/.oldroot", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return os.Remove("/.oldroot")
}

// dropPrivileges leaves the thread with the Sandbox's uid, gid and groups,
// only the capabilities it deliberately keeps, no_new_privs and seccomp.
func dropPrivileges(sb Sandbox) error {
	keepBnd := capNumbers(sb.KeepCaps.Bounding)
	inh := capMask(append(append([]string(nil), sb.KeepCaps.Inheritable...), sb.KeepCaps.Ambient...))
	amb := capMask(sb.KeepCaps.Ambient)

	// Inheritable bits can only be raised while they are still permitted.
	if inh != 0 {
		eff, prm, err := capget()
		if err != nil {
			return err
		}
		if err := capset(eff, prm, inh&prm); err != nil {
			return fmt.Errorf("capset inheritable: %w", err)
		}
	}
	for c := 0; c <= lastCap(); c++ {
		if slices.Contains(keepBnd, c) || amb&(1<<uint(c)) != 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if sb.Seccomp { // while CAP_SYS_ADMIN still allows it without no_new_privs
		if err := installSeccomp(); err != nil {
			return err
		}
	}
	if amb != 0 {
		if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("keep capabilities: %w", err)
		}
	}
	groups := make([]int, len(sb.Groups))
	for i, g := range sb.Groups {
		groups[i] = int(g)
	}
	if err := unix.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := unix.Setresgid(int(sb.GID), int(sb.GID), int(sb.GID)); err != nil {
		return fmt.Errorf("setresgid %d: %w", sb.GID, err)
	}
	if err := unix.Setresuid(int(sb.UID), int(sb.UID), int(sb.UID)); err != nil {
		return fmt.Errorf("setresuid %d: %w", sb.UID, err)
	}
	if sb.UID != 0 {
		if err := capset(amb, amb, inh); err != nil {
			return fmt.Errorf("capset: %w", err)
		}
	}
	for c := 0; c <= lastCap(); c++ {
		if amb&(1<<uint(c)) != 0 {
			if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, uintptr(c), 0, 0); err != nil {
				return fmt.Errorf("raise ambient capability %d: %w", c, err)
			}
		}
	}
	if sb.NoNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("set no_new_privs: %w", err)
		}
	}
	return nil
}

func capset(eff, prm, inh uint64) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: uint32(eff), Permitted: uint32(prm), Inheritable: uint32(inh)},
		{Effective: uint32(eff >> 32), Permitted: uint32(prm >> 32), Inheritable: uint32(inh >> 32)},
	}
	return unix.Capset(&hdr, &data[0])
}

func capget() (eff, prm uint64, err error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, 0, fmt.Errorf("capget: %w", err)
	}
	eff = uint64(data[0].Effective) | uint64(data[1].Effective)<<32
	prm = uint64(data[0].Permitted) | uint64(data[1].Permitted)<<32
	return eff, prm, nil
}

func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &n); err == nil {
			return n
		}
	}
	return len(policy.Capabilities) - 1
}

func capNumbers(names []string) []int {
	var out []int
	for _, n := range names {
		if c := policy.CapabilityNumber(n); c >= 0 {
			out = append(out, c)
		}
	}
	return out
}

func capMask(names []string) uint64 {
	var m uint64
	for _, c := range capNumbers(names) {
		m |= 1 << uint(c)
	}
	return m
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
