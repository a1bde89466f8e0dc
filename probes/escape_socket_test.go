package probes

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandprobe/sandprobe/result"
)

// TestRuntimeSocket: a socket a runtime would listen on fails when it
// accepts a connection, wherever it is found; a stale one (nothing listens)
// and a file that only has the name pass.
func TestRuntimeSocket(t *testing.T) {
	dir := t.TempDir()
	listen := func(name string) string {
		p := filepath.Join(dir, name)
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return p
	}
	live := listen("docker.sock")
	mounted := listen("agent-tools.sock") // any name: it was mounted in
	named := listen("containerd-shim.sock")
	stale := filepath.Join(dir, "crio.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if err := os.WriteFile(filepath.Join(dir, "podman.sock"), nil, 0o644); err != nil { // not a socket
		t.Fatal(err)
	}
	env := listen("env.sock")
	cases := []struct {
		name string
		s    socketSearch
		want map[string]result.Status
	}{
		{"nothing", socketSearch{known: []string{filepath.Join(dir, "none.sock")}}, map[string]result.Status{"": result.Pass}},
		{"usual path", socketSearch{known: []string{live, filepath.Join(dir, "podman.sock")}}, map[string]result.Status{live: result.Fail}},
		{"mounted in", socketSearch{mounts: []mountEntry{{point: mounted}}}, map[string]result.Status{mounted: result.Fail}},
		{"named like a runtime's", socketSearch{dirs: []string{dir}}, map[string]result.Status{live: result.Fail, named: result.Fail, stale: result.Pass}},
		{"named by DOCKER_HOST", socketSearch{environ: []string{"DOCKER_HOST=unix://" + env, "OTHER=unix://" + live}}, map[string]result.Status{env: result.Fail}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := map[string]result.Status{}
			for _, f := range judgeRuntimeSockets(context.Background(), c.s) {
				got[f.Subject] = f.Status
				if f.Status == result.Fail && (f.Expected == "" || f.Evidence == "") {
					t.Errorf("%s: failure without expected/evidence: %+v", f.Subject, f)
				}
			}
			if len(got) != len(c.want) {
				t.Errorf("findings %v, want %v", got, c.want)
			}
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("%s: %s, want %s (all: %v)", k, got[k], v, got)
				}
			}
		})
	}
}
