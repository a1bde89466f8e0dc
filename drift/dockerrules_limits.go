package drift

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sandprobe/sandprobe/policy"
)

// What a container may do and use: its root filesystem, capabilities,
// no_new_privs, and its pids, memory and CPU limits.
const (
	DockerReadOnlyRoot    = "drift.docker.readonly-root"
	DockerCapDrop         = "drift.docker.cap-drop"
	DockerCapAdd          = "drift.docker.cap-add"
	DockerNoNewPrivileges = "drift.docker.no-new-privileges"
	DockerPids            = "drift.docker.pids"
	DockerMemory          = "drift.docker.memory"
	DockerCPU             = "drift.docker.cpu"
)

var dockerLimitRules = []dockerRule{
	{row{Rule{DockerReadOnlyRoot, "the container's root filesystem is read-only", medium, "add --read-only"},
		func(s *policy.Spec) bool { return s.Filesystem.ReadOnlyRoot }}, checkDockerReadOnlyRoot},
	{row{Rule{DockerCapDrop, "the container drops ALL capabilities", high, "add --cap-drop ALL"}, nil}, checkDockerCapDrop},
	{row{Rule{DockerCapAdd, "the container adds no undeclared capability", high, "remove --cap-add"}, nil}, checkDockerCapAdd},
	{row{Rule{DockerNoNewPrivileges, "no_new_privs is set", high, "add --security-opt no-new-privileges"},
		func(s *policy.Spec) bool { return s.NoNewPrivs() }}, checkDockerNoNewPrivileges},
	{row{Rule{DockerPids, "the container has the declared pids limit", low, "add --pids-limit N"},
		func(s *policy.Spec) bool { return s.Resources.Pids > 0 }}, checkDockerPids},
	{row{Rule{DockerMemory, "the container has the declared memory limit", low, "add --memory SIZE"},
		func(s *policy.Spec) bool { return s.Resources.Limits["memory"] != "" }}, checkDockerMemory},
	{row{Rule{DockerCPU, "the container has the declared CPU limit", low, "add --cpus N"},
		func(s *policy.Spec) bool { return s.Resources.Limits["cpu"] != "" }}, checkDockerCPU},
}

func checkDockerReadOnlyRoot(d *dockerCheck, c *DockerContainer) {
	if !c.HostConfig.ReadonlyRootfs {
		d.failAt(dockerAt(dReadonlyRootfs, 0, "HostConfig.ReadonlyRootfs"), "true", "false", "add --read-only", "")
	}
}

func checkDockerCapDrop(d *dockerCheck, c *DockerContainer) {
	drop := c.HostConfig.CapDrop
	if !containsFold(normalizeCaps(drop), "ALL") {
		d.failAt(dockerAt(dCapDrop, 0, "HostConfig.CapDrop"), "[ALL]", "["+strings.Join(drop, ", ")+"]", "add --cap-drop ALL",
			"without it Docker's default set stays: CHOWN, DAC_OVERRIDE, FOWNER, NET_RAW, SETUID, SETGID, …")
	}
}

func checkDockerCapAdd(d *dockerCheck, c *DockerContainer) {
	for _, capName := range normalizeCaps(c.HostConfig.CapAdd) {
		if !d.e.caps[capName] {
			d.failAt(dockerAt(dCapAdd, 0, "HostConfig.CapAdd["+capName+"]"), capsWant(d.e.p.Spec.Capabilities), capName, "remove --cap-add "+capName, "")
		}
	}
}

func checkDockerNoNewPrivileges(d *dockerCheck, c *DockerContainer) {
	if opts := c.HostConfig.SecurityOpt; !hasNoNewPrivileges(opts) {
		d.failAt(dockerAt(dNoNewPrivileges, 0, "HostConfig.SecurityOpt"), "no-new-privileges", "["+strings.Join(opts, ", ")+"]",
			"add --security-opt no-new-privileges", "")
	}
}

func checkDockerPids(d *dockerCheck, c *DockerContainer) {
	want, at := d.e.p.Spec.Resources.Pids, dockerAt(dPidsLimit, 0, "HostConfig.PidsLimit")
	switch have := c.HostConfig.PidsLimit; {
	case have == nil || *have <= 0:
		d.failAt(at, strconv.FormatInt(want, 10), "unlimited", fmt.Sprintf("add --pids-limit %d", want), "")
	case *have > want:
		d.failAt(at, "at most "+strconv.FormatInt(want, 10), strconv.FormatInt(*have, 10), fmt.Sprintf("set --pids-limit %d", want), "")
	}
}

func checkDockerMemory(d *dockerCheck, c *DockerContainer) {
	text := d.e.p.Spec.Resources.Limits["memory"]
	want, _ := policy.ParseQuantity(text)
	at := dockerAt(dMemory, 0, "HostConfig.Memory")
	switch have := c.HostConfig.Memory; {
	case have <= 0:
		d.failAt(at, text+" ("+strconv.FormatInt(int64(want), 10)+" bytes)", "unlimited", "add --memory "+policy.DockerBytes(int64(want)), "")
	case float64(have) > want:
		d.failAt(at, "at most "+text, strconv.FormatInt(have, 10)+" bytes", "set --memory "+policy.DockerBytes(int64(want)), "")
	}
}

func checkDockerCPU(d *dockerCheck, c *DockerContainer) {
	text := d.e.p.Spec.Resources.Limits["cpu"]
	want, _ := policy.ParseQuantity(text)
	at := dockerAt(dCPU, 0, "HostConfig.NanoCpus")
	switch have := c.cpus(); {
	case have <= 0:
		d.failAt(at, "--cpus "+text, "unlimited", "add --cpus "+cpusText(want), "")
	case have > want+1e-9:
		d.failAt(at, "at most --cpus "+text, "--cpus "+cpusText(have), "set --cpus "+cpusText(want), "")
	}
}
