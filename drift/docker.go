package drift

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
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

// dockerRule is a drift rule over Docker containers: its catalogue entry
// and its check. The rows live in dockerrules_*.go by theme; dockerRules
// lists them in catalogue order. A check reads the container as `docker
// inspect` prints it (the mounts merged by dockerCheck.mounts) and reports
// each failure with d.failAt at the field that decides it.
type dockerRule struct {
	row
	check func(d *dockerCheck, c *DockerContainer)
}

// dockerRules is every Docker rule, in catalogue order.
var dockerRules = slices.Concat(dockerLimitRules, dockerReachRules, dockerPhaseRules, dockerIsolationRules)

// Docker fields, in the order a container's findings are listed.
const (
	dReadonlyRootfs field = iota
	dCapDrop
	dCapAdd
	dNoNewPrivileges
	dPidsLimit
	dMemory
	dCPU
	dNetwork
	dUser
	dProxy
	dTmpfs
	dMounts
	dCredentials
	dEnv
	dPrivileged
	dNamespaces
	dSecurityOpt // seccomp and apparmor, in the options' order
	dDevices
	dRuntime
	dImage
)

// at is where a docker inspect field sits; index orders the findings of
// one field (the options of HostConfig.SecurityOpt).
func dockerAt(f field, index int, path string) place {
	return place{site: site(f)<<32 | site(uint32(index)), path: path}
}

// dockerCheck is one container going through the Docker rules.
type dockerCheck struct {
	e      *Engine
	c      *DockerContainer
	target string
	rule   string // the rule being run (failAt)
	out    []report.Finding
	sites  []site
	merged *[]mount // mounts(), merged on first use
}

// CheckContainer applies the Docker rules to one inspected container.
func (e *Engine) CheckContainer(c *DockerContainer) []report.Finding {
	d := &dockerCheck{e: e, c: c, target: containerTarget(c.DisplayName())}
	for _, r := range e.dockerRules {
		d.rule = r.ID
		r.check(d, c)
	}
	sortBySite(d.out, d.sites)
	return d.out
}

// failAt records a failure of the rule being run.
func (d *dockerCheck) failAt(at place, expected, actual, fix, evidence string) {
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
	d.sites = append(d.sites, at.site)
	d.out = append(d.out, report.Finding{
		Check: d.rule, Target: d.target, Subject: at.path, Status: report.Fail,
		Expected: expected, Actual: actual, Fix: fix, Evidence: evidence,
	})
}

// mounts are the container's mounts as the rules see them (merged once).
func (d *dockerCheck) mounts() []mount {
	if d.merged == nil {
		ms := d.c.mounts()
		d.merged = &ms
	}
	return *d.merged
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

func cpusText(v float64) string {
	return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
}
