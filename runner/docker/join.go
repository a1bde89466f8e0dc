package docker

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// joined is the live sandbox container the probe joins (Backend.Join):
// its network namespace, and what it runs with.
type joined struct {
	name     string
	c        container.InspectResponse
	networks []string // the Docker networks its namespace is attached to
	isolated bool     // --network none: loopback only
}

// joinSandbox inspects the container to join. A missing, stopped or
// host-network container cannot be probed where it stands: a could-not-run
// error naming it, never a probe of something else.
func (b *Backend) joinSandbox(a *attempt) (*joined, error) {
	b.progress("inspecting the sandbox container %s", b.Join)
	res, err := b.Client.ContainerInspect(a.runCtx, b.Join, client.ContainerInspectOptions{})
	if err != nil {
		if e := a.stopped("inspect container " + b.Join); e != nil {
			return nil, e
		}
		if cerrdefs.IsNotFound(err) {
			return nil, withFix(a.cannot(runner.ReasonLaunch, "the sandbox container %s to join does not exist on the Docker engine", b.Join), joinFix)
		}
		return nil, a.cannot(runner.ReasonLaunch, "inspect the sandbox container %s: %v", b.Join, err)
	}
	c := res.Container
	if c.State == nil || !c.State.Running || c.State.Paused {
		status := "unknown"
		if c.State != nil {
			status = string(c.State.Status)
		}
		return nil, withFix(a.cannot(runner.ReasonLaunch, "the sandbox container %s is not running (status %s): the probe joins a live sandbox's network", b.Join, status), joinFix)
	}
	if c.Config == nil || c.HostConfig == nil {
		return nil, a.cannot(runner.ReasonLaunch, "the engine's inspect of container %s has no configuration", b.Join)
	}
	j := &joined{name: strings.TrimPrefix(c.Name, "/"), c: c}
	mode := c.HostConfig.NetworkMode
	switch {
	case mode.IsHost():
		return nil, a.cannot(runner.ReasonLaunch, "the sandbox container %s runs in the host's network namespace: the probe never dials from there (sandprobe drift --docker reports the network)", b.Join)
	case mode.IsNone():
		j.isolated = true
	case mode.IsContainer():
		// It shares another container's namespace: so does the probe,
		// and that one's networks are the sandbox's.
		other, err := b.Client.ContainerInspect(a.runCtx, mode.ConnectedContainer(), client.ContainerInspectOptions{})
		if err != nil {
			return nil, a.cannot(runner.ReasonLaunch, "inspect container %s, whose network the sandbox %s shares: %v", mode.ConnectedContainer(), b.Join, err)
		}
		j.networks = networkNames(other.Container.NetworkSettings)
	default:
		j.networks = networkNames(c.NetworkSettings)
	}
	if !j.isolated && len(j.networks) == 0 {
		return nil, a.cannot(runner.ReasonLaunch, "the sandbox container %s is attached to no network the engine names (network mode %q)", b.Join, mode)
	}
	return j, nil
}

const joinFix = "--join a running sandbox container (docker ps lists them; docker start NAME brings a stopped one back)"

// withFix gives a could-not-run error the fix its cause calls for.
func withFix(err error, fix string) error {
	var cnr *runner.CouldNotRun
	if errors.As(err, &cnr) {
		cnr.Fix = fix
	}
	return err
}

func networkNames(ns *container.NetworkSettings) []string {
	if ns == nil {
		return nil
	}
	var out []string
	for name := range ns.Networks {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// joinConfig makes the probe's container the live sandbox's twin: its
// network namespace, image, runtime, user, environment, root, privileges,
// limits and mounts, so that what the probe sees is what the sandbox's
// processes see. The policy's emptyAtStart paths stay fresh tmpfs mounts:
// the probe is a new start of the sandbox, and a live workspace is full.
func joinConfig(j *joined, p *policy.Policy, cfg *container.Config, host *container.HostConfig) {
	lc, lh := j.c.Config, j.c.HostConfig
	cfg.Image = lc.Image
	cfg.User = lc.User
	cfg.Env = append(slices.Clone(lc.Env), cfg.Env...)
	host.NetworkMode = container.NetworkMode("container:" + j.c.ID)
	host.Runtime = lh.Runtime
	host.ReadonlyRootfs = lh.ReadonlyRootfs
	host.Privileged = lh.Privileged
	host.CapAdd, host.CapDrop = slices.Clone(lh.CapAdd), slices.Clone(lh.CapDrop)
	host.SecurityOpt = slices.Clone(lh.SecurityOpt)
	host.GroupAdd = slices.Clone(lh.GroupAdd)
	host.Devices = slices.Clone(lh.Devices)
	host.Memory, host.MemorySwap, host.NanoCPUs, host.PidsLimit = lh.Memory, lh.MemorySwap, lh.NanoCPUs, lh.PidsLimit
	fresh := p.Spec.Filesystem.EmptyAtStart
	tmpfs := map[string]string{}
	for path, opts := range lh.Tmpfs {
		tmpfs[path] = opts
	}
	for _, path := range fresh {
		if opts, ok := host.Tmpfs[path]; ok {
			tmpfs[path] = opts
		}
	}
	host.Tmpfs = tmpfs
	host.Mounts = nil
	for _, m := range j.c.Mounts {
		if slices.Contains(fresh, m.Destination) || tmpfs[m.Destination] != "" {
			continue
		}
		switch m.Type {
		case mount.TypeBind:
			host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Destination, ReadOnly: !m.RW})
		case mount.TypeVolume:
			host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeVolume, Source: m.Name, Target: m.Destination, ReadOnly: !m.RW})
		case mount.TypeTmpfs:
			host.Tmpfs[m.Destination] = ""
		}
	}
}

// controlPlace is where the control container dials from: a network no
// sandbox rule governs (the proxy's egress side), or why there is none.
type controlPlace struct {
	network  string
	isolated string // the sandbox has no network: nothing to dial from elsewhere
	err      error  // no control: every deny stays unproven, saying why
}

// controlNetwork finds the control's network: ControlNetwork when set,
// else the proxy's other network. The proxy is the container on one of the
// sandbox's networks that answers to the proxy's host (a name, an alias or
// an address there); the networks it is on besides the sandbox's are its
// egress side, where what the sandbox must not reach does answer.
func (b *Backend) controlNetwork(a *attempt, p *policy.Policy, sandboxNets []string) (controlPlace, error) {
	if b.ControlNetwork != "" {
		if slices.Contains(sandboxNets, b.ControlNetwork) {
			return controlPlace{}, a.cannot(runner.ReasonLaunch, "--control-network %s is the sandbox's own network: its rules govern the control too", b.ControlNetwork)
		}
		if _, err := b.Client.NetworkInspect(a.runCtx, b.ControlNetwork, client.NetworkInspectOptions{}); err != nil {
			return controlPlace{}, withFix(a.cannot(runner.ReasonLaunch, "the control network %s: %v", b.ControlNetwork, err), "name an existing network outside the sandbox's door with --control-network (docker network ls), or leave it out to use the proxy's egress network")
		}
		return controlPlace{network: b.ControlNetwork}, nil
	}
	proxy := p.Spec.Egress.Proxy
	if proxy == "" {
		return controlPlace{err: fmt.Errorf("no proxy is declared, so no egress network is known to dial from: give --control-network")}, nil
	}
	u, err := url.Parse(proxy)
	if err != nil || u.Hostname() == "" {
		return controlPlace{err: fmt.Errorf("spec.egress.proxy %q names no host", proxy)}, nil
	}
	host := u.Hostname()
	for _, n := range sandboxNets {
		net, err := b.Client.NetworkInspect(a.runCtx, n, client.NetworkInspectOptions{})
		if err != nil {
			return controlPlace{}, a.cannot(runner.ReasonLaunch, "inspect the sandbox's network %s: %v", n, err)
		}
		for id, ep := range net.Network.Containers {
			pc, err := b.Client.ContainerInspect(a.runCtx, id, client.ContainerInspectOptions{})
			if err != nil || !answersTo(pc.Container, n, ep.Name, host) {
				continue
			}
			var egress []string
			for _, other := range networkNames(pc.Container.NetworkSettings) {
				if !slices.Contains(sandboxNets, other) {
					egress = append(egress, other)
				}
			}
			switch len(egress) {
			case 0:
				return controlPlace{err: fmt.Errorf("the proxy container %s is on the sandbox's network only: it has no egress side to dial from (give --control-network)", ep.Name)}, nil
			case 1:
				return controlPlace{network: egress[0]}, nil
			}
			return controlPlace{err: fmt.Errorf("the proxy container %s is on several other networks (%s): give --control-network", ep.Name, strings.Join(egress, ", "))}, nil
		}
	}
	return controlPlace{err: fmt.Errorf("no running container on the sandbox's network %s answers to the proxy's host %s (is the proxy up?): give --control-network", strings.Join(sandboxNets, ", "), host)}, nil
}

// answersTo says whether c answers to host on network n as Docker's
// resolver there answers: by its name or an alias there; or by its address
// there (a proxy named by address, or through --add-host).
func answersTo(c container.InspectResponse, n, name, host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if strings.EqualFold(name, host) || strings.EqualFold(strings.TrimPrefix(c.Name, "/"), host) {
		return true
	}
	if c.NetworkSettings == nil || c.NetworkSettings.Networks[n] == nil {
		return false
	}
	ep := c.NetworkSettings.Networks[n]
	for _, alias := range append(slices.Clone(ep.Aliases), ep.DNSNames...) {
		if strings.EqualFold(alias, host) {
			return true
		}
	}
	addr, err := netip.ParseAddr(host)
	return err == nil && (ep.IPAddress == addr || ep.GlobalIPv6Address == addr)
}

// placeControl says where the control dials from: nowhere when the sandbox
// has no network at all (nothing outside can answer it), else the egress
// network controlNetwork finds.
func (b *Backend) placeControl(a *attempt, p *policy.Policy, sb *joined) (controlPlace, error) {
	var nets []string
	switch {
	case sb != nil && sb.isolated:
		return controlPlace{isolated: fmt.Sprintf("the sandbox container %s has no network (--network none): loopback only", sb.name)}, nil
	case sb != nil:
		nets = sb.networks
	case b.Network == "" || b.Network == "none":
		return controlPlace{isolated: "the container has no network (--network none): loopback only"}, nil
	default:
		nets = []string{b.Network}
	}
	return b.controlNetwork(a, p, nets)
}

// runControl runs `sandprobe probe --control` in a container on the
// control's network, under the policy's constraints: it dials every
// must-fail destination where no sandbox rule applies, so that a deny in
// the sandbox counts only where the control got an answer.
func (b *Backend) runControl(a *attempt, spec runner.ProbeSpec, l *launch, network string) (report.ProbeResult, error) {
	ca := *a
	ca.target = "docker/" + network
	cfg, host := ContainerConfig(spec.Policy, l.image, l.facts.runtime, network, b.Env)
	argv := []string{ProbePath, "probe", "--control", "--policy", PolicyPath, "--nonce", spec.Nonce, "--termination-log", "/dev/null"}
	cfg.Entrypoint, cfg.Cmd = argv[:1], argv[1:]
	cfg.Labels = b.labels(a, "control")
	host.Binds = []string{l.bin + ":" + ProbePath + ":ro", filepath.Join(l.policyDir, "policy.yaml") + ":" + PolicyPath + ":ro"}
	created, err := b.Client.ContainerCreate(a.runCtx, client.ContainerCreateOptions{Config: cfg, HostConfig: host, Name: "sandprobe-control-" + shortNonce(spec.Nonce)})
	if err != nil {
		return report.ProbeResult{}, fmt.Errorf("create the control container on network %s: %w", network, err)
	}
	defer b.remove(context.WithoutCancel(a.ctx), created.ID)
	if err := b.startAndWait(&ca, created.ID, l.facts.runtime); err != nil {
		return report.ProbeResult{}, err
	}
	return b.collect(&ca, created.ID, spec.Nonce)
}

// control turns where the control ran, and what it saw, into the verdict
// every deny is judged by.
func control(place controlPlace, ctl report.ProbeResult, err error) *runner.Control {
	switch {
	case place.isolated != "":
		return &runner.Control{Vantage: "docker", Isolated: place.isolated}
	case place.network == "":
		return &runner.Control{Vantage: "docker", Err: place.err}
	}
	c := runner.NewControl("docker/"+place.network, ctl)
	c.Err = err
	return c
}
