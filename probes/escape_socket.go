package probes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/result"
)

// runtimeSocketPaths are where container runtimes and their front ends
// listen: whoever connects to one starts a privileged container on the node.
var runtimeSocketPaths = []string{
	"/var/run/docker.sock", "/run/docker.sock",
	"/run/containerd/containerd.sock", "/var/run/containerd/containerd.sock",
	"/run/k3s/containerd/containerd.sock", "/run/containerd/containerd.sock.ttrpc",
	"/var/run/crio/crio.sock", "/run/crio/crio.sock",
	"/run/podman/podman.sock", "/var/run/podman/podman.sock",
	"/run/buildkit/buildkitd.sock", "/var/run/dockershim.sock", "/run/cri-dockerd.sock",
	"/var/run/cri-dockerd.sock", "/run/user/0/docker.sock",
}

// runtimeSocketWords mark a socket found by a directory scan as a runtime's.
var runtimeSocketWords = []string{"docker", "containerd", "crio", "cri-o", "podman", "buildkit", "cri-dockerd", "dockershim"}

// runtimeSocketEnv are variables clients read the runtime's address from.
var runtimeSocketEnv = []string{"DOCKER_HOST", "CONTAINER_HOST", "CONTAINERD_ADDRESS", "CONTAINER_RUNTIME_ENDPOINT", "BUILDKIT_HOST"}

// socketSearch is where checkRuntimeSocket looks.
type socketSearch struct {
	known   []string     // well-known paths
	dirs    []string     // directories scanned for sockets named like a runtime's
	mounts  []mountEntry // a mount point that is a socket was mounted on purpose
	environ []string     // DOCKER_HOST=unix:///… and friends
}

// candidate is a socket the search turned up and why it is looked at.
type candidate struct{ path, why string }

func checkRuntimeSocket(ctx context.Context, env *Env) []result.Finding {
	dirs := []string{"/", "/run", "/var/run", "/tmp", "/run/containerd", "/run/docker", "/var/run/docker"}
	if home := os.Getenv("HOME"); home != "" && !slices.Contains(dirs, home) {
		dirs = append(dirs, home)
	}
	for _, w := range env.Policy.Spec.Filesystem.Writable {
		if !slices.Contains(dirs, w) {
			dirs = append(dirs, w)
		}
	}
	return judgeRuntimeSockets(ctx, socketSearch{known: runtimeSocketPaths, dirs: dirs, mounts: readMounts(os.DirFS("/")), environ: env.Environ})
}

// candidates lists every socket file the search finds, once (by inode:
// /var/run is often a link to /run).
func (s socketSearch) candidates() []candidate {
	type key struct{ dev, ino uint64 }
	seen := map[key]bool{}
	var out []candidate
	add := func(p, why string) {
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			return
		}
		k := key{uint64(st.Dev), st.Ino}
		if seen[k] {
			return
		}
		seen[k] = true
		out = append(out, candidate{p, why})
	}
	for _, p := range s.known {
		add(p, "a container runtime's usual path")
	}
	for _, m := range s.mounts {
		add(m.point, "a socket mounted into the sandbox")
	}
	for _, kv := range s.environ {
		name, val, _ := strings.Cut(kv, "=")
		if p, ok := strings.CutPrefix(val, "unix://"); ok && slices.Contains(runtimeSocketEnv, name) {
			add(p, "named by $"+name)
		}
	}
	for _, d := range s.dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.Type()&os.ModeSocket == 0 {
				continue
			}
			name := strings.ToLower(e.Name())
			if slices.ContainsFunc(runtimeSocketWords, func(w string) bool { return strings.Contains(name, w) }) {
				add(filepath.Join(d, e.Name()), "a socket named like a runtime's in "+d)
			}
		}
	}
	return out
}

// judgeRuntimeSockets connects to each candidate (and sends nothing): a
// connection accepted means the sandbox can drive that runtime.
func judgeRuntimeSockets(ctx context.Context, s socketSearch) []result.Finding {
	const exp = "no container runtime socket the sandbox can connect to"
	cands := s.candidates()
	if len(cands) == 0 {
		return []result.Finding{pass("", exp, "no runtime socket found",
			fmt.Sprintf("looked at %d usual paths (%s …), every mount point, $%s, and sockets named like a runtime's in %s",
				len(s.known), strings.Join(s.known[:min(2, len(s.known))], ", "), strings.Join(runtimeSocketEnv, ", $"), strings.Join(s.dirs, ", ")))}
	}
	var out []result.Finding
	for _, c := range cands {
		err := connectOnly(ctx, c.path)
		evidence := fmt.Sprintf("%s: %s; %s", c.why, describeSocket(c.path), connectWord(err))
		switch {
		case err == nil || errors.Is(err, unix.EAGAIN):
			// EAGAIN: a listener whose backlog is full is still a listener.
			out = append(out, fail(c.path, exp, "reachable: connect(2) to the socket succeeded", evidence))
		case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
			out = append(out, pass(c.path, exp, "present, but this uid may not connect to it ("+errnoName(err)+")", evidence))
		case errors.Is(err, unix.ECONNREFUSED):
			out = append(out, pass(c.path, exp, "present, but nothing listens on it (ECONNREFUSED)", evidence))
		default:
			f := errorf(c.path, "cannot tell whether the socket is reachable: %v", err)
			f.Expected, f.Evidence = exp, evidence
			out = append(out, f)
		}
	}
	return out
}

// connectOnly opens a connection and closes it at once: no request is sent.
func connectOnly(ctx context.Context, path string) error {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return err
	}
	return c.Close()
}

func connectWord(err error) string {
	if err == nil {
		return "connect(2) succeeded (closed at once, nothing sent)"
	}
	return "connect(2): " + errnoName(err)
}

func describeSocket(p string) string {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return "stat: " + errnoName(err)
	}
	return fmt.Sprintf("socket mode %04o owner %d:%d", st.Mode&0o7777, st.Uid, st.Gid)
}
