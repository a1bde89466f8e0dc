package render

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sandprobe/sandprobe/policy"
)

// DockerOptions tune the docker argv.
type DockerOptions struct {
	Name string // --name; default sandprobe-probe-<policy>
	// Image is the container image; default spec.image.ref, then the probe image.
	Image      string
	ProbeImage string // default spec.probe.image, then DefaultProbeImage
	// ProbeBinary is the host path of the static probe binary
	// (sandprobe-probe, or sandprobe), bind-mounted read-only when the
	// container runs spec.image.ref (which lacks it).
	ProbeBinary string
	Nonce       string
	// Command replaces `probe --policy - --nonce N`: the sandbox's own work.
	Command []string
}

// DockerCommand is a `docker run` invocation, split so callers can turn it
// into `docker create` or API calls.
type DockerCommand struct {
	Flags []string // everything between "run" and the image
	Image string
	Args  []string
}

// Argv is the full command line: docker run FLAGS IMAGE ARGS.
func (d DockerCommand) Argv() []string {
	out := append([]string{"docker", "run"}, d.Flags...)
	out = append(out, d.Image)
	return append(out, d.Args...)
}

// String is the argv quoted for a POSIX shell.
func (d DockerCommand) String() string {
	argv := d.Argv()
	parts := make([]string, len(argv))
	for i, a := range argv {
		parts[i] = ShellQuote(a)
	}
	return strings.Join(parts, " ")
}

// ShellQuote quotes a word for sh unless it is plainly safe.
func ShellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@+%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Docker renders the policy as a `docker run`: the same constraints a
// sandbox container runs under. The policy reaches the probe on stdin.
func Docker(p *policy.Policy, opts DockerOptions) DockerCommand {
	s := &p.Spec
	if opts.Name == "" {
		opts.Name = "sandprobe-probe-" + p.Metadata.Name
	}
	if opts.ProbeImage == "" {
		opts.ProbeImage = s.Probe.Image
	}
	if opts.ProbeImage == "" {
		opts.ProbeImage = DefaultProbeImage
	}
	entry := ""
	if opts.Image == "" {
		opts.Image = opts.ProbeImage
		if s.Image.Ref != "" {
			opts.Image = s.Image.Ref
		}
	}
	f := []string{"--rm", "-i", "--name", opts.Name}
	f = append(f, dockerIdentityFlags(p)...)
	f = append(f, dockerLimitFlags(s)...)
	add := func(xs ...string) { f = append(f, xs...) }
	network := s.Docker.Network
	if network == "" {
		network = "none"
	}
	add("--network", network)
	var size string
	if s.Filesystem.SizeLimit != "" {
		if n, err := policy.ParseQuantity(s.Filesystem.SizeLimit); err == nil {
			size = ",size=" + policy.DockerBytes(int64(n))
		}
	}
	for _, w := range s.Filesystem.Writable {
		add("--tmpfs", w+":rw,mode=1777"+size)
	}
	if s.Egress.Proxy != "" {
		for _, k := range ProxyVariables() {
			add("-e", k+"="+s.Egress.Proxy)
		}
	}
	for _, c := range s.Credentials {
		add("--mount", "type=bind,src="+c.Source+",dst="+c.MountPath+",readonly")
	}
	if opts.Image != opts.ProbeImage && len(opts.Command) == 0 {
		// The sandbox image lacks sandprobe: bind the static binary in.
		bin := opts.ProbeBinary
		if bin == "" {
			bin = "/usr/local/bin/sandprobe-probe"
		}
		add("--mount", "type=bind,src="+bin+",dst="+ProbeBinary+",readonly")
		entry = ProbeBinary
	}
	if entry != "" {
		add("--entrypoint", entry)
	}
	args := opts.Command
	if len(args) == 0 {
		args = []string{"probe", "--policy", "-"}
		if opts.Nonce != "" {
			args = append(args, "--nonce", opts.Nonce)
		}
	}
	return DockerCommand{Flags: f, Image: opts.Image, Args: args}
}

// dockerIdentityFlags are what the sandbox is and may do: its labels,
// runtime, read-only root, user and groups, capabilities and privileges.
func dockerIdentityFlags(p *policy.Policy) []string {
	s := &p.Spec
	var f []string
	for _, k := range sortedKeys(s.Selector.MatchLabels) {
		f = append(f, "--label", k+"="+s.Selector.MatchLabels[k])
	}
	f = append(f, "--label", LabelPolicy+"="+p.Metadata.Name)
	if len(s.Runtime.ClassNames) > 0 {
		f = append(f, "--runtime", s.Runtime.ClassNames[0])
	}
	if s.Filesystem.ReadOnlyRoot {
		f = append(f, "--read-only")
	}
	f = append(f, "--user", fmt.Sprintf("%d:%d", s.Identity.UID, s.Identity.GID))
	for _, g := range s.Identity.SupplementalGroups {
		f = append(f, "--group-add", strconv.FormatInt(g, 10))
	}
	f = append(f, "--cap-drop", "ALL")
	for _, c := range s.Capabilities {
		f = append(f, "--cap-add", policy.NormalizeCapability(c))
	}
	if s.NoNewPrivs() {
		f = append(f, "--security-opt", "no-new-privileges")
	}
	return f
}

// dockerLimitFlags are the sandbox's resource limits.
func dockerLimitFlags(s *policy.Spec) []string {
	var f []string
	if s.Resources.Pids > 0 {
		f = append(f, "--pids-limit", strconv.FormatInt(s.Resources.Pids, 10))
	}
	if v := s.Resources.Limits["memory"]; v != "" {
		if n, err := policy.ParseQuantity(v); err == nil {
			f = append(f, "--memory", policy.DockerBytes(int64(n)))
		}
	}
	if v := s.Resources.Limits["cpu"]; v != "" {
		if n, err := policy.ParseQuantity(v); err == nil {
			f = append(f, "--cpus", strconv.FormatFloat(n, 'f', -1, 64))
		}
	}
	return f
}

// DockerNotes are what a `docker run` of the policy will not do as the
// policy says: a declared proxy that the container cannot reach, because
// its network is none (spec.docker.network unset: the default). The run
// would still be tight, but every allowance would fail.
func DockerNotes(p *policy.Policy) []string {
	s := &p.Spec
	if s.Egress.Proxy == "" || (s.Docker.Network != "" && s.Docker.Network != "none") {
		return nil
	}
	how := "spec.docker.network is none"
	if s.Docker.Network == "" {
		how = "spec.docker.network is unset, so the container runs with --network none"
	}
	return []string{fmt.Sprintf("%s, but spec.egress.proxy declares %s: the container cannot reach the proxy, so every allowance fails; set spec.docker.network to a network that reaches the proxy and nothing else (docs/docker.md)", how, s.Egress.Proxy)}
}
