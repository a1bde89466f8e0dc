package probes

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// What each runtime shows, copied from real ones: gVisor (runsc 20221219 under
// Docker), runc on a Firecracker VM (this project's CI machine), a Kata guest
// under QEMU, and runc on bare metal.
const (
	gvisorVersion    = "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016\n"
	gvisorLog        = "[    0.000000] Starting gVisor...\n[    0.271780] Granting licence to kill(2)...\n"
	gvisorMounts     = "8 8 0:8 / / ro  - 9p none ro,trans=fd,rfdno=4,wfdno=4,aname=/,dfltuid=4294967294\n9 8 0:6 / /dev rw  - tmpfs none rw,mode=0755\n"
	fcVersion        = "Linux version 6.18.44-fc-v782 (builder@sandboxing) (gcc (GCC) 15.3.0) #1 SMP PREEMPT_DYNAMIC @0\n"
	runcMounts       = "240 154 0:50 / / ro,relatime master:12 - overlay overlay rw,lowerdir=/l\n241 240 0:55 / /proc rw,nosuid - proc proc rw\n"
	kataVersion      = "Linux version 6.1.62 (root@kata) (gcc 12.2.0) #1 SMP Wed Jan 10 10:00:00 UTC 2024\n"
	kataMounts       = "20 1 0:19 / / rw,relatime - 9p kataShared rw,trans=virtio,version=9p2000.L\n"
	bareVersion      = "Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org) #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1\n"
	cpuHypervisor    = "processor\t: 0\nflags\t\t: fpu vme de pse tsc msr hypervisor lahf_lm\n\nprocessor\t: 1\nflags\t\t: fpu vme hypervisor\n"
	cpuBareMetal     = "processor\t: 0\nflags\t\t: fpu vme de pse tsc msr lahf_lm\n"
	kernelLogRefused = "operation not permitted"
)

type fakeRuntime struct {
	files   map[string]string
	release string
	version string
	log     string // "" means syslog(2) is refused, as on Linux with dmesg_restrict
}

func (f fakeRuntime) sources() runtimeSources {
	fsys := fstest.MapFS{}
	for name, data := range f.files {
		fsys[name] = &fstest.MapFile{Data: []byte(data)}
	}
	return runtimeSources{
		fsys:  fsys,
		uname: func() (string, string, error) { return f.release, f.version, nil },
		kernel: func() (string, error) {
			if f.log == "" {
				return "", errors.New(kernelLogRefused)
			}
			return f.log, nil
		},
	}
}

var (
	gvisorRuntime = fakeRuntime{
		files:   map[string]string{"proc/version": gvisorVersion, "proc/cpuinfo": cpuHypervisor, "proc/self/mountinfo": gvisorMounts},
		release: "4.4.0", version: gvisorUnameVersion, log: gvisorLog,
	}
	runcOnFirecracker = fakeRuntime{
		files:   map[string]string{"proc/version": fcVersion, "proc/cpuinfo": cpuHypervisor, "proc/self/mountinfo": runcMounts},
		release: "6.18.44-fc-v782", version: "#1 SMP PREEMPT_DYNAMIC @0",
	}
	kataQEMU = fakeRuntime{
		files: map[string]string{"proc/version": kataVersion, "proc/cpuinfo": cpuHypervisor, "proc/self/mountinfo": kataMounts,
			"sys/class/dmi/id/sys_vendor": "QEMU\n", "sys/class/dmi/id/product_name": "Standard PC (Q35 + ICH9, 2009)\n"},
		release: "6.1.62", version: "#1 SMP Wed Jan 10 10:00:00 UTC 2024",
	}
	runcBareMetal = fakeRuntime{
		files: map[string]string{"proc/version": bareVersion, "proc/cpuinfo": cpuBareMetal, "proc/self/mountinfo": runcMounts,
			"sys/class/dmi/id/sys_vendor": "Dell Inc.\n", "sys/class/dmi/id/product_name": "PowerEdge R650\n"},
		release: "6.1.0-18-amd64", version: "#1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1",
	}
)

func TestCollectRuntimeClassifies(t *testing.T) {
	cases := []struct {
		name       string
		rt         fakeRuntime
		kind       string
		hypervisor bool
		marker     string // a marker that must be named
	}{
		{"gVisor", gvisorRuntime, KindGVisor, true, "Starting gVisor"},
		{"gVisor without its kernel log", fakeRuntime{files: gvisorRuntime.files, release: "4.4.0", version: gvisorUnameVersion}, KindGVisor, true, "fixed version string"},
		{"runc on a Firecracker VM", runcOnFirecracker, KindVM, true, "hypervisor flag"},
		{"Kata under QEMU", kataQEMU, KindVM, true, "DMI names a hypervisor (QEMU"},
		{"runc on bare metal", runcBareMetal, KindHost, false, "no gVisor marker"},
		// A 4.4.0 release alone is an old kernel, not gVisor.
		{"an old 4.4.0 kernel", fakeRuntime{files: map[string]string{"proc/version": "Linux version 4.4.0-210-generic (buildd@lcy01) #242-Ubuntu SMP\n", "proc/cpuinfo": cpuBareMetal},
			release: "4.4.0-210-generic", version: "#242-Ubuntu SMP"}, KindHost, false, "no gVisor marker"},
		// Kata's 9p root goes over virtio, not a gofer fd: no gVisor hint.
		{"a 9p root over virtio", kataQEMU, KindVM, true, "QEMU"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := collectRuntime(c.rt.sources())
			if ev.Kind != c.kind {
				t.Errorf("kind %q, want %q (markers %q)", ev.Kind, c.kind, ev.Markers)
			}
			if ev.Hypervisor != c.hypervisor {
				t.Errorf("hypervisor %v, want %v", ev.Hypervisor, c.hypervisor)
			}
			if ev.Kernel != c.rt.release {
				t.Errorf("kernel %q, want %q", ev.Kernel, c.rt.release)
			}
			if !strings.Contains(strings.Join(ev.Markers, "|"), c.marker) {
				t.Errorf("markers %q do not name %q", ev.Markers, c.marker)
			}
			if c.kind != KindGVisor && strings.Contains(strings.Join(ev.Markers, "|"), "gofer") {
				t.Errorf("a non-gVisor runtime got the gofer hint: %q", ev.Markers)
			}
		})
	}
}

func TestRuntimeIsolation(t *testing.T) {
	const pol = `apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: rt}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  identity: {uid: 65532, gid: 65532}
  runtime:
    classNames: [gvisor, kata, runsc-nonet, plain]
    isolation: {plain: none}
`
	p, err := policy.Load([]byte(pol))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, class string
		rt          fakeRuntime
		want        result.Status
		actual, fix string // substrings
	}{
		{"gvisor class under gVisor", "gvisor", gvisorRuntime, result.Pass, "gVisor, kernel 4.4.0", ""},
		{"docker runtime name under gVisor", "runsc-nonet", gvisorRuntime, result.Pass, "gVisor", ""},
		{"gvisor class under runc", "gvisor", runcOnFirecracker, result.Fail, "a VM, kernel 6.18.44-fc-v782", "handler is runsc"},
		{"gvisor class on bare metal", "gvisor", runcBareMetal, result.Fail, "the host's kernel", "runsc"},
		// A hypervisor alone proves nothing: runc on a VM node sees one too.
		// Only the runner's comparison with the node's kernel settles it.
		{"kata class under Kata", "kata", kataQEMU, result.Inconclusive, "a VM, kernel 6.1.62: a hypervisor is visible, but a plain container on a VM node sees one too", ""},
		{"kata class under runc on a VM node", "kata", runcOnFirecracker, result.Inconclusive, "a VM, kernel 6.18.44-fc-v782", ""},
		{"kata class under gVisor", "kata", gvisorRuntime, result.Fail, "gVisor", "VM runtime"},
		{"kata class on bare metal", "kata", runcBareMetal, result.Fail, "the host's kernel", "VM runtime"},
		{"a class that promises nothing", "plain", runcBareMetal, result.Pass, "the host's kernel", ""},
		{"an undeclared class", "runc", runcBareMetal, result.Fail, "runtime class \"runc\", which the policy does not declare: the host's kernel", "declared runtime class"},
		// Even when what it sees would do: the class itself is not allowed.
		{"an undeclared class under gVisor", "runsc-debug", gvisorRuntime, result.Fail, "does not declare: gVisor", "declared runtime class"},
		// The runner did not say: any declared class's isolation will do…
		{"no class named, gVisor seen", "", gvisorRuntime, result.Pass, "gVisor", ""},
		// …including "plain", which promises nothing.
		{"no class named, host seen", "", runcBareMetal, result.Pass, "the host's kernel", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := &Env{Policy: p, RuntimeClass: c.class, Runtime: collectRuntime(c.rt.sources())}
			fs := checkRuntimeIsolation(context.Background(), env)
			if len(fs) != 1 {
				t.Fatalf("%d findings", len(fs))
			}
			f := fs[0]
			if f.Status != c.want {
				t.Fatalf("status %s, want %s: %s", f.Status, c.want, result.ExpectedActual(f))
			}
			if !strings.Contains(f.Actual, c.actual) {
				t.Errorf("actual %q does not contain %q", f.Actual, c.actual)
			}
			if c.want == result.Inconclusive && f.Fix == "" {
				t.Errorf("inconclusive without a fix")
			}
			if c.want == result.Fail && (f.Expected == "" || !strings.Contains(f.Fix, c.fix)) {
				t.Errorf("expected %q, fix %q (want it to mention %q)", f.Expected, f.Fix, c.fix)
			}
			if f.Evidence == "" {
				t.Error("no evidence")
			}
		})
	}

	// Without a class that promises nothing, an unnamed class must still isolate.
	strict := *p
	strict.Spec.Runtime = policy.Runtime{ClassNames: []string{"gvisor", "kata"}}
	f := checkRuntimeIsolation(context.Background(), &Env{Policy: &strict, Runtime: collectRuntime(runcBareMetal.sources())})[0]
	if f.Status != result.Fail || !strings.Contains(f.Expected, "gVisor or a VM") {
		t.Errorf("unnamed class on bare metal: %s %s", f.Status, result.ExpectedActual(f))
	}
}

func TestParseMountinfo(t *testing.T) {
	cases := []struct {
		line                string
		ok                  bool
		point, opts, fstype string
		super               string
	}{
		{"240 154 0:50 / / ro,relatime master:12 - overlay overlay rw,lowerdir=/l", true, "/", "ro,relatime", "overlay", "rw,lowerdir=/l"},
		// gVisor: no optional fields, two blanks before the separator.
		{"8 8 0:8 / / ro  - 9p none ro,trans=fd,rfdno=4", true, "/", "ro", "9p", "ro,trans=fd,rfdno=4"},
		{"36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 shared:2 - ext3 /dev/root rw,errors=continue", true, "/mnt2", "rw,noatime", "ext3", "rw,errors=continue"},
		{"garbage", false, "", "", "", ""},
		{"1 2 3 4 5 - x", false, "", "", "", ""},
	}
	for _, c := range cases {
		m, ok := parseMountinfo(c.line)
		if ok != c.ok || m.point != c.point || m.opts != c.opts || m.fstype != c.fstype || m.super != c.super {
			t.Errorf("parseMountinfo(%q) = %+v, %v", c.line, m, ok)
		}
	}
	if root := rootMount(fstest.MapFS{"proc/self/mountinfo": {Data: []byte(runcMounts)}}); root.opts != "ro,relatime" {
		t.Errorf("root mount %+v", root)
	}
}
