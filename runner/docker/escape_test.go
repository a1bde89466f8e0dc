package docker_test

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/moby/api/types/container"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner/docker"
)

// TestEscapeSabotagedContainers: the misconfigurations that let a process
// out of a container, built on the real engine, each fail the escape check
// meant for them; the probe only looks (it connects to the engine's socket
// and closes the connection, and writes nothing). The healthy container
// passes every escape check under runc and gVisor (TestScratchImage).
//
// --privileged itself is refused by this machine's engine (the engine lacks
// CAP_SYS_RESOURCE, so runc cannot grant every capability): the test builds
// what --privileged gives, piece by piece. --network host is not among the
// cases: the probe never runs in the host's network namespace.
func TestEscapeSabotagedContainers(t *testing.T) {
	e := newEngine(t)
	testenv.ScratchImage(t, e.host, scratchImage)
	engineSocket := strings.TrimPrefix(e.host, "unix://")
	// A process of the probe's uid on the host, for --pid=host to show.
	sleeper := exec.Command("sleep", "120")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	root := func(c *container.Config) { c.User = "0:0" }
	_, moduleSupport := os.Stat("/proc/modules")
	cases := []struct {
		name   string
		adjust func(*container.Config, *container.HostConfig)
		fail   []string // "check subject"
	}{
		{"the engine's socket mounted in, as root", func(c *container.Config, h *container.HostConfig) {
			root(c)
			h.Binds = append(h.Binds, engineSocket+":/var/run/docker.sock")
		}, []string{"escape.runtime-socket /var/run/docker.sock"}},
		{"--pid=host", func(_ *container.Config, h *container.HostConfig) { h.PidMode = "host" },
			[]string{"escape.host-pid", "escape.ptrace"}},
		{"--privileged, as root", func(c *container.Config, h *container.HostConfig) {
			root(c)
			h.CapDrop, h.CapAdd = []string{"SYS_RESOURCE"}, []string{"ALL"}
			h.SecurityOpt = append(h.SecurityOpt, "seccomp=unconfined")
			h.MaskedPaths, h.ReadonlyPaths = []string{}, []string{} // what --privileged leaves: /proc/sys read-write
			h.Binds = append(h.Binds, "/sys:/sys:rw")
			for _, d := range []string{"/dev/kvm", "/dev/vda"} {
				if _, err := os.Stat(d); err == nil {
					h.Devices = append(h.Devices, container.DeviceMapping{PathOnHost: d, PathInContainer: d, CgroupPermissions: "r"})
				}
			}
		}, []string{"escape.cgroup cgroupfs", "escape.cgroup release_agent", "escape.proc-sys /proc/sys", "escape.proc-sys /sys", "escape.devices", "escape.host-fs block devices"}},
		{"-v /:/host:ro", func(_ *container.Config, h *container.HostConfig) { h.Binds = append(h.Binds, "/:/host:ro") },
			[]string{"escape.host-fs host root"}},
		// This machine's kernel has no module support: there the check
		// cannot fail, and says why (probes.TestModuleLoad has the failing case).
		{"--cap-add SYS_MODULE, as root", func(c *container.Config, h *container.HostConfig) {
			root(c)
			h.CapAdd = append(h.CapAdd, "SYS_MODULE")
		}, map[bool][]string{true: {"escape.module-load"}, false: nil}[moduleSupport == nil]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, raw := loadFixture(t, "scratch-policy.yaml")
			be := &docker.Backend{Image: scratchImage, Runtime: "runc", Adjust: c.adjust,
				Command: []string{docker.ProbePath, "probe", "--policy", docker.PolicyPath, "--nonce", nonce(t), "--no-network", "--only", "escape", "--termination-log", "/dev/null"}}
			run, err := e.verify(t, be, p, raw, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range c.fail {
				var f *report.Finding
				for i := range run.Findings {
					if run.Findings[i].Name() == name {
						f = &run.Findings[i]
					}
				}
				if f == nil || f.Status != report.Fail {
					t.Errorf("%s: %v, want fail; findings %v", name, f, names(run.Findings))
					continue
				}
				if f.Expected == "" || f.Actual == "" || f.Fix == "" {
					t.Errorf("%s: a failure needs expected, actual and fix: %+v", name, *f)
				}
				t.Logf("%s: %s", name, report.ExpectedActual(*f))
			}
			if len(c.fail) == 0 {
				for _, f := range run.Findings {
					if f.Check == "escape.module-load" && (f.Status != report.Pass || !strings.Contains(f.Actual, "no loadable module support")) {
						t.Errorf("escape.module-load: %s %q", f.Status, f.Actual)
					}
				}
				return
			}
			if run.ExitCode() != report.ExitNonConformant {
				t.Errorf("exit %d, want 1", run.ExitCode())
			}
		})
	}
}
