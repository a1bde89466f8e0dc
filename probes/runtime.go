package probes

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// Runtime kinds the probe can tell apart from inside.
const (
	KindGVisor = "gvisor" // gVisor's user-space kernel answers the system calls
	KindVM     = "vm"     // a hypervisor is visible: a VM sandbox, or a container on a VM node
	KindHost   = "host"   // neither: a container on a bare-metal host's kernel
)

// RuntimeClassEnv names the environment variable a runner may set instead of
// passing --runtime-class to `sandprobe probe`.
const RuntimeClassEnv = "SANDPROBE_RUNTIME_CLASS"

// gVisor reports a fixed, made-up kernel: release 4.4.0 and this version
// string, whatever the host runs. No real 4.4.0 kernel was built at that
// instant with that exact string, so it identifies gVisor by itself.
const gvisorUnameVersion = "#1 SMP Sun Jan 10 15:06:54 PST 2016"

// gVisor fills its kernel log with its own boot messages, and lets an
// unprivileged process read it; a Linux kernel with dmesg_restrict refuses.
const gvisorLogMarker = "Starting gVisor"

// vmVendors are DMI sys_vendor / product_name fragments of hypervisors.
var vmVendors = []string{
	"QEMU", "KVM", "Firecracker", "Cloud Hypervisor", "VMware", "VirtualBox", "innotek",
	"Xen", "Amazon EC2", "Google Compute Engine", "Virtual Machine", "Parallels", "Bochs", "BHYVE", "OpenStack",
}

// runtimeSources is where runtime evidence comes from; tests replace it.
type runtimeSources struct {
	fsys   fs.FS                                     // the root filesystem ("/proc/version" is "proc/version")
	uname  func() (release, version string, _ error) // uname(2)
	kernel func() (string, error)                    // the kernel log, as syslog(2) gives it to this process
}

func hostSources() runtimeSources {
	return runtimeSources{fsys: os.DirFS("/"), uname: uname, kernel: kernelLog}
}

func uname() (string, string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), unix.ByteSliceToString(u.Version[:]), nil
}

// CollectRuntime gathers what this process can see of the runtime it runs under.
func CollectRuntime() *result.RuntimeEvidence { return collectRuntime(hostSources()) }

func collectRuntime(src runtimeSources) *result.RuntimeEvidence {
	ev := &result.RuntimeEvidence{}
	release, version, err := src.uname()
	if err == nil {
		ev.Kernel = release
	}
	if b, err := fs.ReadFile(src.fsys, "proc/version"); err == nil {
		ev.ProcVersion = strings.TrimSpace(string(b))
	}

	// gvisor holds conclusive gVisor markers; hints only supports them.
	var gvisor, hints, vm []string
	if version == gvisorUnameVersion || strings.Contains(ev.ProcVersion, gvisorUnameVersion) {
		gvisor = append(gvisor, fmt.Sprintf("kernel %s %q is gVisor's fixed version string", release, gvisorUnameVersion))
	}
	if log, err := src.kernel(); err == nil && strings.Contains(log, gvisorLogMarker) {
		gvisor = append(gvisor, "the kernel log reads \"Starting gVisor...\"")
	}
	// Supporting evidence only: Kata also serves a rootfs over 9p, but over
	// virtio, not gVisor's gofer file descriptor.
	if root := rootMount(src.fsys); root.fstype == "9p" && strings.Contains(root.super, "trans=fd") {
		hints = append(hints, "the root filesystem is 9p over a file descriptor (gVisor's gofer)")
	}

	if b, err := fs.ReadFile(src.fsys, "proc/cpuinfo"); err == nil && cpuFlag(string(b), "hypervisor") {
		ev.Hypervisor = true
		vm = append(vm, "the CPU reports the hypervisor flag")
	}
	var dmi []string
	for _, name := range []string{"sys_vendor", "product_name"} {
		if b, err := fs.ReadFile(src.fsys, "sys/class/dmi/id/"+name); err == nil {
			if v := strings.TrimSpace(string(b)); v != "" {
				dmi = append(dmi, v)
			}
		}
	}
	ev.DMI = strings.Join(dmi, " / ")
	if v := vmVendor(ev.DMI); v != "" {
		vm = append(vm, fmt.Sprintf("DMI names a hypervisor (%s)", ev.DMI))
	}
	if b, err := fs.ReadFile(src.fsys, "sys/hypervisor/type"); err == nil && len(bytes.TrimSpace(b)) > 0 {
		vm = append(vm, fmt.Sprintf("/sys/hypervisor/type is %s", bytes.TrimSpace(b)))
	}

	// gVisor passes the host's CPU flags through, so its markers decide first.
	switch {
	case len(gvisor) > 0:
		ev.Kind = KindGVisor
		ev.Markers = append(gvisor, hints...)
	case len(vm) > 0:
		ev.Kind = KindVM
		ev.Markers = append(vm, hints...)
	default:
		ev.Kind = KindHost
		ev.Markers = append([]string{"no gVisor marker, no hypervisor flag, no hypervisor in DMI"}, hints...)
	}
	return ev
}

// cpuFlag reports whether any "flags" line of /proc/cpuinfo lists flag.
func cpuFlag(cpuinfo, flag string) bool {
	for _, line := range strings.Split(cpuinfo, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "flags" && slices.Contains(strings.Fields(v), flag) {
			return true
		}
	}
	return false
}

func vmVendor(dmi string) string {
	for _, v := range vmVendors {
		if strings.Contains(strings.ToLower(dmi), strings.ToLower(v)) {
			return v
		}
	}
	return ""
}

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	point, opts, fstype, super string
	// root is the directory of the filesystem mounted at point ("/" for
	// the whole filesystem), source its source ("/dev/vda", "overlay").
	root, source string
	// major and minor are the filesystem's device (0 for tmpfs, proc, overlay).
	major, minor uint64
}

// readOnly reports whether the mount (not only its superblock) is read-only.
func (m mountEntry) readOnly() bool { return slices.Contains(strings.Split(m.opts, ","), "ro") }

// rootMount finds the mount at "/" in /proc/self/mountinfo (the last one
// wins: a later mount on the same point hides the earlier).
func rootMount(fsys fs.FS) mountEntry {
	for _, m := range visibleMounts(readMounts(fsys)) {
		if m.point == "/" {
			return m
		}
	}
	return mountEntry{}
}

// readMounts parses /proc/self/mountinfo; nil when it cannot be read.
func readMounts(fsys fs.FS) []mountEntry {
	b, err := fs.ReadFile(fsys, "proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []mountEntry
	for _, line := range strings.Split(string(b), "\n") {
		if m, ok := parseMountinfo(line); ok {
			out = append(out, m)
		}
	}
	return out
}

// visibleMounts keeps, for each mount point, the mount that is on top: a
// later mount on the same point hides the earlier ones.
func visibleMounts(ms []mountEntry) []mountEntry {
	last := map[string]int{}
	for i, m := range ms {
		last[m.point] = i
	}
	var out []mountEntry
	for i, m := range ms {
		if last[m.point] == i {
			out = append(out, m)
		}
	}
	return out
}

// parseMountinfo splits "ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL…] - FSTYPE SOURCE SUPER".
// gVisor prints an empty optional-fields list with an extra blank, so split on runs of blanks.
func parseMountinfo(line string) (mountEntry, bool) {
	f := strings.Fields(line)
	sep := slices.Index(f, "-")
	if sep < 6 || len(f) < sep+3 {
		return mountEntry{}, false
	}
	m := mountEntry{root: unescapeMount(f[3]), point: unescapeMount(f[4]), opts: f[5], fstype: f[sep+1], source: unescapeMount(f[sep+2])}
	if len(f) > sep+3 {
		m.super = f[sep+3]
	}
	if maj, min, ok := strings.Cut(f[2], ":"); ok {
		m.major, _ = strconv.ParseUint(maj, 10, 32)
		m.minor, _ = strconv.ParseUint(min, 10, 32)
	}
	return m, true
}

// unescapeMount undoes mountinfo's octal escapes ("\040" is a blank).
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// declaredIsolation says what the sandbox must look like: the isolation of
// the class the runner launched it under when the policy declares that
// class, otherwise any declared class's.
func declaredIsolation(rt policy.Runtime, class string) []string {
	if slices.Contains(rt.ClassNames, class) {
		return []string{rt.IsolationFor(class)}
	}
	var kinds []string
	for _, c := range rt.ClassNames {
		if k := rt.IsolationFor(c); !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// describeIsolation names an isolation kind for people.
func describeIsolation(kind string) string {
	switch kind {
	case KindGVisor: // policy.IsolationGVisor is the same word
		return "gVisor"
	case KindVM:
		return "a VM"
	case KindHost:
		return "the host's kernel"
	}
	return "no isolation runtime"
}

// kindSatisfies reports whether what the probe saw meets a declared isolation.
func kindSatisfies(kind, declared string) bool {
	switch declared {
	case policy.IsolationGVisor:
		return kind == KindGVisor
	case policy.IsolationVM:
		return kind == KindVM
	}
	return true // "none" promises nothing
}

func checkRuntimeIsolation(_ context.Context, env *Env) []result.Finding {
	ev := env.Runtime
	if ev == nil {
		ev = CollectRuntime()
	}
	rt := env.Policy.Spec.Runtime
	class := env.RuntimeClass
	declared := slices.Contains(rt.ClassNames, class)
	kinds := declaredIsolation(rt, class)
	var want []string
	for _, k := range kinds {
		want = append(want, describeIsolation(k))
	}
	exp := strings.Join(want, " or ")
	switch {
	case declared:
		exp += " (runtime class " + class + ")"
	case class != "":
		exp += " (a declared runtime class: " + strings.Join(rt.ClassNames, ", ") + ")"
	default:
		exp += " (one of the declared runtime classes; the runner did not name the class it used)"
	}
	act := describeIsolation(ev.Kind)
	if ev.Kernel != "" {
		act += ", kernel " + ev.Kernel
	}
	if class != "" && !declared {
		f := fail(class, exp, fmt.Sprintf("runtime class %q, which the policy does not declare: %s", class, act), runtimeEvidence(ev))
		f.Fix = fmt.Sprintf("run sandboxes only under a declared runtime class (%s; docker: --runtime NAME), or declare this one with the isolation it really gives in spec.runtime", strings.Join(rt.ClassNames, ", "))
		return []result.Finding{f}
	}
	for _, k := range kinds {
		if kindSatisfies(ev.Kind, k) {
			f := pass(class, exp, act, runtimeEvidence(ev))
			if k == policy.IsolationVM {
				// From inside, a VM sandbox and a container on a VM node look
				// alike: only the runner, comparing this kernel with the
				// node's, can tell (runner.CrossCheckKernel settles it).
				f.Status = result.Inconclusive
				f.Actual = act + ": a hypervisor is visible, but a plain container on a VM node sees one too; a VM of its own only if its kernel is not the node's"
				f.Fix = "run the probe through a runner that reads the node's kernel (sandprobe run with the kube, docker or local backend)"
			}
			return []result.Finding{f}
		}
	}
	f := fail(class, exp, act, runtimeEvidence(ev))
	f.Fix = isolationFix(kinds[0], class)
	return []result.Finding{f}
}

func isolationFix(declared, class string) string {
	if class == "" {
		class = "the declared class"
	}
	switch declared {
	case policy.IsolationGVisor:
		return fmt.Sprintf("run the sandbox under gVisor: set runtimeClassName: %s on the pod with a RuntimeClass whose handler is runsc (docker: --runtime runsc); under runc the sandbox shares the host's kernel", class)
	case policy.IsolationVM:
		return fmt.Sprintf("run the sandbox in a VM: set runtimeClassName: %s on the pod with a RuntimeClass whose handler is a VM runtime (kata, firecracker); under runc the sandbox shares the host's kernel", class)
	}
	return "declare the isolation the runtime class really gives in spec.runtime.isolation"
}

func runtimeEvidence(ev *result.RuntimeEvidence) string {
	parts := []string{"kind " + ev.Kind}
	if ev.ProcVersion != "" {
		parts = append(parts, "/proc/version: "+firstLine(ev.ProcVersion))
	}
	parts = append(parts, "hypervisor flag "+onOff(ev.Hypervisor))
	if ev.DMI != "" {
		parts = append(parts, "DMI "+ev.DMI)
	}
	parts = append(parts, ev.Markers...)
	return strings.Join(parts, "; ")
}
