// Package policy owns the declared SandboxPolicy: the one file, kept in code
// review, that says what a sandbox must look like. It loads that file strictly
// (unknown fields are errors), fills in defaults, validates every field and
// reports every problem at once with its YAML path, and it owns host rules:
// how an allowance like "*.github.com:443" matches a destination.
//
// Nothing here does I/O beyond reading the policy file; the probe, the drift
// rules and the renderers all read the same Policy value.
package policy

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// APIVersion and Kind identify a SandboxPolicy document.
const (
	APIVersion = "sandprobe.dev/v1alpha1"
	Kind       = "SandboxPolicy"
)

// Defaults that DESIGN.md promises.
const (
	DefaultMetadataAddress = "169.254.169.254"
	DefaultTokenPath       = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	DefaultEgressTimeout   = 3 * time.Second
	DefaultToolTimeout     = 10 * time.Second
	DefaultBrowserTimeout  = 60 * time.Second
	DefaultAllowPort       = 443
	DefaultMustFailPort    = 443
	// DefaultProbeImage is the sandprobe image when the policy names none.
	DefaultProbeImage       = "ghcr.io/sandprobe/sandprobe:latest"
	DefaultMetadataPort     = 80
	DefaultSeccomp          = SeccompRuntimeDefault
	DefaultTokenExpectation = TokenAbsent
	// DefaultUID and DefaultGID are the identity of a policy that declares
	// none: the "nonroot" user of distroless and Chainguard images. A policy
	// that says nothing must never mean root.
	DefaultUID = 65532
	DefaultGID = 65532
)

// Seccomp modes a policy may ask for; they mirror the Kubernetes seccompProfile types.
const (
	SeccompRuntimeDefault = "RuntimeDefault"
	SeccompLocalhost      = "Localhost"
	SeccompUnconfined     = "Unconfined"
)

// Service-account token expectations.
const (
	TokenAbsent  = "absent"
	TokenAllowed = "allowed"
)

// Policy is one SandboxPolicy document.
type Policy struct {
	APIVersion string   `json:"apiVersion" validate:"required"`
	Kind       string   `json:"kind" validate:"required"`
	Metadata   Metadata `json:"metadata"`
	Spec       Spec     `json:"spec"`
}

// Metadata names the policy; the name appears in metrics and reports.
type Metadata struct {
	Name        string            `json:"name" validate:"required"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Spec is everything a sandbox must be.
type Spec struct {
	// Selector marks a pod or container as a sandbox.
	Selector Selector `json:"selector"`
	// Namespaces are where sandboxes live: a pod here without the selector's
	// labels is drift (it escapes every network policy that keys on them).
	Namespaces   []string   `json:"namespaces,omitempty"`
	Runtime      Runtime    `json:"runtime"`
	Identity     Identity   `json:"identity"`
	Filesystem   Filesystem `json:"filesystem"`
	Capabilities []string   `json:"capabilities"`
	// Devices are the device nodes beyond the container default set (null,
	// zero, full, random, urandom, tty, console, ptmx, pts) a sandbox is
	// meant to hold, by path: "/dev/fuse", "/dev/net/tun". Any other device
	// node is an escape precondition (check escape.devices).
	Devices         []string      `json:"devices,omitempty"`
	NoNewPrivileges *bool         `json:"noNewPrivileges,omitempty"`
	Seccomp         string        `json:"seccomp,omitempty" validate:"omitempty,oneof=RuntimeDefault Localhost Unconfined"`
	SeccompProfile  string        `json:"seccompProfile,omitempty"`
	ServiceAccount  string        `json:"serviceAccountToken,omitempty" validate:"omitempty,oneof=absent allowed"`
	TokenPath       string        `json:"serviceAccountTokenPath,omitempty"`
	Image           Image         `json:"image"`
	Resources       Resources     `json:"resources"`
	Browser         Browser       `json:"browser"`
	Secrets         Secrets       `json:"secrets"`
	Egress          Egress        `json:"egress"`
	Placement       Placement     `json:"placement"`
	Docker          Docker        `json:"docker"`
	Credentials     []Credential  `json:"credentials,omitempty" validate:"dive"`
	Probe           ProbeSettings `json:"probe"`
	// Phases is what outlives one phase of an attempt: the workspace the
	// phases share and the package caches a node keeps (docs/phases.md).
	Phases Phases `json:"phases,omitzero"`
}

// Phases says what the phases of one attempt share. The phases of one attempt run in fresh sandboxes but share a
// workspace volume, and every node keeps package caches that outlive the
// runs. What one phase leaves there runs in the next.
type Phases struct {
	// Workspace is where the shared workspace volume is mounted in the
	// sandbox. At the start of a phase, whatever on it would run or change
	// how tools run in the next one (git hooks and config, shell start-up
	// files, tool config, lifecycle scripts, symlinks out) is a finding
	// unless Baseline vouches for it (check phase.persistence).
	Workspace string `json:"workspace,omitempty"`
	// Baseline is the manifest the trusted step that cloned the repository
	// sealed (`sandprobe scan-workspace DIR --seal FILE`), mounted into the
	// sandbox read-only from outside the workspace: a phase must not be
	// able to rewrite what vouches for the workspace.
	Baseline string `json:"baseline,omitempty"`
	// Caches are the package caches mounted into the sandbox: each must
	// refuse writes with EROFS (check phase.cache-readonly), or one phase
	// poisons every later one on the node, and the sync every node.
	Caches []string `json:"caches,omitempty"`
}

// Selector is a Kubernetes-style label selector (matchLabels only: an
// expression-based selector cannot be turned back into labels for the probe pod).
type Selector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

// Runtime lists the isolation runtimes a sandbox may run under.
type Runtime struct {
	// ClassNames are the RuntimeClass names (Kubernetes) or runtime names (Docker).
	ClassNames []string `json:"classNames"`
	// Isolation says what each class must look like from inside: "gvisor",
	// "vm" or "none". Unset classes are inferred from their names.
	Isolation map[string]string `json:"isolation,omitempty"`
}

// Identity is the uid/gid a sandbox runs as. Unset ids default to
// DefaultUID/DefaultGID; an id of 0 (root, or the root group) is an error
// unless AllowRoot says so in so many words.
type Identity struct {
	UID                int64   `json:"uid" validate:"gte=0,lte=2147483647"`
	GID                int64   `json:"gid" validate:"gte=0,lte=2147483647"`
	FSGroup            *int64  `json:"fsGroup,omitempty" validate:"omitempty,gte=0,lte=2147483647"`
	SupplementalGroups []int64 `json:"supplementalGroups,omitempty" validate:"dive,gte=0,lte=2147483647"`
	// AllowRoot permits uid 0 or group 0 anywhere in the identity. It is the
	// only way to declare root: "uid: 0" alone is taken for a mistake.
	AllowRoot bool `json:"allowRoot,omitempty"`
}

// Filesystem describes the sandbox's mounts.
type Filesystem struct {
	// ReadOnlyRoot defaults to true; a writable root must be declared false.
	ReadOnlyRoot bool     `json:"readOnlyRoot"`
	Writable     []string `json:"writable,omitempty"`
	EmptyAtStart []string `json:"emptyAtStart,omitempty"`
	// SizeLimit bounds each writable path (an emptyDir sizeLimit or a tmpfs size).
	SizeLimit string `json:"sizeLimit,omitempty"`
}

// Image describes the sandbox image and what must run inside it.
type Image struct {
	// Ref is the real sandbox image; the probe runs inside it when set.
	Ref string `json:"ref,omitempty"`
	// RequireDigest defaults to true: a tag can be moved to another image.
	RequireDigest bool   `json:"requireDigest"`
	Tools         []Tool `json:"tools,omitempty" validate:"dive"`
}

// Tool is a program the sandbox's users need: it must start by name.
type Tool struct {
	Name    string   `json:"name" validate:"required"`
	Args    []string `json:"args,omitempty"`
	Timeout Duration `json:"timeout,omitzero"`
}

// Resources are the limits a sandbox must carry, in Kubernetes quantity notation.
type Resources struct {
	Limits   map[string]string `json:"limits,omitempty"`
	Requests map[string]string `json:"requests,omitempty"`
	// Pids caps the number of processes (Docker --pids-limit; pod pid limits are node-wide).
	Pids int64 `json:"pids,omitempty" validate:"gte=0"`
}

// Browser asks for proof that a headless browser starts and can write a screenshot.
type Browser struct {
	Screenshot bool     `json:"screenshot"`
	WriteTo    string   `json:"writeTo,omitempty"`
	Path       string   `json:"path,omitempty"`
	Timeout    Duration `json:"timeout,omitzero"`
}

// Secrets says which environment variables count as credentials.
type Secrets struct {
	EnvNamePatterns []string `json:"envNamePatterns,omitempty"`
	// Placeholders are values a credential-looking variable may hold because a
	// broker outside the sandbox swaps them for the real secret.
	Placeholders []string `json:"placeholders,omitempty"`
}

// Credential is a credential deliberately handed to a sandbox: it must be
// mounted read-only, from its declared source, at its declared path.
type Credential struct {
	Name      string `json:"name" validate:"required"`
	Source    string `json:"source" validate:"required"`
	MountPath string `json:"mountPath" validate:"required"`
	Reason    string `json:"reason" validate:"required"`
	// Kubernetes marks a credential for a Kubernetes API server and says
	// what it may do there at most: the probe asks the API server, with the
	// credential itself, what it is allowed (check creds.scope).
	Kubernetes *KubeCredential `json:"kubernetes,omitempty"`
	// MaxLifetime is the longest a token handed over here may live, from
	// issue to expiry (exp − iat of its JWT): a stolen copy is worth that
	// much at most (check creds.token-lifetime).
	MaxLifetime *Duration `json:"maxLifetime,omitempty"`
}

// KubeCredential is how the probe finds and uses a Kubernetes credential
// under the credential's mountPath, and the scope it is declared to have.
type KubeCredential struct {
	// Kubeconfig is the kubeconfig's file name under mountPath ("" with
	// token unset: mountPath itself is the kubeconfig). Its current context
	// gives the server, the CA and the user (token, token file or client
	// certificate; exec plugins are not run).
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// Token is a bearer token's file name under mountPath ("token"), for a
	// mounted service-account token; then Server and CAFile say where.
	Token string `json:"token,omitempty"`
	// Server is the API server's URL for a token (default: in-cluster,
	// https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT).
	Server string `json:"server,omitempty"`
	// CAFile is the PEM CA bundle for Server (default ca.crt beside the token).
	CAFile string `json:"caFile,omitempty"`
	// Namespaces are where the scope is asked about (permissions are per
	// namespace); default the kubeconfig context's namespace, the namespace
	// file beside the token, or "default".
	Namespaces []string `json:"namespaces,omitempty"`
	// Scope is the most the credential may do.
	Scope CredentialScope `json:"scope"`
}

// Credential scope presets.
const (
	// ScopeViewOnly: get, list and watch on anything but secrets and the
	// subresources that act (exec, attach, portforward, proxy); nothing else.
	ScopeViewOnly = "view-only"
	// ScopeNone: nothing beyond what every authenticated user may (discovery,
	// asking about its own rights).
	ScopeNone = "none"
)

// CredentialScope is a preset and rules beyond it, in RBAC's terms.
type CredentialScope struct {
	Preset string      `json:"preset,omitempty" validate:"omitempty,oneof=view-only none"`
	Allow  []ScopeRule `json:"allow,omitempty" validate:"dive"`
}

// ScopeRule allows verbs on resources of API groups, as an RBAC rule does:
// "" is the core group, "*" any; a resource may name a subresource
// ("pods/log").
type ScopeRule struct {
	APIGroups []string `json:"apiGroups,omitempty"`
	Resources []string `json:"resources" validate:"required"`
	Verbs     []string `json:"verbs" validate:"required"`
}

// Egress is the declared network surface.
type Egress struct {
	// Proxy is the forward proxy every allowed connection goes through, if any.
	Proxy string `json:"proxy,omitempty"`
	// ProxyLocation says where the proxy runs, for the rendered egress
	// policies: a NetworkPolicy cannot match the proxy's host name.
	ProxyLocation *Location `json:"proxyLocation,omitempty"`
	// CAFile is a PEM bundle the probe trusts in addition to the system roots
	// (an internal CA, or a lab's).
	CAFile   string         `json:"caFile,omitempty"`
	Allow    []Allowance    `json:"allow,omitempty" validate:"dive"`
	MustFail MustFail       `json:"mustFail"`
	Metadata MetadataTarget `json:"metadata"`
	DNS      DNS            `json:"dns"`
	Timeout  Duration       `json:"timeout,omitzero"`
	// Concurrency bounds how many attempts run at once; 0 (the default)
	// runs every attempt at once, up to 512 and the open-file limit.
	Concurrency int `json:"concurrency,omitempty" validate:"gte=0,lte=1024"`
	// ProxyDenyStatus are the HTTP statuses by which the proxy refuses a
	// destination (default 403 and 407). Through the proxy only these pass:
	// a 5xx means the proxy let the destination through.
	ProxyDenyStatus []int `json:"proxyDenyStatus,omitempty" validate:"dive,gte=400,lte=599"`
	// ProxyDenyHeaders are response headers by which the proxy signs a
	// refusal it serves inside a tunnel (a TLS-intercepting proxy answers
	// 200 to every CONNECT and refuses inside TLS). Squid's X-Squid-Error
	// and RFC 9209's Proxy-Status always count; a deny status without any
	// of them cannot be told from the destination's own.
	ProxyDenyHeaders []string `json:"proxyDenyHeaders,omitempty"`
	// Fronting is how domain fronting through the proxy is judged
	// (egress.sni-mismatch); unset, it is tested.
	Fronting *Fronting `json:"fronting,omitempty"`
}

// Fronting declares a proxy that cannot stop domain fronting. A proxy that filters on the CONNECT host alone cannot stop a
// ClientHello for another name in a tunnel it opened. A policy whose proxy
// is known to be such can say so, with why; the check then does not run
// (and says in `sandprobe checks` that it will not), rather than failing
// on every run until the proxy is replaced.
type Fronting struct {
	// Accepted is the reason the risk is accepted; required when set.
	Accepted string `json:"accepted"`
}

// Allowance is one allowed destination; every allowance carries a reason.
type Allowance struct {
	Host   string `json:"host" validate:"required"`
	Port   int    `json:"port,omitempty" validate:"gte=0,lte=65535"`
	Scheme string `json:"scheme,omitempty" validate:"omitempty,oneof=http https tcp"`
	Reason string `json:"reason" validate:"required"`
	// Probe is the concrete name the probe tries for a wildcard allowance
	// ("*.github.com" cannot be dialled; "api.github.com" can).
	Probe string `json:"probe,omitempty"`
	// Addresses are the allowed host's addresses, for sandboxes whose
	// resolver does not answer the name (only the proxy resolves it): the
	// proxy-bypass check dials them directly.
	Addresses []string `json:"addresses,omitempty"`
	// Location says where an in-cluster peer runs (a broker reached by its
	// Service name): render allows those pods (NetworkPolicy peers, Cilium
	// toEndpoints or toServices) rather than the name, which FQDN rules do
	// not match for ClusterIP traffic, and the probe dials the name
	// directly, never through the proxy.
	Location *Location `json:"location,omitempty"`
}

// InCluster reports whether the allowance is an in-cluster peer with a
// declared location: dialled directly, allowed by where it runs.
func (a Allowance) InCluster() bool { return a.Location != nil }

// PeerPorts are the ports the allowance's peer listens on: the location's
// (a Service's targetPorts, which a NetworkPolicy matches after the
// Service's translation), else the allowance's own.
func (a Allowance) PeerPorts() []int {
	if a.Location != nil && len(a.Location.Ports) > 0 {
		return a.Location.Ports
	}
	return []int{a.Port}
}

// MustFail lists destinations that must not be reachable.
type MustFail struct {
	Hosts []Target `json:"hosts,omitempty"`
	IPs   []Target `json:"ips,omitempty"`
	// NodePorts are ports on the sandbox's own node that must fail besides
	// the kubelet's and a container runtime's, which are always tried (a
	// node-local registry or cache): the probe dials them on the node's
	// address (Kubernetes: the downward API's status.hostIP).
	NodePorts []int `json:"nodePorts,omitempty" validate:"dive,gte=1,lte=65535"`
}

// Target is a must-fail destination. In YAML it is either a plain string
// ("example.com", "example.com:80", "1.1.1.1", "10.0.0.0/8", "[2001:db8::1]:443")
// or an object that can pin the failure it expects.
type Target struct {
	Target string `json:"target" validate:"required"`
	Port   int    `json:"port,omitempty" validate:"gte=0,lte=65535"`
	// Expect pins the failure class: a DROP policy gives "timeout"; if the
	// destination suddenly answers with a reset, something changed.
	Expect string `json:"expect,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Addresses are a must-fail host's addresses, dialled directly besides
	// what the name resolves to: with a resolver that refuses the name,
	// they are how the probe tests the path itself.
	Addresses []string `json:"addresses,omitempty"`

	// zeroPort records a port written as 0, which the defaults would
	// otherwise turn into 443 unseen (writtenZeroPorts refuses it).
	zeroPort bool
}

// UnmarshalJSON accepts the short string form as well as the object form.
func (t *Target) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*t = Target{Target: s}
		return nil
	}
	type plain Target
	var p plain
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("must be a string or an object with target, port, expect, reason, addresses: %w", err)
	}
	*t = Target(p)
	var port struct {
		Port *int `json:"port"`
	}
	t.zeroPort = json.Unmarshal(b, &port) == nil && port.Port != nil && *port.Port == 0
	return nil
}

// MetadataTarget is where cloud metadata services answer; every address
// must fail on every port. By default: 169.254.169.254 (AWS, GCP, Azure,
// OCI), fd00:ec2::254 (AWS over IPv6), 169.254.170.2 (ECS and Fargate task
// metadata) and 100.100.100.200 (Alibaba Cloud), on ports 80 and 443.
type MetadataTarget struct {
	// Addresses and Ports replace the defaults.
	Addresses []string `json:"addresses,omitempty"`
	Ports     []int    `json:"ports,omitempty" validate:"dive,gte=1,lte=65535"`
	// Address and Port are the one-address form: address: A is addresses: [A].
	Address string `json:"address,omitempty"`
	Port    int    `json:"port,omitempty" validate:"gte=0,lte=65535"`
}

// DNS says whether resolving arbitrary names is allowed. A resolver that
// answers anything is an exfiltration channel even when every connection fails.
type DNS struct {
	ArbitraryNames string `json:"arbitraryNames,omitempty" validate:"omitempty,oneof=deny allow"`
	// Domains under which a random name is tried; defaults to the allowed hosts' domains.
	Domains []string `json:"domains,omitempty"`
	// CanaryZone is a zone the operator controls whose authority answers
	// every name under it (a wildcard record): a random name under it that
	// resolves inside the sandbox proves queries leave it. Without one, an
	// NXDOMAIN cannot be told from a forwarder relaying the authority's.
	CanaryZone string `json:"canaryZone,omitempty"`
	// OutsideResolvers are DNS servers the sandbox must not reach directly
	// over UDP and TCP ("1.1.1.1" is port 53; "[2001:db8::53]:5353" names
	// one); default: the must-fail IPs, port 53.
	OutsideResolvers []string `json:"outsideResolvers,omitempty"`
	// ResolverLocation says where the sandbox's resolver runs (port 53, UDP
	// and TCP), for the rendered egress policies.
	ResolverLocation *Location `json:"resolverLocation,omitempty"`
	// ClusterDomain is the cluster's DNS domain (default cluster.local):
	// the rendered Cilium DNS rule allows the search-list expansions a
	// sandbox's C library asks for before an allowed name itself.
	ClusterDomain string `json:"clusterDomain,omitempty"`
}

// Location is where a service the sandbox must reach runs, in the terms a
// NetworkPolicy peer uses: pods (a namespace, optionally narrowed to the
// pods a selector picks) or addresses (CIDRs). Exactly one of the two.
type Location struct {
	Namespace   string    `json:"namespace,omitempty"`
	PodSelector *Selector `json:"podSelector,omitempty"`
	CIDRs       []string  `json:"cidrs,omitempty"`
	// Service is the name of the Service in Namespace that fronts the
	// pods (an allowance's location only): Cilium may allow it by
	// toServices; a NetworkPolicy still needs podSelector.
	Service string `json:"service,omitempty"`
	// Ports are the ports the pods listen on when they differ from the
	// allowance's port (a Service's targetPorts): a NetworkPolicy matches
	// the pod's port, after the Service's translation (an allowance's
	// location only).
	Ports []int `json:"ports,omitempty"`
}

// Prefixes parses the location's CIDRs (a bare address is its own /32 or
// /128); validation has refused any that do not parse.
func (l *Location) Prefixes() []netip.Prefix {
	if l == nil {
		return nil
	}
	out := make([]netip.Prefix, 0, len(l.CIDRs))
	for _, c := range l.CIDRs {
		if p, err := parseLocationCIDR(c); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// PodLabels are the location's pod selector labels (nil for every pod).
func (l *Location) PodLabels() map[string]string {
	if l == nil || l.PodSelector == nil {
		return nil
	}
	return l.PodSelector.MatchLabels
}

// parseLocationCIDR accepts "10.0.0.0/8" or a bare address.
func parseLocationCIDR(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR or an address", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR or an address", s)
	}
	return p, nil
}

// Placement is the sandbox node pool: the probe pod is scheduled the same way.
type Placement struct {
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	Tolerations  []Toleration      `json:"tolerations,omitempty" validate:"dive"`
}

// Toleration mirrors the Kubernetes toleration fields a node pool uses.
type Toleration struct {
	Key      string `json:"key,omitempty"`
	Operator string `json:"operator,omitempty" validate:"omitempty,oneof=Exists Equal"`
	Value    string `json:"value,omitempty"`
	Effect   string `json:"effect,omitempty" validate:"omitempty,oneof=NoSchedule PreferNoSchedule NoExecute"`
}

// Docker holds what only applies to sandboxes run as Docker containers.
type Docker struct {
	// Network is the (internal) network sandboxes attach to; "none" is allowed.
	Network string `json:"network,omitempty"`
}

// ProbeSettings tune the probe itself.
type ProbeSettings struct {
	// Image is the sandprobe image (the init container copies the binary from it).
	Image string `json:"image,omitempty"`
	// Deadline bounds one probe run from launch to result.
	Deadline Duration `json:"deadline,omitzero"`
	// Parallel caps the probe pods in flight on a cluster (0: scaled with
	// their count, docs/fleet.md).
	Parallel int `json:"parallel,omitempty" validate:"min=0,max=1000"`
	// RunDeadline bounds the whole fan-out of probe pods on a cluster; the
	// nodes not probed by then are could-not-run findings naming them (0:
	// scaled with the count, docs/fleet.md).
	RunDeadline Duration `json:"runDeadline,omitzero"`
	// Requests are what the probe pod asks the scheduler for (cpu, memory,
	// ephemeral-storage). The probe pod copies the sandbox's limits, so it
	// is held to them, but not spec.resources.requests: a probe on every
	// node of a busy pool must not reserve a sandbox's worth on each
	// (what it leaves out is DefaultProbeRequests'; each is capped at its
	// limit).
	Requests map[string]string `json:"requests,omitempty"`
}

// DefaultProbeRequests are the probe pod's requests when
// spec.probe.requests does not set them: what the probe needs to run.
var DefaultProbeRequests = map[string]string{"cpu": "50m", "memory": "64Mi", "ephemeral-storage": "64Mi"}

// Duration is a time.Duration written as "3s" in YAML.
type Duration struct{ time.Duration }

// UnmarshalJSON parses a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("must be a duration string like \"3s\" or \"500ms\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("must be a duration like \"3s\" or \"500ms\", got %q", s)
	}
	if v < 0 {
		return fmt.Errorf("must not be negative, got %q", s)
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	if d.Duration == 0 {
		return []byte(`""`), nil
	}
	return json.Marshal(d.Duration.String())
}

// IsZero lets omitempty-aware encoders skip unset durations.
func (d Duration) IsZero() bool { return d.Duration == 0 }
