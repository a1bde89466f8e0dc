package docker

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"

	"github.com/sandprobe/sandprobe/policy"
)

// TestJoinConfig: the probe's container is the live sandbox's twin (its
// namespace, image, user, runtime, privileges, mounts), except that the
// policy's emptyAtStart paths stay fresh tmpfs mounts.
func TestJoinConfig(t *testing.T) {
	p, err := policy.Load([]byte("apiVersion: sandprobe.dev/v1alpha1\nkind: SandboxPolicy\nmetadata: {name: c}\nspec:\n  selector: {matchLabels: {sandbox: \"true\"}}\n  filesystem: {readOnlyRoot: true, writable: [/workspace, /tmp], emptyAtStart: [/workspace]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	pids := int64(64)
	live := &joined{name: "agent", c: container.InspectResponse{
		ID:     "abc123",
		Config: &container.Config{Image: "agentbox:1", User: "1000:1000", Env: []string{"HTTP_PROXY=http://proxy:3128"}},
		HostConfig: &container.HostConfig{Runtime: "runsc", ReadonlyRootfs: false, CapAdd: []string{"NET_RAW"},
			Resources: container.Resources{PidsLimit: &pids}, Tmpfs: map[string]string{"/tmp": "size=1m"}},
		Mounts: []container.MountPoint{
			{Type: mount.TypeBind, Source: "/home/me/project", Destination: "/workspace", RW: true},
			{Type: mount.TypeBind, Source: "/run/creds/git", Destination: "/run/secrets/git", RW: false},
			{Type: mount.TypeVolume, Name: "cache", Destination: "/cache", RW: true},
		},
	}}
	cfg, host := ContainerConfig(p, "ignored", "runc", "none", []string{"HOME=/tmp"})
	joinConfig(live, p, cfg, host)
	if host.NetworkMode != "container:abc123" || cfg.Image != "agentbox:1" || cfg.User != "1000:1000" || host.Runtime != "runsc" {
		t.Errorf("network %q image %q user %q runtime %q", host.NetworkMode, cfg.Image, cfg.User, host.Runtime)
	}
	if host.ReadonlyRootfs || !slices.Equal(host.CapAdd, []string{"NET_RAW"}) || host.PidsLimit == nil || *host.PidsLimit != 64 {
		t.Errorf("root read-only %v, caps %v, pids %v: not the live sandbox's", host.ReadonlyRootfs, host.CapAdd, host.PidsLimit)
	}
	if !slices.Equal(cfg.Env, []string{"HTTP_PROXY=http://proxy:3128", "HOME=/tmp"}) {
		t.Errorf("env %v", cfg.Env)
	}
	if host.Tmpfs["/tmp"] != "size=1m" || host.Tmpfs["/workspace"] == "" {
		t.Errorf("tmpfs %v: want the live /tmp and a fresh /workspace", host.Tmpfs)
	}
	want := []mount.Mount{
		{Type: mount.TypeBind, Source: "/run/creds/git", Target: "/run/secrets/git", ReadOnly: true},
		{Type: mount.TypeVolume, Source: "cache", Target: "/cache"},
	}
	if !slices.Equal(host.Mounts, want) {
		t.Errorf("mounts %+v, want %+v (the live workspace is not mounted)", host.Mounts, want)
	}
}

// TestAnswersTo: the proxy container is found by every name Docker's
// resolver gives it on the sandbox's network, or by its address there, and
// by nothing it answers to on another network only.
func TestAnswersTo(t *testing.T) {
	c := container.InspectResponse{
		Name:   "/agentbox-proxy-1",
		Config: &container.Config{Hostname: "squid"},
		NetworkSettings: &container.NetworkSettings{Networks: map[string]*network.EndpointSettings{
			"internal": {Aliases: []string{"proxy"}, DNSNames: []string{"agentbox-proxy-1", "proxy.internal"}, IPAddress: netip.MustParseAddr("10.213.4.2")},
			"egress":   {Aliases: []string{"egress-only"}, IPAddress: netip.MustParseAddr("10.213.5.2")},
		}},
	}
	cases := []struct {
		host string
		want bool
	}{
		{"agentbox-proxy-1", true},
		{"proxy", true},
		{"PROXY.internal.", true},
		{"squid", false}, // a hostname is not a name Docker's resolver gives out
		{"10.213.4.2", true},
		{"10.213.5.2", false},
		{"egress-only", false},
		{"api.example.com", false},
	}
	for _, c2 := range cases {
		if got := answersTo(c, "internal", "agentbox-proxy-1", c2.host); got != c2.want {
			t.Errorf("answersTo(%q) = %v, want %v", c2.host, got, c2.want)
		}
	}
}
