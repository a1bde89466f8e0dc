package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// Written records which fields a policy file set itself: YAML path
// ("spec.egress.allow[0].host") → line. A path the file did not write took
// its value from a default.
type Written map[string]int

// Has reports whether the file wrote the field at path.
func (w Written) Has(path string) bool {
	_, ok := w[path]
	return ok
}

// LoadWritten is Load that also returns what the file wrote, so a reviewer
// can tell a declared value from a default.
func LoadWritten(data []byte) (*Policy, Written, error) {
	p, lines, err := load(data)
	if err != nil {
		return nil, nil, err
	}
	return p, Written(lines), nil
}

// Effective renders the policy with every default filled in, as YAML in
// field order that Load reads back to the same policy: what the policy
// means, not only what it says.
func (p *Policy) Effective() ([]byte, error) {
	raw, err := json.Marshal(p.filled())
	if err != nil {
		return nil, fmt.Errorf("encode policy %s: %w", p.Metadata.Name, err)
	}
	// JSON is YAML: decoding it as YAML keeps the struct's field order,
	// which a map would lose.
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("encode policy %s: %w", p.Metadata.Name, err)
	}
	blockStyle(&doc)
	for path, text := range p.defaultNotes() {
		comment(&doc, path, text)
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("encode policy %s: %w", p.Metadata.Name, err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode policy %s: %w", p.Metadata.Name, err)
	}
	return b.Bytes(), nil
}

// filled is the policy with the defaults filled in that the probe and the
// runners apply later, where Default leaves the field empty: a must-fail
// target's port, the probe image, the isolation each runtime class is
// held to. A copy: p itself is not changed.
func (p *Policy) filled() *Policy {
	q := *p
	e := &q.Spec.Egress
	fill := func(ts []Target) []Target {
		out := slices.Clone(ts)
		for i := range out {
			if d, err := ParseDestination(out[i].Target); err == nil && out[i].Port == 0 && d.Port == 0 {
				out[i].Port = DefaultMustFailPort
			}
		}
		return out
	}
	e.MustFail.Hosts, e.MustFail.IPs = fill(e.MustFail.Hosts), fill(e.MustFail.IPs)
	if q.Spec.Probe.Image == "" {
		q.Spec.Probe.Image = DefaultProbeImage
	}
	q.Spec.Probe.Requests = maps.Clone(DefaultProbeRequests)
	maps.Copy(q.Spec.Probe.Requests, p.Spec.Probe.Requests)
	if len(q.Spec.Runtime.ClassNames) > 0 {
		iso := make(map[string]string, len(q.Spec.Runtime.ClassNames))
		for _, c := range q.Spec.Runtime.ClassNames {
			iso[c] = q.Spec.Runtime.IsolationFor(c)
		}
		q.Spec.Runtime.Isolation = iso
	}
	return &q
}

// defaultNotes are comments on the fields whose default is a behaviour,
// not a value: --effective says what an empty one does.
func (p *Policy) defaultNotes() map[string]string {
	notes := map[string]string{}
	s := &p.Spec
	if len(s.Placement.NodeSelector) == 0 && len(s.Placement.Tolerations) == 0 {
		notes["spec.placement"] = "default: the sandbox node pool, the nodes the sandboxes run on (one probe per pool node with --per-node, the CronJob's default)"
	}
	if s.Probe.Parallel == 0 {
		notes["spec.probe"] = "default parallel: ceil(pods/16) in 16..128; runDeadline: ceil(pods/parallel) × (20s + deadline) + 1m, at least deadline + 1m (docs/fleet.md)"
	}
	if s.Egress.Concurrency == 0 {
		notes["spec.egress.timeout"] = "default concurrency: every attempt at once, up to 512 and the open-file limit, so a healthy egress run takes one timeout"
	}
	if s.Docker.Network == "" {
		notes["spec.docker"] = "default: no network is declared, so Docker drift does not judge the container's network"
	}
	if len(s.Runtime.ClassNames) > 0 {
		notes["spec.runtime.isolation"] = "what each class is held to: as declared, else inferred from its name (gvisor, runsc: gvisor; kata, firecracker, qemu, cloud-hypervisor: vm; any other: none)"
	}
	return notes
}

// comment puts text as the comment above the key at path ("spec.probe").
func comment(doc *yaml.Node, path, text string) {
	n := doc
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	parts := strings.Split(path, ".")
	for i, part := range parts {
		if n.Kind != yaml.MappingNode {
			return
		}
		found := false
		for k := 0; k+1 < len(n.Content); k += 2 {
			if n.Content[k].Value == part {
				if i == len(parts)-1 {
					n.Content[k].HeadComment = "# " + text
					return
				}
				n, found = n.Content[k+1], true
				break
			}
		}
		if !found {
			return
		}
	}
}

// blockStyle turns JSON's flow style into YAML's block style; the encoder
// quotes whatever would otherwise read as another type ("true", "1").
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// Weakening is one place where a policy is less strict than the strictest
// choice: it must be written in the policy, never come from a default.
type Weakening struct {
	Path  string // the field: "spec.filesystem.readOnlyRoot"
	Value string // what it holds: "false"
	Means string // what that allows, in a reviewer's words
}

// Weakenings lists every place where the policy allows more than the
// strictest choice. Every default is strict, so each of them must appear
// in the policy file (see Written); `sandprobe validate --effective` fails
// on one that does not.
func (p *Policy) Weakenings() []Weakening {
	s := &p.Spec
	var out []Weakening
	add := func(path, value, means string) { out = append(out, Weakening{Path: path, Value: value, Means: means}) }
	if s.Identity.AllowRoot {
		add("spec.identity.allowRoot", "true", fmt.Sprintf("root ids are allowed (uid %d, gid %d)", s.Identity.UID, s.Identity.GID))
	}
	if len(s.Runtime.ClassNames) == 0 {
		add("spec.runtime.classNames", "[]", "any runtime: no isolation runtime (gVisor, Kata) is required")
	}
	for _, class := range sortedKeys(s.Runtime.Isolation) {
		if s.Runtime.Isolation[class] == IsolationNone {
			add("spec.runtime.isolation."+class, IsolationNone, "runtime class "+class+" is accepted without any isolation from the node's kernel")
		}
	}
	if !s.Filesystem.ReadOnlyRoot {
		add("spec.filesystem.readOnlyRoot", "false", "the root filesystem may be writable")
	}
	if len(s.Capabilities) > 0 {
		add("spec.capabilities", "["+strings.Join(s.Capabilities, ", ")+"]", "these capabilities may remain")
	}
	if !s.NoNewPrivs() {
		add("spec.noNewPrivileges", "false", "processes may gain privileges through setuid binaries")
	}
	if s.Seccomp == SeccompUnconfined {
		add("spec.seccomp", SeccompUnconfined, "no seccomp filter is required")
	}
	if s.ServiceAccount == TokenAllowed {
		add("spec.serviceAccountToken", TokenAllowed, "a Kubernetes API token may reach the sandbox")
	}
	if !s.Image.RequireDigest {
		add("spec.image.requireDigest", "false", "images may be referenced by a tag that can move")
	}
	for i, a := range s.Egress.Allow {
		if a.Host == "*" {
			add(fmt.Sprintf("spec.egress.allow[%d].host", i), "*", fmt.Sprintf("every host on port %d", a.Port))
		}
	}
	if s.Egress.DNS.ArbitraryNames == "allow" {
		add("spec.egress.dns.arbitraryNames", "allow", "any name may resolve: DNS can carry data out")
	}
	return out
}
