package drift

import (
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandprobe/sandprobe/policy"
)

// What one phase of an attempt leaves for the next (docs/phases.md): the
// phases share a workspace volume, so a HOME on it hands the next phase
// whatever .bashrc, .gitconfig or .npmrc this one wrote.
const (
	PodHomeOnWorkspace = "drift.pod.home-on-workspace"
)

var phaseRules = []podRule{
	{row{Rule{PodHomeOnWorkspace, "no container's HOME, XDG directories, git global config or other start-up configuration is on the shared workspace volume", high,
		"point the variable at a volume the phases do not share (an emptyDir of the pod)"},
		func(s *policy.Spec) bool { return s.Phases.Workspace != "" }}, checkHomeOnWorkspace},
}

// startupVar is an environment variable that tells tools where to read
// their start-up configuration, or what to run before they do their work.
// On the shared workspace, what one phase writes there the next one reads
// and runs, outside anything that phase's own checks saw.
type startupVar struct {
	name string
	// list: a colon-separated list of paths, each judged.
	list bool
	// fold: the tool reads the name in any case (npm's npm_config_*).
	fold bool
	// hiddenOnly: tools read only the hidden entries under it (HOME's
	// dotfiles), not everything.
	hiddenOnly bool
	// reads says who reads what there: the finding's evidence.
	reads string
}

// startupVars are the variables judged. Left out on purpose: PATH,
// PYTHONPATH and the like, which name where programs come from rather than
// start-up configuration (a project's own bin directory or virtualenv on
// the workspace is common and healthy); package-cache variables (GOCACHE,
// GOMODCACHE, PIP_CACHE_DIR, NUGET_PACKAGES, npm_config_cache), which the
// cache checks judge (phase.cache-readonly, cache verify); XDG_STATE_HOME
// (history and logs, which no tool runs) and XDG_RUNTIME_DIR (sockets,
// which a phase that has ended cannot serve).
var startupVars = []startupVar{
	{name: "HOME", hiddenOnly: true, reads: "shells read their start-up files (.bashrc, .profile) there, git its .gitconfig, npm its .npmrc, and pip, NuGet, ssh, curl and most tools theirs"},
	{name: "XDG_CONFIG_HOME", reads: "git (git/config), pip, fish and most tools read their configuration there"},
	{name: "XDG_CONFIG_DIRS", list: true, reads: "tools read their system-wide configuration there"},
	{name: "XDG_DATA_HOME", reads: "bash-completion sources the scripts there, fish its functions"},
	{name: "XDG_DATA_DIRS", list: true, reads: "bash-completion sources the scripts there, fish its functions"},
	{name: "XDG_CACHE_HOME", reads: "Go's build cache and pip's wheels are there, and run without being built again"},
	{name: "ZDOTDIR", reads: "zsh reads its start-up files there"},
	{name: "BASH_ENV", reads: "bash sources it before every script it runs"},
	{name: "ENV", reads: "sh sources it when it starts"},
	{name: "GIT_CONFIG_GLOBAL", reads: "git reads it as its global configuration (hooksPath, fsmonitor, aliases, filters)"},
	{name: "GIT_CONFIG_SYSTEM", reads: "git reads it as its system configuration (hooksPath, fsmonitor, aliases, filters)"},
	{name: "GIT_TEMPLATE_DIR", reads: "git copies the hooks there into every repository it creates or clones"},
	{name: "GIT_EXEC_PATH", reads: "git runs its sub-commands from there"},
	{name: "npm_config_userconfig", fold: true, reads: "npm reads it as the user's .npmrc (registry, scripts)"},
	{name: "npm_config_globalconfig", fold: true, reads: "npm reads it as its global npmrc (registry, scripts)"},
	{name: "npm_config_prefix", fold: true, reads: "npm reads its global npmrc (etc/npmrc) there and runs global packages from there"},
	{name: "PIP_CONFIG_FILE", reads: "pip reads its configuration from it (index, trusted hosts)"},
	{name: "DOTNET_CLI_HOME", reads: "dotnet and NuGet read their configuration (NuGet.Config) there instead of under HOME"},
	{name: "CARGO_HOME", reads: "cargo reads its config.toml there (registries, a build wrapper it runs)"},
	{name: "GRADLE_USER_HOME", reads: "gradle runs the init scripts there (init.d) before every build"},
	{name: "GOENV", reads: "go reads its settings from it (GOFLAGS can add -toolexec, a program run around every tool)"},
	{name: "PYTHONUSERBASE", reads: "python runs the .pth files of the user site-packages there every time it starts"},
	{name: "PYTHONSTARTUP", reads: "python runs it when it starts interactively"},
	{name: "DOCKER_CONFIG", reads: "docker reads config.json there (credential helpers it runs, proxies)"},
	{name: "KUBECONFIG", list: true, reads: "kubectl runs a kubeconfig's exec plugins"},
	{name: "GNUPGHOME", reads: "gpg (git's commit signing) reads gpg.conf and gpg-agent.conf there, which name programs it runs"},
	{name: "CURL_HOME", reads: "curl reads its .curlrc there"},
	{name: "WGETRC", reads: "wget reads it as its configuration"},
}

// startupVarNamed is the row for a variable's name, or nil.
func startupVarNamed(name string) *startupVar {
	for i := range startupVars {
		sv := &startupVars[i]
		if name == sv.name || (sv.fold && strings.EqualFold(name, sv.name)) {
			return sv
		}
	}
	return nil
}

// firstOnWorkspace is the first path in a variable's value that is on
// the shared workspace, and on's account of where; "" when none is. A
// relative path is no place a tool looks (the XDG specification says to
// ignore one) and is not judged.
func (sv *startupVar) firstOnWorkspace(value string, on func(p string) (string, bool)) (string, string) {
	for _, p := range sv.paths(value) {
		if !strings.HasPrefix(p, "/") {
			continue
		}
		if where, ok := on(path.Clean(p)); ok {
			return p, where
		}
	}
	return "", ""
}

func (sv *startupVar) paths(value string) []string {
	if sv.list {
		return strings.Split(value, ":")
	}
	return []string{value}
}

// readsBelow says whether tools read what a mount at mountPath, below the
// variable's path p, holds: anything under XDG_CONFIG_HOME and the like,
// but only the hidden entries of HOME (~/.config, ~/.gitconfig), so a
// repository checked out at ~/src is no finding.
func (sv *startupVar) readsBelow(p, mountPath string) bool {
	if mountPath == p || !under(mountPath, p) {
		return false
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(mountPath, p), "/")
	return !sv.hiddenOnly || strings.HasPrefix(rel, ".")
}

// under says whether p is dir or below it (both clean).
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// holder is the container's mount that holds the clean path p: the one
// with the longest mountPath at or above it; nil for the container's own
// root filesystem.
func holder(c *corev1.Container, p string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	bestLen := -1
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		if mp := path.Clean(m.MountPath); under(p, mp) && len(mp) > bestLen {
			best, bestLen = m, len(mp)
		}
	}
	return best
}

// sharedVolume is a volume of the pod that holds the shared workspace.
type sharedVolume struct {
	name string
	// k and mountPath: a container that mounts it at or above the
	// workspace, and where; or claim, a volume of the same claim.
	k         containerView
	mountPath string
	sameClaim string
}

// workspaceVolumes are the pod's volumes that hold the shared workspace:
// the one each container has at spec.phases.workspace (the deepest mount
// at or above it), and any other volume of the same PersistentVolumeClaim.
func (v *podView) workspaceVolumes(ws string) []sharedVolume {
	var out []sharedVolume
	known := func(name string) bool {
		for _, s := range out {
			if s.name == name {
				return true
			}
		}
		return false
	}
	for k := range v.containers() {
		if m := holder(k.c, ws); m != nil && !known(m.Name) {
			out = append(out, sharedVolume{name: m.Name, k: k, mountPath: m.MountPath})
		}
	}
	for _, s := range out {
		claim := v.claimOf(s.name)
		if claim == "" {
			continue
		}
		for i := range v.ps.Volumes {
			if vol := &v.ps.Volumes[i]; !known(vol.Name) && v.claimOf(vol.Name) == claim {
				out = append(out, sharedVolume{name: vol.Name, sameClaim: s.name})
			}
		}
	}
	return out
}

// claimOf is the PersistentVolumeClaim a volume mounts, or "".
func (v *podView) claimOf(name string) string {
	for i := range v.ps.Volumes {
		if vol := &v.ps.Volumes[i]; vol.Name == name && vol.PersistentVolumeClaim != nil {
			return vol.PersistentVolumeClaim.ClaimName
		}
	}
	return ""
}

func (s *sharedVolume) text(ws string) string {
	if s.sameClaim != "" {
		return "volume " + s.name + " mounts the same claim as volume " + s.sameClaim + ", the shared workspace"
	}
	return "volume " + s.name + " is the shared workspace: " + s.k.name() + " mounts it at " + s.mountPath + " (spec.phases.workspace: " + ws + ")"
}

// checkHomeOnWorkspace: in each container that mounts a volume holding the
// shared workspace, no variable of startupVars (as the kubelet resolves
// it) points at a path on such a volume, wherever the container mounts it.
// A value the spec does not settle (a $(VAR) from a ConfigMap, the
// downward API) is inconclusive, never a pass.
func checkHomeOnWorkspace(c *podCheck, v *podView) {
	ws := c.e.p.Spec.Phases.Workspace
	shared := v.workspaceVolumes(ws)
	if len(shared) == 0 {
		return
	}
	sharedOf := func(m *corev1.VolumeMount) *sharedVolume {
		for i := range shared {
			if m != nil && shared[i].name == m.Name {
				return &shared[i]
			}
		}
		return nil
	}
	for k := range v.containers() {
		mounted := false
		for i := range k.c.VolumeMounts {
			mounted = mounted || sharedOf(&k.c.VolumeMounts[i]) != nil
		}
		if !mounted {
			continue
		}
		var env *kubeEnv
		for i := range k.c.Env {
			name := k.c.Env[i].Name
			sv := startupVarNamed(name)
			if sv == nil || lastEnvIndex(k.c.Env, name) != i {
				continue
			}
			if env == nil {
				env = newKubeEnv(k.c)
			}
			val := env.vars[name]
			if val.unknown != "" {
				actual := "not judged: " + val.unknown
				if written := k.c.Env[i].Value; written != "" {
					actual = "not judged: " + written + ", and " + val.unknown
				}
				c.undecidedAt(k.at(fEnv, ".env["+name+"]"), name+" on a volume the phases do not share", actual,
					"give "+name+" a literal value in "+k.spec+"."+k.name()+".env", sv.reads)
				continue
			}
			var on *sharedVolume
			p, where := sv.firstOnWorkspace(val.value, func(p string) (string, bool) {
				if m := holder(k.c, p); m != nil {
					if on = sharedOf(m); on != nil {
						return "is on volume " + on.name + ", mounted here at " + m.MountPath, true
					}
				}
				for j := range k.c.VolumeMounts {
					m := &k.c.VolumeMounts[j]
					if mp := path.Clean(m.MountPath); sv.readsBelow(p, mp) {
						if on = sharedOf(m); on != nil {
							return "holds " + mp + ", where volume " + on.name + " is mounted", true
						}
					}
				}
				return "", false
			})
			if p == "" {
				continue
			}
			at := k.at(fEnv, ".env["+name+"]")
			actual := val.value
			if written := k.c.Env[i].Value; written != val.value {
				actual = written + " (the kubelet expands it to " + val.value + ")"
			}
			if p != val.value {
				actual += ": " + p
			}
			c.failAt(at, name+" on a volume the phases do not share", actual+" "+where, "point "+at.path+" at a volume the phases do not share (an emptyDir of the pod), off volume "+on.name,
				sv.reads+"; "+on.text(ws)+": what one phase writes there, the next one reads")
		}
	}
}

// lastEnvIndex is the index of the last env entry of a name: the one the
// container gets.
func lastEnvIndex(env []corev1.EnvVar, name string) int {
	for i := len(env) - 1; i >= 0; i-- {
		if env[i].Name == name {
			return i
		}
	}
	return -1
}
