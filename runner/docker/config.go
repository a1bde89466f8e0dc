package docker

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/runner"
)

// ProbeCommand is the command line of the probe inside the container.
func ProbeCommand(spec runner.ProbeSpec, class string, imageCmd []string, entrypointTimeout time.Duration) []string {
	argv := []string{ProbePath, "probe", "--policy", PolicyPath, "--nonce", spec.Nonce, "--termination-log", "/dev/null"}
	if class != "" {
		argv = append(argv, "--runtime-class", class)
	}
	if spec.NoNetwork {
		argv = append(argv, "--no-network")
	}
	if spec.Only != "" {
		argv = append(argv, "--only", spec.Only)
	}
	if len(imageCmd) > 0 {
		b, _ := json.Marshal(imageCmd)
		argv = append(argv, "--image-command", string(b), "--image-command-timeout", entrypointTimeout.String())
	}
	return argv
}

// ContainerConfig turns the policy into the container's configuration: what
// `docker run --read-only --user U:G --cap-drop ALL --security-opt
// no-new-privileges --tmpfs … --memory … --pids-limit … --network none
// --runtime R IMAGE` would create.
func ContainerConfig(p *policy.Policy, image, runtime, network string, env []string) (*container.Config, *container.HostConfig) {
	s := p.Spec
	cfg := &container.Config{
		Image: image,
		User:  fmt.Sprintf("%d:%d", s.Identity.UID, s.Identity.GID),
		Env:   append([]string(nil), env...),
	}
	if network == "" {
		network = "none"
	}
	host := &container.HostConfig{
		ReadonlyRootfs: s.Filesystem.ReadOnlyRoot,
		CapDrop:        []string{"ALL"},
		CapAdd:         append([]string(nil), s.Capabilities...),
		NetworkMode:    container.NetworkMode(network),
		Runtime:        runtime,
		Tmpfs:          map[string]string{},
		// The result is read from the logs after exit, whatever the daemon's default driver.
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "8m"}},
	}
	if s.NoNewPrivs() {
		host.SecurityOpt = append(host.SecurityOpt, "no-new-privileges")
	}
	switch s.Seccomp {
	case policy.SeccompUnconfined:
		host.SecurityOpt = append(host.SecurityOpt, "seccomp=unconfined")
	case policy.SeccompLocalhost:
		if b, err := os.ReadFile(s.SeccompProfile); err == nil {
			host.SecurityOpt = append(host.SecurityOpt, "seccomp="+string(b))
		}
	} // RuntimeDefault: Docker's default profile applies when nothing is said.
	groups := append([]int64(nil), s.Identity.SupplementalGroups...)
	if s.Identity.FSGroup != nil {
		groups = append(groups, *s.Identity.FSGroup)
	}
	for _, g := range groups {
		host.GroupAdd = append(host.GroupAdd, strconv.FormatInt(g, 10))
	}
	size := ""
	if s.Filesystem.SizeLimit != "" {
		if q, err := policy.ParseQuantity(s.Filesystem.SizeLimit); err == nil {
			size = fmt.Sprintf(",size=%d", int64(q))
		}
	}
	ownerGID := s.Identity.GID
	if s.Identity.FSGroup != nil {
		ownerGID = *s.Identity.FSGroup
	}
	for _, w := range s.Filesystem.Writable {
		// exec: an emptyDir is not noexec, and build jobs run what they build.
		host.Tmpfs[w] = "rw,exec,nosuid,nodev,mode=1777" + size
	}
	for _, e := range s.Filesystem.EmptyAtStart {
		// The workspace belongs to the sandbox's uid, as an emptyDir with
		// fsGroup does; without uid= runc would give it the image
		// directory's owner-less mode and the uid could not write its own
		// workspace.
		host.Tmpfs[e] = fmt.Sprintf("rw,exec,nosuid,nodev,mode=1777,uid=%d,gid=%d%s", s.Identity.UID, ownerGID, size)
	}
	if q, err := policy.ParseQuantity(s.Resources.Limits["memory"]); err == nil && q > 0 {
		host.Memory = int64(q)
		host.MemorySwap = int64(q) // no swap beyond the limit, as in a pod
	}
	if q, err := policy.ParseQuantity(s.Resources.Limits["cpu"]); err == nil && q > 0 {
		host.NanoCPUs = int64(q * 1e9)
	}
	if s.Resources.Pids > 0 {
		pids := s.Resources.Pids
		host.PidsLimit = &pids
	}
	return cfg, host
}
