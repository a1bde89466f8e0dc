package probes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandprobe/sandprobe/result"
)

// cgroupControlFiles are the files whose write moves processes or changes
// limits; release_agent (cgroup v1, root of a hierarchy only) is the one the
// classic container escape writes: the kernel runs it as root on the host.
var cgroupControlFiles = []string{"cgroup.procs", "tasks", "notify_on_release", "cgroup.subtree_control"}

func checkCgroup(_ context.Context, env *Env) []result.Finding {
	return judgeCgroup(visibleMounts(readMounts(os.DirFS("/"))))
}

// judgeCgroup asks the kernel, for every cgroup filesystem the sandbox can
// see, whether this process may write its control files and release_agent
// (access(2) only: nothing is written).
func judgeCgroup(mounts []mountEntry) []result.Finding {
	const expFS = "no cgroup filesystem this process can write"
	const expAgent = "no writable release_agent"
	var cg []mountEntry
	for _, m := range mounts {
		if m.fstype == "cgroup" || m.fstype == "cgroup2" {
			cg = append(cg, m)
		}
	}
	if len(cg) == 0 {
		ev := "no cgroup or cgroup2 mount in /proc/self/mountinfo; mounting one needs CAP_SYS_ADMIN (see caps.sets)"
		return []result.Finding{pass("cgroupfs", expFS, "no cgroup filesystem mounted", ev), pass("release_agent", expAgent, "no cgroup filesystem mounted", ev)}
	}
	var seen, writable, agents, agentsWritable []string
	for _, m := range cg {
		mode := "rw"
		if m.readOnly() {
			mode = "ro"
		}
		seen = append(seen, fmt.Sprintf("%s (%s %s, root %s)", m.point, m.fstype, mode, m.root))
		for _, f := range cgroupControlFiles {
			p := filepath.Join(m.point, f)
			if err := writableFile(p); err == nil {
				writable = append(writable, p)
			}
		}
		p := filepath.Join(m.point, "release_agent")
		if _, err := os.Stat(p); err == nil {
			agents = append(agents, p)
			if writableFile(p) == nil {
				agentsWritable = append(agentsWritable, p)
			}
		}
	}
	ev := "cgroup mounts: " + firstN(seen, 6)
	var out []result.Finding
	if len(writable) > 0 {
		out = append(out, fail("cgroupfs", expFS, fmt.Sprintf("%s writable by this process (%s)", count(len(writable), "control file is", "control files are"), firstN(writable, 3)), ev))
	} else {
		out = append(out, pass("cgroupfs", expFS, fmt.Sprintf("%d cgroup mounts, no control file writable", len(cg)), ev))
	}
	switch {
	case len(agentsWritable) > 0:
		out = append(out, fail("release_agent", expAgent, "release_agent is writable: "+firstN(agentsWritable, 3)+" (the kernel runs that program as root on the host)", ev))
	case len(agents) > 0:
		out = append(out, pass("release_agent", expAgent, "release_agent present but not writable: "+firstN(agents, 3), ev))
	default:
		out = append(out, pass("release_agent", expAgent, "no release_agent visible (cgroup v2, or not the root of a v1 hierarchy)", ev))
	}
	return out
}
