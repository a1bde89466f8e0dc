package docker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/docker"
)

// The lab servers of the agentbox topology are this test binary, run in a
// container with labServerEnv set (see TestMain): a plain HTTP answer on :80.
const labServerEnv = "SANDPROBE_TEST_LAB_SERVER"

func runLabServer() {
	name := os.Getenv(labServerEnv)
	err := http.ListenAndServe(":80", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "lab server %s\n", name)
	}))
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// agentbox is agentbox's Docker topology, built in the test engine: the
// agent on an --internal network, a tinyproxy container on it and on a
// second (egress) network as its only door, and lab servers reachable only
// from the egress side. Every address is one the test creates; every
// container's DNS forwards to a dead address on its own network, so no
// name lookup leaves either.
type agentbox struct {
	e                 *engine
	internal, egress  string // network names
	agent, proxy      string // container names
	api, blocked, md  netip.Addr
	filter            string // the proxy's allow-list on the host
	policy            *policy.Policy
	raw               []byte
	internalDNS, eDNS netip.Addr
}

const agentboxPolicy = `apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: agentbox}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  runtime: {classNames: []}
  identity: {uid: 65532, gid: 65532}
  filesystem: {readOnlyRoot: true, writable: [/workspace, /tmp], emptyAtStart: [/workspace]}
  capabilities: []
  seccomp: RuntimeDefault
  serviceAccountToken: absent
  image: {requireDigest: false}
  docker: {network: INTERNAL}
  egress:
    proxy: http://proxy.agentbox.test:3128
    allow:
      - {host: api.agentbox.test, port: 80, addresses: [API], reason: "the model API, through the proxy"}
    mustFail:
      hosts:
        - {target: blocked.agentbox.test, port: 80, addresses: [BLOCKED]}
      ips:
        - {target: "BLOCKED", port: 80}
    # A lab stand-in for the metadata service: no probe dials the real one.
    metadata: {addresses: [METADATA], ports: [80]}
    # The DNS half is the network lab's (runner/local); the Docker
    # resolver here forwards to a dead address.
    dns: {arbitraryNames: allow}
    timeout: 2s
`

// newAgentbox builds the topology; everything is removed at the end.
func newAgentbox(t *testing.T, e *engine) *agentbox {
	t.Helper()
	testenv.DockerImage(t, e.host, debianImage)
	ctx := context.Background()
	id := "sp-ab-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, strings.TrimPrefix(nonce(t), "n-testagentbox"))
	if len(id) > 40 {
		id = id[:40]
	}
	ab := &agentbox{e: e, internal: id + "-int", egress: id + "-egress", agent: id + "-agent", proxy: id + "-proxy"}
	ab.internalDNS = ab.network(t, ab.internal, true)
	ab.eDNS = ab.network(t, ab.egress, false)
	ab.api = ab.labServer(t, id+"-api", "api.agentbox.test")
	ab.blocked = ab.labServer(t, id+"-blocked", "blocked.agentbox.test")
	ab.md = ab.labServer(t, id+"-metadata", "metadata.agentbox.test")
	raw := strings.NewReplacer("INTERNAL", ab.internal, "API", ab.api.String(), "BLOCKED", ab.blocked.String(), "METADATA", ab.md.String()).Replace(agentboxPolicy)
	p, err := policy.Load([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	ab.policy, ab.raw = p, []byte(raw)
	ab.startProxy(t, ctx)
	// The agent: the sandbox as agentbox runs it, under the policy's own
	// constraints, on the internal network, told where its proxy is.
	cfg, host := docker.ContainerConfig(p, debianImage, "runc", ab.internal, []string{"HTTP_PROXY=" + p.Spec.Egress.Proxy, "http_proxy=" + p.Spec.Egress.Proxy, "HOME=/tmp"})
	cfg.Cmd = []string{"sleep", "infinity"}
	host.DNS = []netip.Addr{ab.internalDNS}
	ab.run(t, ab.agent, cfg, host, nil)
	return ab
}

// network creates one network and returns an address on it nothing uses
// (the containers' upstream DNS: a lookup Docker forwards goes nowhere).
func (ab *agentbox) network(t *testing.T, name string, internal bool) netip.Addr {
	t.Helper()
	ctx := context.Background()
	bridge := fmt.Sprintf("spab%08x", rand.Uint32())
	opts := map[string]string{"com.docker.network.bridge.name": bridge}
	if _, err := ab.e.cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{Driver: "bridge", Internal: internal, Options: opts}); err != nil {
		t.Fatalf("create network %s: %v", name, err)
	}
	t.Cleanup(func() { _, _ = ab.e.cli.NetworkRemove(context.Background(), name, client.NetworkRemoveOptions{}) })
	n, err := ab.e.cli.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if err != nil || len(n.Network.IPAM.Config) == 0 {
		t.Fatalf("inspect network %s: %v %+v", name, err, n.Network.IPAM)
	}
	sub := n.Network.IPAM.Config[0].Subnet
	if internal {
		isolateInternal(t, bridge, sub)
	}
	dead := sub.Addr().As4()
	dead[3] = 250
	return netip.AddrFrom4(dead)
}

// isolateInternal writes the two rules Docker writes for an --internal
// network when it manages iptables (DOCKER-ISOLATION-STAGE-1): nothing is
// routed into the bridge from another subnet or out of it to one. The test
// engine runs with iptables off (hack/docker), where --internal isolates
// nothing once the host forwards (a Kubernetes node does).
func isolateInternal(t *testing.T, bridge string, sub netip.Prefix) {
	t.Helper()
	rules := [][]string{
		{"FORWARD", "-i", bridge, "!", "-d", sub.String(), "-j", "DROP"},
		{"FORWARD", "-o", bridge, "!", "-s", sub.String(), "-j", "DROP"},
	}
	for _, r := range rules {
		if out, err := exec.Command("iptables", append([]string{"-w", "-I"}, r...)...).CombinedOutput(); err != nil {
			t.Fatalf("iptables -I %v: %v: %s", r, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("iptables", append([]string{"-w", "-D"}, r...)...).Run() })
	}
}

// run creates and starts a container on its first network, connects it to
// the others, and removes it at the end; it returns its address on the
// first network.
func (ab *agentbox) run(t *testing.T, name string, cfg *container.Config, host *container.HostConfig, aliases map[string][]string) netip.Addr {
	t.Helper()
	ctx := context.Background()
	first := string(host.NetworkMode)
	host.LogConfig = container.LogConfig{Type: "json-file"}
	netCfg := &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{first: {Aliases: aliases[first]}}}
	if _, err := ab.e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: host, NetworkingConfig: netCfg}); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	t.Cleanup(func() {
		_, _ = ab.e.cli.ContainerRemove(context.Background(), name, client.ContainerRemoveOptions{Force: true})
	})
	for n, as := range aliases {
		if n == first {
			continue
		}
		if _, err := ab.e.cli.NetworkConnect(ctx, n, client.NetworkConnectOptions{Container: name, EndpointConfig: &network.EndpointSettings{Aliases: as}}); err != nil {
			t.Fatalf("connect %s to %s: %v", name, n, err)
		}
	}
	if _, err := ab.e.cli.ContainerStart(ctx, name, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	c, err := ab.e.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil || c.Container.NetworkSettings.Networks[first] == nil {
		t.Fatalf("inspect %s: %v", name, err)
	}
	return c.Container.NetworkSettings.Networks[first].IPAddress
}

// labServer starts one lab server on the egress network only.
func (ab *agentbox) labServer(t *testing.T, name, alias string) netip.Addr {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &container.Config{Image: debianImage, User: "0:0", Entrypoint: []string{"/run/lab/server"}, Env: []string{labServerEnv + "=" + alias}}
	host := &container.HostConfig{NetworkMode: container.NetworkMode(ab.egress), Binds: []string{self + ":/run/lab/server:ro"}, DNS: []netip.Addr{ab.eDNS}}
	return ab.run(t, name, cfg, host, map[string][]string{ab.egress: {alias}})
}

// startProxy starts tinyproxy (this host's, bookworm like the image) with
// the allow-list render writes for the policy: on the internal network as
// proxy.agentbox.test, and on the egress network.
func (ab *agentbox) startProxy(t *testing.T, ctx context.Context) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/tinyproxy"); err != nil {
		testenv.Missing(t, "tinyproxy is not installed (apt-get install tinyproxy)")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := "Port 3128\nListen 0.0.0.0\nTimeout 30\nMaxClients 64\nLogLevel Connect\nConnectPort 80\nConnectPort 443\n" +
		"Filter \"/etc/tinyproxy/filter\"\nFilterType ere\nFilterDefaultDeny Yes\n"
	if err := os.WriteFile(filepath.Join(dir, "tinyproxy.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var filter strings.Builder
	if err := render.WriteProxyAllowList(&filter, ab.policy); err != nil {
		t.Fatal(err)
	}
	ab.filter = filepath.Join(dir, "filter")
	if err := os.WriteFile(ab.filter, []byte(filter.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := &container.Config{Image: debianImage, User: "65534:65534", Entrypoint: []string{"/usr/bin/tinyproxy", "-d", "-c", "/etc/tinyproxy/tinyproxy.conf"}}
	host := &container.HostConfig{NetworkMode: container.NetworkMode(ab.internal), DNS: []netip.Addr{ab.internalDNS},
		Binds: []string{"/usr/bin/tinyproxy:/usr/bin/tinyproxy:ro", dir + ":/etc/tinyproxy:ro"}}
	ab.run(t, ab.proxy, cfg, host, map[string][]string{ab.internal: {"proxy.agentbox.test"}, ab.egress: nil})
}

// probe runs the probe joined to the agent, as `run --backend docker
// --join AGENT` does, and returns the run and the backend's error.
func (ab *agentbox) probe(t *testing.T, be *docker.Backend) (report.Run, error) {
	t.Helper()
	if be == nil {
		be = &docker.Backend{Join: ab.agent}
	}
	be.Client = ab.e.cli
	be.Binary = testenv.Binary(t)
	spec := runner.ProbeSpec{Policy: ab.policy, PolicyBytes: ab.raw, Nonce: nonce(t), Deadline: 90 * time.Second}
	results, err := be.Run(context.Background(), spec)
	run := report.Run{Policy: ab.policy.Metadata.Name}
	for _, r := range results {
		run.Findings = append(run.Findings, runner.Findings(r.Target, r, probes.FixFor)...)
	}
	ab.e.requireRemoved(t, spec.Nonce)
	return run, err
}

func failures(run report.Run) []string {
	var out []string
	for _, f := range run.Findings {
		if f.Status == report.Fail || f.Status == report.Error {
			out = append(out, f.Name()+": "+report.ExpectedActual(f))
		}
	}
	return out
}

// requireHealthy: no failure, the allowed host reached through the proxy,
// and every deny proven by the control on the egress network.
func requireHealthy(t *testing.T, ab *agentbox, run report.Run) {
	t.Helper()
	if fs := failures(run); len(fs) > 0 {
		t.Fatalf("healthy agentbox: %d failures:\n%s", len(fs), strings.Join(fs, "\n"))
	}
	allowed := find(run, "egress.allowed", "api.agentbox.test:80 via proxy")
	if allowed == nil || allowed.Status != report.Pass {
		t.Fatalf("allowed host: %+v", allowed)
	}
	for _, sub := range []string{"blocked.agentbox.test:80", ab.blocked.String() + ":80"} {
		f := find(run, "egress.must-fail", sub)
		if f == nil || f.Status != report.Pass || f.Deny != report.DenyProven || !strings.Contains(f.Evidence, "docker/"+ab.egress) {
			t.Fatalf("must-fail %s: %+v", sub, f)
		}
	}
	if f := find(run, "egress.proxy-bypass", "api.agentbox.test:80 direct"); f == nil || f.Status != report.Pass || f.Deny != report.DenyProven {
		t.Fatalf("proxy bypass: %+v", f)
	}
}

// TestAgentboxJoin: the probe joins the live agent's network (or stands on
// the policy's internal network) and the control dials from the proxy's
// egress side. Healthy, it passes with every deny proven.
func TestAgentboxJoin(t *testing.T) {
	e := newEngine(t)
	t.Run("healthy", func(t *testing.T) {
		ab := newAgentbox(t, e)
		run, err := ab.probe(t, nil)
		if err != nil {
			t.Fatal(err)
		}
		requireHealthy(t, ab, run)
		for _, f := range run.Findings {
			if strings.HasPrefix(f.Check, "egress.") || f.Status != report.Pass {
				t.Logf("%s %s: %s [%s]", f.Status, f.Name(), f.Actual, f.Evidence)
			}
		}
		if run.ExitCode() != report.ExitOK {
			t.Errorf("exit %d, want 0", run.ExitCode())
		}
	})
	t.Run("healthy, on the policy's internal network", func(t *testing.T) {
		// No live sandbox: a new container on spec.docker.network, the
		// control found through the proxy all the same.
		ab := newAgentbox(t, e)
		proxy := ab.policy.Spec.Egress.Proxy
		be := &docker.Backend{Image: debianImage, Network: ab.policy.Spec.Docker.Network, Env: []string{"HTTP_PROXY=" + proxy, "http_proxy=" + proxy, "HOME=/tmp"},
			Adjust: func(_ *container.Config, h *container.HostConfig) { h.DNS = []netip.Addr{ab.internalDNS} }}
		run, err := ab.probe(t, be)
		if err != nil {
			t.Fatal(err)
		}
		requireHealthy(t, ab, run)
	})
}

// TestAgentboxJoinBreaks: each way agentbox really breaks is caught by the
// joined probe, naming what answered.
func TestAgentboxJoinBreaks(t *testing.T) {
	e := newEngine(t)
	t.Run("agent connected to a network with a route out", func(t *testing.T) {
		ab := newAgentbox(t, e)
		if _, err := e.cli.NetworkConnect(context.Background(), ab.egress, client.NetworkConnectOptions{Container: ab.agent}); err != nil {
			t.Fatal(err)
		}
		run, err := ab.probe(t, nil)
		if err != nil {
			t.Fatal(err)
		}
		f := find(run, "egress.must-fail", ab.blocked.String()+":80")
		if f == nil || f.Status != report.Fail {
			t.Fatalf("must-fail %s: %+v\nfailures: %v", ab.blocked, f, failures(run))
		}
		if run.ExitCode() != report.ExitNonConformant {
			t.Errorf("exit %d, want 1", run.ExitCode())
		}
		t.Logf("%s: %s", f.Name(), report.ExpectedActual(*f))
	})
	t.Run("proxy allow-list widened", func(t *testing.T) {
		ab := newAgentbox(t, e)
		ab.widen(t, `^blocked\.agentbox\.test$`)
		run, err := ab.probe(t, nil)
		if err != nil {
			t.Fatal(err)
		}
		f := find(run, "egress.must-fail", "blocked.agentbox.test:80 via proxy")
		if f == nil || f.Status != report.Fail {
			t.Fatalf("must-fail via proxy: %+v\nfailures: %v", f, failures(run))
		}
		t.Logf("%s: %s", f.Name(), report.ExpectedActual(*f))
	})
	t.Run("proxy stopped", func(t *testing.T) {
		ab := newAgentbox(t, e)
		if _, err := e.cli.ContainerStop(context.Background(), ab.proxy, client.ContainerStopOptions{Signal: "KILL"}); err != nil {
			t.Fatal(err)
		}
		run, err := ab.probe(t, nil)
		if err != nil {
			t.Fatal(err)
		}
		f := find(run, "egress.allowed", "api.agentbox.test:80 via proxy")
		if f == nil || f.Status != report.Fail {
			t.Fatalf("allowed host with the proxy stopped: %+v", f)
		}
		for _, g := range run.Findings {
			if strings.HasPrefix(g.Check, "egress.") && g.Status == report.Pass && g.Check != "egress.allowed" && g.Deny != "" {
				t.Errorf("%s passed with the proxy stopped: %s", g.Name(), g.Evidence)
			}
		}
		if run.ExitCode() == report.ExitOK {
			t.Errorf("exit 0 with the proxy stopped")
		}
		t.Logf("%s: %s", f.Name(), report.ExpectedActual(*f))
	})
}

// TestAgentboxJoinRepeated: the healthy topology passes 20 runs in a row
// (SANDPROBE_AGENTBOX_RUNS overrides the count): no flaky deny, no
// leftover container, no control that sometimes misses.
func TestAgentboxJoinRepeated(t *testing.T) {
	e := newEngine(t)
	runs := 20
	if v := os.Getenv("SANDPROBE_AGENTBOX_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SANDPROBE_AGENTBOX_RUNS=%q: want a positive count", v)
		}
		runs = n
	}
	ab := newAgentbox(t, e)
	start := time.Now()
	for i := range runs {
		began := time.Now()
		run, err := ab.probe(t, nil)
		if err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		requireHealthy(t, ab, run)
		t.Logf("run %d: healthy in %s", i+1, time.Since(began).Round(time.Millisecond))
	}
	t.Logf("%d runs in a row healthy in %s (%s a run)", runs, time.Since(start).Round(time.Millisecond), (time.Since(start) / time.Duration(runs)).Round(time.Millisecond))
}

// widen adds a line to the proxy's allow-list and restarts it.
func (ab *agentbox) widen(t *testing.T, line string) {
	t.Helper()
	f, err := os.OpenFile(ab.filter, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, line)
	f.Close()
	if _, err := ab.e.cli.ContainerRestart(context.Background(), ab.proxy, client.ContainerRestartOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestAgentboxJoinFailsClosed: a sandbox that cannot be joined, or a
// control network that cannot be read, is a could-not-run error naming it.
func TestAgentboxJoinFailsClosed(t *testing.T) {
	e := newEngine(t)
	ab := newAgentbox(t, e)
	cases := []struct {
		name   string
		be     func() *docker.Backend
		before func(t *testing.T)
		detail string
	}{
		{name: "missing container", be: func() *docker.Backend { return &docker.Backend{Join: "sp-no-such-sandbox"} }, detail: "sp-no-such-sandbox to join does not exist"},
		{name: "unreadable control network", be: func() *docker.Backend { return &docker.Backend{Join: ab.agent, ControlNetwork: "sp-no-such-network"} }, detail: "control network sp-no-such-network"},
		{name: "control network is the sandbox's", be: func() *docker.Backend { return &docker.Backend{Join: ab.agent, ControlNetwork: ab.internal} }, detail: "is the sandbox's own network"},
		{name: "stopped sandbox", be: func() *docker.Backend { return &docker.Backend{Join: ab.agent} }, detail: "is not running (status exited)",
			before: func(t *testing.T) {
				if _, err := e.cli.ContainerStop(context.Background(), ab.agent, client.ContainerStopOptions{Signal: "KILL"}); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.before != nil {
				c.before(t)
			}
			run, err := ab.probe(t, c.be())
			var cnr *runner.CouldNotRun
			if !errors.As(err, &cnr) {
				t.Fatalf("err %v, want a could-not-run; findings %v", err, names(run.Findings))
			}
			if !strings.Contains(cnr.Detail, c.detail) || strings.Contains(cnr.Detail, "\n") {
				t.Errorf("detail %q, want one line with %q", cnr.Detail, c.detail)
			}
			if f := cnr.Finding(); f.Status != report.Error {
				t.Errorf("finding %+v", f)
			}
			t.Logf("%v", err)
		})
	}
}
