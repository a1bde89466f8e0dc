package drift

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// What a container reaches and what reaches it: its network, its user,
// its proxy, its writable paths, its mounts and its environment.
const (
	DockerNetwork        = "drift.docker.network"
	DockerUser           = "drift.docker.user"
	DockerProxy          = "drift.docker.proxy"
	DockerTmpfs          = "drift.docker.tmpfs"
	DockerSensitiveMount = "drift.docker.sensitive-mount"
	DockerCredential     = "drift.docker.credential"
	DockerSecretEnv      = "drift.docker.secret-env"
)

var dockerReachRules = []dockerRule{
	{row{Rule{DockerNetwork, "the container is attached only to the declared internal network (or none)", high,
		"use --network NAME (an --internal network) or --network none"}, nil}, checkDockerNetwork},
	{row{Rule{DockerUser, "the container runs as the declared uid:gid, not root", high, "add --user UID:GID"}, nil}, checkDockerUser},
	{row{Rule{DockerProxy, "the proxy variables point at the declared proxy, in both spellings", medium,
		"add -e HTTP_PROXY=… -e http_proxy=… -e HTTPS_PROXY=… -e https_proxy=…"},
		func(s *policy.Spec) bool { return s.Egress.Proxy != "" }}, checkDockerProxy},
	{row{Rule{DockerTmpfs, "every declared writable path is a fresh tmpfs", low, "add --tmpfs PATH for each writable path"},
		func(s *policy.Spec) bool { return len(s.Filesystem.Writable) > 0 }}, checkDockerTmpfs},
	{row{Rule{DockerSensitiveMount, "no host socket, system directory or credential directory is mounted", critical,
		"remove the bind mount"}, nil}, checkDockerSensitiveMounts},
	{row{Rule{DockerCredential, "each declared credential is mounted read-only from its declared source", medium,
		"add --mount type=bind,src=SOURCE,dst=PATH,readonly"},
		func(s *policy.Spec) bool { return len(s.Credentials) > 0 }}, checkDockerCredentials},
	{row{Rule{DockerSecretEnv, "no credential reaches the container through its environment (names only are reported)", high,
		"remove -e NAME, or pass a declared placeholder"}, nil}, checkDockerSecretEnv},
}

// network: the declared internal network, or none, and nothing else.
func checkDockerNetwork(d *dockerCheck, c *DockerContainer) {
	want := d.e.p.Spec.Docker.Network
	if want == "" {
		want = "none"
	}
	hc := &c.HostConfig
	fix := "use --network " + want
	if want != "none" {
		fix += " (created with docker network create --internal)"
	}
	if hc.NetworkMode != want {
		ev := ""
		if hc.NetworkMode == "default" || hc.NetworkMode == "bridge" || hc.NetworkMode == "" {
			ev = "the default bridge network routes to the host and, with forwarding on, beyond"
		}
		d.failAt(dockerAt(dNetwork, 0, "HostConfig.NetworkMode"), want, orDefault(hc.NetworkMode, "default"), fix, ev)
		return
	}
	for _, name := range sortedKeys(c.NetworkSettings.Networks) {
		if name != want {
			d.failAt(dockerAt(dNetwork, 0, "NetworkSettings.Networks["+name+"]"), "only "+want, "also attached to "+name, "docker network disconnect "+name+" "+c.DisplayName(), "")
		}
	}
	internal, known := c.NetworkInternal[want]
	switch {
	case want == "none":
	case !known:
		// Offline (a `docker inspect` file) the network's own settings are
		// not there: say so, never pass it silently.
		d.failAt(dockerAt(dNetwork, 0, "network "+want), "an --internal network (no route out)", "not checked: whether network "+want+" is --internal is known only to the engine",
			"check it live: sandprobe drift --docker (or docker network inspect "+want+" --format '{{.Internal}}')", "")
		d.out[len(d.out)-1].Status = report.Skip
	case !internal:
		d.failAt(dockerAt(dNetwork, 0, "network "+want), "an --internal network (no route out)", "network "+want+" is not internal", "recreate it with docker network create --internal "+want, "")
	}
}

func checkDockerUser(d *dockerCheck, c *DockerContainer) {
	id := d.e.p.Spec.Identity
	want := fmt.Sprintf("%d:%d", id.UID, id.GID)
	u := c.Config.User
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
	d.failAt(dockerAt(dUser, 0, "Config.User"), want, actual, "add --user "+want, "")
}

func checkDockerProxy(d *dockerCheck, c *DockerContainer) {
	want := d.e.p.Spec.Egress.Proxy
	env := map[string]string{}
	for _, kv := range c.Config.Env {
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
	d.failAt(dockerAt(dProxy, 0, "Config.Env"), "HTTP_PROXY, http_proxy, HTTPS_PROXY and https_proxy = "+want, strings.Join(wrong, ", "),
		fmt.Sprintf("add -e HTTP_PROXY=%[1]s -e http_proxy=%[1]s -e HTTPS_PROXY=%[1]s -e https_proxy=%[1]s", want),
		"tools read one spelling or the other; a missing one sends that tool's traffic around the proxy")
}

func checkDockerTmpfs(d *dockerCheck, c *DockerContainer) {
	fsys := d.e.p.Spec.Filesystem
	have := map[string]int64{} // path → size in bytes, 0 when unbounded
	for p, opts := range c.HostConfig.Tmpfs {
		have[path.Clean(p)] = tmpfsSize(opts)
	}
	for _, m := range c.HostConfig.Mounts {
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
	// The phases' shared workspace is a volume by design (spec.phases):
	// mounted there, it is not a missing tmpfs.
	shared := ""
	if ws := d.e.p.Spec.Phases.Workspace; ws != "" {
		for _, m := range d.mounts() {
			if m.typ != "tmpfs" && path.Clean(m.dest) == path.Clean(ws) {
				shared = path.Clean(ws)
			}
		}
	}
	var missing, fixes []string
	for _, w := range fsys.Writable {
		if path.Clean(w) == shared {
			continue
		}
		size, ok := have[path.Clean(w)]
		flag := "--tmpfs " + w
		if limit > 0 {
			flag += ":size=" + policy.DockerBytes(limit)
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
	d.failAt(dockerAt(dTmpfs, 0, "HostConfig.Tmpfs"), want, strings.Join(missing, "; "), "add "+strings.Join(fixes, " "), "")
}

func sizeText(n int64) string {
	if n == 0 {
		return "unbounded (half the host's RAM)"
	}
	return policy.DockerBytes(n)
}

// credentialDirs are path segments that hold someone's credentials.
var credentialDirs = []string{".aws", ".kube", ".ssh", ".docker", ".azure", ".config/gcloud"}

// sensitiveSystemDirs are host paths a sandbox must never see.
var sensitiveSystemDirs = []string{"/proc", "/sys", "/etc", "/root"}

func checkDockerSensitiveMounts(d *dockerCheck, c *DockerContainer) {
	creds := d.e.p.Spec.Credentials
	for _, m := range d.mounts() {
		if isDeclaredCredential(m, creds) {
			continue
		}
		why := sensitiveMount(m)
		if why == "" {
			continue
		}
		d.failAt(dockerAt(dMounts, 0, "Mounts["+m.dest+"]"), "no host socket, system or credential directory mounted",
			fmt.Sprintf("%s %s mounted at %s (%s)", m.typ, m.source, m.dest, rwText(m.readOnly)),
			"remove the mount of "+m.source+" (-v/--mount …:"+m.dest+")", why)
	}
}

func checkDockerCredentials(d *dockerCheck, c *DockerContainer) {
	ms := d.mounts()
	for _, cr := range d.e.p.Spec.Credentials {
		var at *mount
		for i := range ms {
			if path.Clean(ms[i].dest) == path.Clean(cr.MountPath) {
				at = &ms[i]
			}
		}
		fix := fmt.Sprintf("add --mount type=bind,src=%s,dst=%s,readonly", cr.Source, cr.MountPath)
		want := fmt.Sprintf("%s read-only from %s at %s", cr.Name, cr.Source, cr.MountPath)
		where := dockerAt(dCredentials, 0, "Mounts["+cr.MountPath+"]")
		switch {
		case at == nil:
			d.failAt(where, want, "not mounted", fix, cr.Reason)
		case at.source != cr.Source:
			d.failAt(where, want, "mounted from "+at.source, fix, cr.Reason)
		case !at.readOnly:
			d.failAt(where, want, "mounted read-write", fix, cr.Reason)
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

func checkDockerSecretEnv(d *dockerCheck, c *DockerContainer) {
	s := &d.e.p.Spec
	for _, kv := range c.Config.Env {
		name, value, _ := strings.Cut(kv, "=")
		pat := d.e.secretName(name)
		if pat == "" || value == "" || slices.Contains(s.Secrets.Placeholders, value) {
			continue
		}
		d.failAt(dockerAt(dEnv, 0, "Config.Env["+name+"]"), "no credential in the environment",
			"set to a value that is not a declared placeholder (value not reported)",
			"remove -e "+name+" (mount a declared credential read-only, or pass a placeholder the broker swaps)",
			"name matches "+pat)
	}
}
