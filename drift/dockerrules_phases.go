package drift

import (
	"path"
	"strings"

	"github.com/sandprobe/sandprobe/policy"
)

// What one phase of an attempt leaves for the next, in a Docker container:
// as PodHomeOnWorkspace.
const (
	DockerHomeOnWorkspace = "drift.docker.home-on-workspace"
)

var dockerPhaseRules = []dockerRule{
	{row{Rule{DockerHomeOnWorkspace, "no HOME, XDG directory, git global config or other start-up configuration in the container's environment is on the shared workspace volume", high,
		"set the variable (-e NAME=PATH) to a path the phases do not share, on a --tmpfs"},
		func(s *policy.Spec) bool { return s.Phases.Workspace != "" }}, checkDockerHomeOnWorkspace},
}

// checkDockerHomeOnWorkspace: no variable of startupVars in Config.Env
// (the image's ENV and -e together, as the container gets them) points at
// a path on what is mounted at spec.phases.workspace, wherever the
// container mounts it: the same named volume, or a bind of the same host
// directory or one below it. A workspace on the container's own root
// filesystem is no shared volume; a tmpfs is shared with no other mount.
func checkDockerHomeOnWorkspace(d *dockerCheck, c *DockerContainer) {
	ws := d.e.p.Spec.Phases.Workspace
	ms := d.mounts()
	w := dockerHolder(ms, ws)
	if w == nil {
		return
	}
	for _, kv := range c.Config.Env {
		name, value, _ := strings.Cut(kv, "=")
		sv := startupVarNamed(name)
		if sv == nil {
			continue
		}
		p, where := sv.firstOnWorkspace(value, func(p string) (string, bool) {
			if m := dockerHolder(ms, p); m != nil && sameDockerStore(m, p, w) {
				return "is on " + m.text() + ", mounted here at " + m.dest, true
			}
			for i := range ms {
				if dest := path.Clean(ms[i].dest); sv.readsBelow(p, dest) && sameDockerStore(&ms[i], dest, w) {
					return "holds " + dest + ", where " + ms[i].text() + " is mounted", true
				}
			}
			return "", false
		})
		if p == "" {
			continue
		}
		actual := value
		if p != value {
			actual += ": " + p
		}
		d.failAt(dockerAt(dEnv, 0, "Config.Env["+name+"]"), name+" on a path the phases do not share", actual+" "+where,
			"set -e "+name+"= to a path the phases do not share (on a --tmpfs), off "+w.text(),
			sv.reads+"; "+w.text()+" is the shared workspace, mounted at "+w.dest+" (spec.phases.workspace: "+ws+"): what one phase writes there, the next one reads")
	}
}

// dockerHolder is the mount that holds the clean path p (the one with the
// longest destination at or above it), or nil.
func dockerHolder(ms []mount, p string) *mount {
	var best *mount
	bestLen := -1
	for i := range ms {
		if dest := path.Clean(ms[i].dest); under(p, dest) && len(dest) > bestLen {
			best, bestLen = &ms[i], len(dest)
		}
	}
	return best
}

// sameDockerStore says whether path p, held by mount m, is on what the
// workspace mount w holds: the same mount, the same named volume, or a
// host path at or below w's bind source.
func sameDockerStore(m *mount, p string, w *mount) bool {
	switch {
	case path.Clean(m.dest) == path.Clean(w.dest):
		return true
	case m.typ == "volume" && w.typ == "volume":
		return m.source == w.source
	case m.typ == "bind" && w.typ == "bind":
		rel := strings.TrimPrefix(strings.TrimPrefix(p, path.Clean(m.dest)), "/")
		return under(path.Join(path.Clean(m.source), rel), path.Clean(w.source))
	}
	return false
}

// text names what a mount holds: "volume attempt-42", "bind /srv/ws", "a tmpfs".
func (m *mount) text() string {
	if m.typ == "tmpfs" || m.source == "" {
		return "a " + orDefault(m.typ, "mount")
	}
	return m.typ + " " + m.source
}
