package docker

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/runner"
)

// TestContainerConfig: the container carries exactly the policy's constraints.
func TestContainerConfig(t *testing.T) {
	load := func(spec string) *policy.Policy {
		p, err := policy.Load([]byte("apiVersion: sandprobe.dev/v1alpha1\nkind: SandboxPolicy\nmetadata: {name: c}\nspec:\n  selector: {matchLabels: {sandbox: \"true\"}}\n" + spec))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	full := load(`  identity: {uid: 65532, gid: 65533, fsGroup: 2000, supplementalGroups: [3000]}
  filesystem: {readOnlyRoot: true, writable: [/workspace, /tmp], emptyAtStart: [/workspace], sizeLimit: 64Mi}
  capabilities: [NET_BIND_SERVICE]
  resources: {limits: {memory: 2Gi, cpu: 1500m}, pids: 256}
`)
	cfg, host := ContainerConfig(full, "img:1", "runsc", "", []string{"HOME=/tmp"})
	checks := []struct {
		name      string
		got, want any
	}{
		{"user", cfg.User, "65532:65533"},
		{"env", cfg.Env, []string{"HOME=/tmp"}},
		{"read-only root", host.ReadonlyRootfs, true},
		{"cap drop", host.CapDrop, []string{"ALL"}},
		{"cap add", host.CapAdd, []string{"NET_BIND_SERVICE"}},
		{"no-new-privileges", slices.Contains(host.SecurityOpt, "no-new-privileges"), true},
		{"seccomp default", slices.ContainsFunc(host.SecurityOpt, func(s string) bool { return strings.HasPrefix(s, "seccomp=") }), false},
		{"network", string(host.NetworkMode), "none"},
		{"runtime", host.Runtime, "runsc"},
		{"groups", host.GroupAdd, []string{"3000", "2000"}},
		{"tmp", host.Tmpfs["/tmp"], "rw,exec,nosuid,nodev,mode=1777,size=67108864"},
		{"workspace owned by the uid and fsGroup", host.Tmpfs["/workspace"], "rw,exec,nosuid,nodev,mode=1777,uid=65532,gid=2000,size=67108864"},
		{"memory", host.Memory, int64(2 << 30)},
		{"no swap beyond memory", host.MemorySwap, int64(2 << 30)},
		{"cpu", host.NanoCPUs, int64(1.5e9)},
		{"pids", *host.PidsLimit, int64(256)},
		{"log driver", host.LogConfig.Type, "json-file"},
	}
	for _, c := range checks {
		g, _ := json.Marshal(c.got)
		w, _ := json.Marshal(c.want)
		if string(g) != string(w) {
			t.Errorf("%s: %s, want %s", c.name, g, w)
		}
	}

	loose := load("  identity: {uid: 0, gid: 0, allowRoot: true}\n  noNewPrivileges: false\n  seccomp: Unconfined\n  filesystem: {readOnlyRoot: false}\n")
	_, host = ContainerConfig(loose, "img:1", "", "internal-net", nil)
	if host.ReadonlyRootfs || slices.Contains(host.SecurityOpt, "no-new-privileges") || !slices.Contains(host.SecurityOpt, "seccomp=unconfined") ||
		host.NetworkMode != "internal-net" || host.PidsLimit != nil || host.Memory != 0 {
		t.Errorf("a loose policy must give a loose container: %+v", host)
	}
}

func TestProbeCommand(t *testing.T) {
	spec := runner.ProbeSpec{Nonce: "n1", NoNetwork: true}
	got := strings.Join(ProbeCommand(spec, "gvisor", []string{"/entry", "serve"}, 5*time.Second), " ")
	want := ProbePath + ` probe --policy ` + PolicyPath + ` --nonce n1 --termination-log /dev/null --runtime-class gvisor --no-network --image-command ["/entry","serve"] --image-command-timeout 5s`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := strings.Join(ProbeCommand(runner.ProbeSpec{Nonce: "n"}, "", nil, 0), " "); strings.Contains(got, "--image-command") || strings.Contains(got, "--runtime-class") || strings.Contains(got, "--no-network") {
		t.Errorf("nothing to hand over, but: %s", got)
	}
}
