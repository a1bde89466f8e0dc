package drift

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// DockerContainer is the part of `docker inspect` the rules read. Live and
// offline checks decode the same JSON into it, so a file saved with
// `docker inspect` is judged exactly like the running container.
type DockerContainer struct {
	ID     string `json:"Id"`
	Name   string `json:"Name"`
	Image  string `json:"Image"`
	Config struct {
		User   string            `json:"User"`
		Env    []string          `json:"Env"`
		Image  string            `json:"Image"`
		Labels map[string]string `json:"Labels"`
	} `json:"Config"`
	HostConfig struct {
		Binds          []string          `json:"Binds"`
		NetworkMode    string            `json:"NetworkMode"`
		CapAdd         []string          `json:"CapAdd"`
		CapDrop        []string          `json:"CapDrop"`
		SecurityOpt    []string          `json:"SecurityOpt"`
		Privileged     bool              `json:"Privileged"`
		ReadonlyRootfs bool              `json:"ReadonlyRootfs"`
		PidMode        string            `json:"PidMode"`
		IpcMode        string            `json:"IpcMode"`
		UTSMode        string            `json:"UTSMode"`
		UsernsMode     string            `json:"UsernsMode"`
		Runtime        string            `json:"Runtime"`
		Memory         int64             `json:"Memory"`
		NanoCpus       int64             `json:"NanoCpus"`
		CPUQuota       int64             `json:"CpuQuota"`
		CPUPeriod      int64             `json:"CpuPeriod"`
		PidsLimit      *int64            `json:"PidsLimit"`
		Tmpfs          map[string]string `json:"Tmpfs"`
		Devices        []struct {
			PathOnHost      string `json:"PathOnHost"`
			PathInContainer string `json:"PathInContainer"`
		} `json:"Devices"`
		Mounts []struct {
			Type         string `json:"Type"`
			Source       string `json:"Source"`
			Target       string `json:"Target"`
			ReadOnly     bool   `json:"ReadOnly"`
			TmpfsOptions *struct {
				SizeBytes int64 `json:"SizeBytes"`
			} `json:"TmpfsOptions"`
		} `json:"Mounts"`
	} `json:"HostConfig"`
	Mounts []struct {
		Type        string `json:"Type"`
		Name        string `json:"Name"`
		Source      string `json:"Source"`
		Destination string `json:"Destination"`
		RW          bool   `json:"RW"`
	} `json:"Mounts"`
	NetworkSettings struct {
		Networks map[string]json.RawMessage `json:"Networks"`
	} `json:"NetworkSettings"`

	// NetworkInternal says, for live checks, whether each attached network
	// was created --internal. Offline files cannot tell; it is nil there.
	NetworkInternal map[string]bool `json:"-"`
}

// ParseDockerInspect reads what `docker inspect` prints: a JSON list of
// containers (a single object is accepted too).
func ParseDockerInspect(data []byte) ([]DockerContainer, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, fmt.Errorf("empty docker inspect output")
	}
	var cs []DockerContainer
	if data[0] == '{' {
		var c DockerContainer
		if err := json.Unmarshal(data, &c); err != nil {
			return nil, fmt.Errorf("decode docker inspect object: %w", err)
		}
		cs = []DockerContainer{c}
	} else if err := json.Unmarshal(data, &cs); err != nil {
		return nil, fmt.Errorf("decode docker inspect list: %w", err)
	}
	for i, c := range cs {
		if c.ID == "" && c.Name == "" {
			return nil, fmt.Errorf("docker inspect item %d: no Id or Name: not a container", i)
		}
	}
	return cs, nil
}

// DisplayName is the container's name without Docker's leading slash.
func (c *DockerContainer) DisplayName() string {
	if n := strings.TrimPrefix(c.Name, "/"); n != "" {
		return n
	}
	if len(c.ID) > 12 {
		return c.ID[:12]
	}
	return c.ID
}

// mount is one filesystem mount as the rules see it.
type mount struct {
	typ, source, dest string
	readOnly          bool
}

// mounts merges the runtime's view (.Mounts) with the configuration
// (HostConfig.Binds, HostConfig.Mounts) so a created-but-never-started
// container is judged by what it would get.
func (c *DockerContainer) mounts() []mount {
	var out []mount
	seen := map[string]bool{}
	add := func(m mount) {
		if m.dest == "" || seen[m.dest] {
			return
		}
		seen[m.dest] = true
		out = append(out, m)
	}
	for _, m := range c.Mounts {
		src := m.Source
		if m.Type == "volume" && m.Name != "" {
			src = m.Name
		}
		add(mount{typ: m.Type, source: src, dest: m.Destination, readOnly: !m.RW})
	}
	for _, b := range c.HostConfig.Binds {
		parts := strings.Split(b, ":")
		if len(parts) < 2 {
			continue
		}
		ro := len(parts) > 2 && slices.Contains(strings.Split(parts[2], ","), "ro")
		typ := "bind"
		if !strings.HasPrefix(parts[0], "/") {
			typ = "volume"
		}
		add(mount{typ: typ, source: parts[0], dest: parts[1], readOnly: ro})
	}
	for _, m := range c.HostConfig.Mounts {
		add(mount{typ: m.Type, source: m.Source, dest: m.Target, readOnly: m.ReadOnly})
	}
	return out
}

// dockerCheck is one container going through the Docker rules.
type dockerCheck struct {
	e      *Engine
	c      *DockerContainer
	target string
	out    []report.Finding
}

func (d *dockerCheck) fail(rule, subject, expected, actual, fix, evidence string) {
	where := "container " + d.c.DisplayName()
	if len(d.c.ID) >= 12 {
		where += " (" + d.c.ID[:12] + ")"
	}
	where += " from image " + d.c.Config.Image
	if evidence == "" {
		evidence = where
	} else {
		evidence = where + "; " + evidence
	}
	d.out = append(d.out, report.Finding{
		Check: rule, Target: d.target, Subject: subject, Status: report.Fail,
		Expected: expected, Actual: actual, Fix: fix, Evidence: evidence,
	})
}

// CheckContainer applies the Docker rules to one inspected container.
func (e *Engine) CheckContainer(c *DockerContainer) []report.Finding {
	d := &dockerCheck{e: e, c: c, target: containerTarget(c.DisplayName())}
	d.run()
	return d.out
}

func (d *dockerCheck) run() {
	s, hc := &d.e.p.Spec, &d.c.HostConfig
	if s.Filesystem.ReadOnlyRoot && !hc.ReadonlyRootfs {
		d.fail(DockerReadOnlyRoot, "HostConfig.ReadonlyRootfs", "true", "false", "add --read-only", "")
	}
	if !containsFold(normalizeCaps(hc.CapDrop), "ALL") {
		d.fail(DockerCapDrop, "HostConfig.CapDrop", "[ALL]", "["+strings.Join(hc.CapDrop, ", ")+"]", "add --cap-drop ALL",
			"without it Docker's default set stays: CHOWN, DAC_OVERRIDE, FOWNER, NET_RAW, SETUID, SETGID, …")
	}
	for _, capName := range normalizeCaps(hc.CapAdd) {
		if !d.e.caps[capName] {
			d.fail(DockerCapAdd, "HostConfig.CapAdd["+capName+"]", capsWant(s.Capabilities), capName, "remove --cap-add "+capName, "")
		}
	}
	if s.NoNewPrivs() && !hasNoNewPrivileges(hc.SecurityOpt) {
		d.fail(DockerNoNewPrivileges, "HostConfig.SecurityOpt", "no-new-privileges", "["+strings.Join(hc.SecurityOpt, ", ")+"]",
			"add --security-opt no-new-privileges", "")
	}
	if want := s.Resources.Pids; want > 0 {
		switch have := hc.PidsLimit; {
		case have == nil || *have <= 0:
			d.fail(DockerPids, "HostConfig.PidsLimit", strconv.FormatInt(want, 10), "unlimited", fmt.Sprintf("add --pids-limit %d", want), "")
		case *have > want:
			d.fail(DockerPids, "HostConfig.PidsLimit", "at most "+strconv.FormatInt(want, 10), strconv.FormatInt(*have, 10), fmt.Sprintf("set --pids-limit %d", want), "")
		}
	}
	if text := s.Resources.Limits["memory"]; text != "" {
		want, _ := policy.ParseQuantity(text)
		switch have := hc.Memory; {
		case have <= 0:
			d.fail(DockerMemory, "HostConfig.Memory", text+" ("+strconv.FormatInt(int64(want), 10)+" bytes)", "unlimited", "add --memory "+dockerBytes(int64(want)), "")
		case float64(have) > want:
			d.fail(DockerMemory, "HostConfig.Memory", "at most "+text, strconv.FormatInt(have, 10)+" bytes", "set --memory "+dockerBytes(int64(want)), "")
		}
	}
	if text := s.Resources.Limits["cpu"]; text != "" {
		want, _ := policy.ParseQuantity(text)
		have := d.c.cpus()
		switch {
		case have <= 0:
			d.fail(DockerCPU, "HostConfig.NanoCpus", "--cpus "+text, "unlimited", "add --cpus "+cpusText(want), "")
		case have > want+1e-9:
			d.fail(DockerCPU, "HostConfig.NanoCpus", "at most --cpus "+text, "--cpus "+cpusText(have), "set --cpus "+cpusText(want), "")
		}
	}
	d.network()
	d.user()
	d.proxy()
	d.tmpfs()
	d.mountRules()
	d.secretEnv()
	if hc.Privileged {
		d.fail(DockerPrivileged, "HostConfig.Privileged", "false", "true", "remove --privileged", "every capability and every host device")
	}
	for _, ns := range []struct{ field, mode, flag string }{
		{"HostConfig.PidMode", hc.PidMode, "--pid"}, {"HostConfig.IpcMode", hc.IpcMode, "--ipc"},
		{"HostConfig.UTSMode", hc.UTSMode, "--uts"}, {"HostConfig.UsernsMode", hc.UsernsMode, "--userns"},
	} {
		if ns.mode == "host" || strings.HasPrefix(ns.mode, "container:") {
			d.fail(DockerHostNamespaces, ns.field, "a private namespace", ns.mode, "remove "+ns.flag+" "+ns.mode, "")
		}
	}
	for _, opt := range hc.SecurityOpt {
		k, v := splitSecurityOpt(opt)
		switch {
		case k == "seccomp" && v == "unconfined" && s.Seccomp != policy.SeccompUnconfined:
			d.fail(DockerSeccomp, "HostConfig.SecurityOpt", "Docker's default seccomp profile (or a stricter one)", opt, "remove --security-opt "+opt, "")
		case k == "apparmor" && v == "unconfined":
			d.fail(DockerAppArmor, "HostConfig.SecurityOpt", "the default AppArmor profile", opt, "remove --security-opt "+opt, "")
		}
	}
	for _, dev := range hc.Devices {
		d.fail(DockerDevices, "HostConfig.Devices["+dev.PathOnHost+"]", "no host devices", dev.PathOnHost+" → "+dev.PathInContainer, "remove --device "+dev.PathOnHost, "")
	}
	if len(d.e.classes) > 0 && !d.e.classes[hc.Runtime] {
		d.fail(DockerRuntime, "HostConfig.Runtime", "one of "+strings.Join(s.Runtime.ClassNames, ", "), orDefault(hc.Runtime, "the daemon's default (runc)"),
			"add --runtime "+s.Runtime.ClassNames[0], "")
	}
	if s.Image.RequireDigest && !strings.Contains(d.c.Config.Image, "@sha256:") {
		d.fail(DockerImageDigest, "Config.Image", "an image pinned by digest (@sha256:…)", d.c.Config.Image,
			"run "+imageRepo(d.c.Config.Image)+"@sha256:<digest>", "image ID "+d.c.Image)
	}
}

// cpus is the CPU limit in CPUs, from --cpus or --cpu-quota/--cpu-period.
func (c *DockerContainer) cpus() float64 {
	hc := &c.HostConfig
	if hc.NanoCpus > 0 {
		return float64(hc.NanoCpus) / 1e9
	}
	if hc.CPUQuota > 0 {
		period := hc.CPUPeriod
		if period <= 0 {
			period = 100000
		}
		return float64(hc.CPUQuota) / float64(period)
	}
	return 0
}

// network: the declared internal network, or none, and nothing else.
func (d *dockerCheck) network() {
	want := d.e.p.Spec.Docker.Network
	if want == "" {
		want = "none"
	}
	hc := &d.c.HostConfig
	fix := "use --network " + want
	if want != "none" {
		fix += " (created with docker network create --internal)"
	}
	if hc.NetworkMode != want {
		ev := ""
		if hc.NetworkMode == "default" || hc.NetworkMode == "bridge" || hc.NetworkMode == "" {
			ev = "the default bridge network routes to the host and, with forwarding on, beyond"
		}
		d.fail(DockerNetwork, "HostConfig.NetworkMode", want, orDefault(hc.NetworkMode, "default"), fix, ev)
		return
	}
	for _, name := range sortedKeys(d.c.NetworkSettings.Networks) {
		if name != want {
			d.fail(DockerNetwork, "NetworkSettings.Networks["+name+"]", "only "+want, "also attached to "+name, "docker network disconnect "+name+" "+d.c.DisplayName(), "")
		}
	}
	internal, known := d.c.NetworkInternal[want]
	switch {
	case want == "none":
	case !known:
		// Offline (a `docker inspect` file) the network's own settings are
		// not there: say so, never pass it silently.
		d.fail(DockerNetwork, "network "+want, "an --internal network (no route out)", "not checked: whether network "+want+" is --internal is known only to the engine",
			"check it live: sandprobe drift --docker (or docker network inspect "+want+" --format '{{.Internal}}')", "")
		d.out[len(d.out)-1].Status = report.Skip
	case !internal:
		d.fail(DockerNetwork, "network "+want, "an --internal network (no route out)", "network "+want+" is not internal", "recreate it with docker network create --internal "+want, "")
	}
}

func (d *dockerCheck) user() {
	id := d.e.p.Spec.Identity
	want := fmt.Sprintf("%d:%d", id.UID, id.GID)
	u := d.c.Config.User
	uid, gid, hasGID := strings.Cut(u, ":")
	if u != "" && uid == strconv.FormatInt(id.UID, 10) && hasGID && gid == strconv.FormatInt(id.GID, 10) {
		return
	}
	actual := u
	switch {
	case u == "":
		actual = "unset (the image's USER, root unless the image says otherwise)"
	case uid == "0" || uid == "root":
		actual = u + " (root)"
	case !hasGID:
		actual = u + " (no group: the image decides, often 0)"
	}
	d.fail(DockerUser, "Config.User", want, actual, "add --user "+want, "")
}

func (d *dockerCheck) proxy() {
	want := d.e.p.Spec.Egress.Proxy
	if want == "" {
		return
	}
	env := map[string]string{}
	for _, kv := range d.c.Config.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	var wrong []string
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"} {
		v, ok := env[k]
		switch {
		case !ok:
			wrong = append(wrong, k+" unset")
		case strings.TrimSuffix(v, "/") != strings.TrimSuffix(want, "/"):
			wrong = append(wrong, k+"="+v)
		}
	}
	if len(wrong) == 0 {
		return
	}
	d.fail(DockerProxy, "Config.Env", "HTTP_PROXY, http_proxy, HTTPS_PROXY and https_proxy = "+want, strings.Join(wrong, ", "),
		fmt.Sprintf("add -e HTTP_PROXY=%[1]s -e http_proxy=%[1]s -e HTTPS_PROXY=%[1]s -e https_proxy=%[1]s", want),
		"tools read one spelling or the other; a missing one sends that tool's traffic around the proxy")
}

func (d *dockerCheck) tmpfs() {
	fsys := d.e.p.Spec.Filesystem
	if len(fsys.Writable) == 0 {
		return
	}
	have := map[string]int64{} // path → size in bytes, 0 when unbounded
	for p, opts := range d.c.HostConfig.Tmpfs {
		have[path.Clean(p)] = tmpfsSize(opts)
	}
	for _, m := range d.c.HostConfig.Mounts {
		if m.Type == "tmpfs" {
			var size int64
			if m.TmpfsOptions != nil {
				size = m.TmpfsOptions.SizeBytes
			}
			have[path.Clean(m.Target)] = size
		}
	}
	var limit int64
	if fsys.SizeLimit != "" {
		v, _ := policy.ParseQuantity(fsys.SizeLimit)
		limit = int64(v)
	}
	var missing, fixes []string
	for _, w := range fsys.Writable {
		size, ok := have[path.Clean(w)]
		flag := "--tmpfs " + w
		if limit > 0 {
			flag += ":size=" + dockerBytes(limit)
		}
		switch {
		case !ok:
			missing = append(missing, w+" is not a tmpfs")
			fixes = append(fixes, flag)
		case limit > 0 && (size == 0 || size > limit):
			missing = append(missing, fmt.Sprintf("%s tmpfs size %s", w, sizeText(size)))
			fixes = append(fixes, flag)
		}
	}
	if len(missing) == 0 {
		return
	}
	want := "a fresh tmpfs at " + strings.Join(fsys.Writable, ", ")
	if limit > 0 {
		want += " of at most " + fsys.SizeLimit
	}
	d.fail(DockerTmpfs, "HostConfig.Tmpfs", want, strings.Join(missing, "; "), "add "+strings.Join(fixes, " "), "")
}

func sizeText(n int64) string {
	if n == 0 {
		return "unbounded (half the host's RAM)"
	}
	return dockerBytes(n)
}

// credentialDirs are path segments that hold someone's credentials.
var credentialDirs = []string{".aws", ".kube", ".ssh", ".docker", ".azure", ".config/gcloud"}

// sensitiveSystemDirs are host paths a sandbox must never see.
var sensitiveSystemDirs = []string{"/proc", "/sys", "/etc", "/root"}

func (d *dockerCheck) mountRules() {
	creds := d.e.p.Spec.Credentials
	ms := d.c.mounts()
	for _, m := range ms {
		if isDeclaredCredential(m, creds) {
			continue
		}
		why := sensitiveMount(m)
		if why == "" {
			continue
		}
		d.fail(DockerSensitiveMount, "Mounts["+m.dest+"]", "no host socket, system or credential directory mounted",
			fmt.Sprintf("%s %s mounted at %s (%s)", m.typ, m.source, m.dest, rwText(m.readOnly)),
			"remove the mount of "+m.source+" (-v/--mount …:"+m.dest+")", why)
	}
	for _, cr := range creds {
		var at *mount
		for i := range ms {
			if path.Clean(ms[i].dest) == path.Clean(cr.MountPath) {
				at = &ms[i]
			}
		}
		fix := fmt.Sprintf("add --mount type=bind,src=%s,dst=%s,readonly", cr.Source, cr.MountPath)
		want := fmt.Sprintf("%s read-only from %s at %s", cr.Name, cr.Source, cr.MountPath)
		switch {
		case at == nil:
			d.fail(DockerCredential, "Mounts["+cr.MountPath+"]", want, "not mounted", fix, cr.Reason)
		case at.source != cr.Source:
			d.fail(DockerCredential, "Mounts["+cr.MountPath+"]", want, "mounted from "+at.source, fix, cr.Reason)
		case !at.readOnly:
			d.fail(DockerCredential, "Mounts["+cr.MountPath+"]", want, "mounted read-write", fix, cr.Reason)
		}
	}
}

func isDeclaredCredential(m mount, creds []policy.Credential) bool {
	for _, c := range creds {
		if path.Clean(m.dest) == path.Clean(c.MountPath) && m.source == c.Source {
			return true
		}
	}
	return false
}

// sensitiveMount says why a mount must not reach a sandbox, or "".
func sensitiveMount(m mount) string {
	if m.typ == "tmpfs" {
		return ""
	}
	src := path.Clean(m.source)
	if path.Base(src) == "docker.sock" || path.Base(path.Clean(m.dest)) == "docker.sock" {
		return "the Docker socket: whoever holds it is root on the host"
	}
	if m.typ == "bind" && src == "/" {
		return "the host's root filesystem"
	}
	if m.typ == "bind" {
		for _, dir := range sensitiveSystemDirs {
			if src == dir || strings.HasPrefix(src, dir+"/") {
				if dir == "/root" && strings.HasPrefix(src, "/root/") {
					if cd := credentialDir(src); cd != "" {
						return "a credentials directory (" + cd + ")"
					}
				}
				return "the host's " + dir
			}
		}
	}
	if cd := credentialDir(src); cd != "" {
		return "a credentials directory (" + cd + ")"
	}
	if cd := credentialDir(path.Clean(m.dest)); cd != "" {
		return "a credentials directory (" + cd + ")"
	}
	return ""
}

func credentialDir(p string) string {
	p += "/"
	for _, d := range credentialDirs {
		if strings.Contains(p, "/"+d+"/") {
			return d
		}
	}
	return ""
}

func rwText(ro bool) string {
	if ro {
		return "read-only"
	}
	return "read-write"
}

func (d *dockerCheck) secretEnv() {
	s := &d.e.p.Spec
	for _, kv := range d.c.Config.Env {
		name, value, _ := strings.Cut(kv, "=")
		pat := d.e.secretName(name)
		if pat == "" || value == "" || slices.Contains(s.Secrets.Placeholders, value) {
			continue
		}
		d.fail(DockerSecretEnv, "Config.Env["+name+"]", "no credential in the environment",
			"set to a value that is not a declared placeholder (value not reported)",
			"remove -e "+name+" (mount a declared credential read-only, or pass a placeholder the broker swaps)",
			"name matches "+pat)
	}
}

func normalizeCaps(cs []string) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, policy.NormalizeCapability(c))
	}
	return out
}

func hasNoNewPrivileges(opts []string) bool {
	for _, o := range opts {
		k, v := splitSecurityOpt(o)
		if k == "no-new-privileges" && (v == "" || v == "true") {
			return true
		}
	}
	return false
}

// splitSecurityOpt splits "seccomp=unconfined" and the older "seccomp:unconfined".
func splitSecurityOpt(o string) (string, string) {
	if k, v, ok := strings.Cut(o, "="); ok {
		return k, v
	}
	k, v, _ := strings.Cut(o, ":")
	return k, v
}

// tmpfsSize reads size= from tmpfs options ("rw,size=64m,mode=1777").
func tmpfsSize(opts string) int64 {
	for _, o := range strings.Split(opts, ",") {
		if v, ok := strings.CutPrefix(o, "size="); ok {
			n, err := parseDockerBytes(v)
			if err == nil {
				return n
			}
		}
	}
	return 0
}

// parseDockerBytes parses Docker's sizes: 64m, 1g, 512k, 1024 (binary units).
func parseDockerBytes(s string) (int64, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for suffix, m := range map[string]int64{"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40} {
		if strings.HasSuffix(s, suffix) || strings.HasSuffix(s, suffix+"b") {
			s = strings.TrimSuffix(strings.TrimSuffix(s, "b"), suffix)
			mult = m
			break
		}
	}
	s = strings.TrimSuffix(s, "b")
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return int64(v * float64(mult)), nil
}

// dockerBytes writes a byte count the way Docker's flags take it.
func dockerBytes(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

func cpusText(v float64) string {
	return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
}
