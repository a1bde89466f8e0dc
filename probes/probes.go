// Package probes owns the in-sandbox checks: what a sandbox can really do,
// seen from inside it. It runs in a hostile, read-only, capability-less box,
// so it stays small: the standard library, x/sys, x/net's dnsmessage (the
// DNS wire format its own resolver speaks, the package the standard
// library's resolver uses), the policy and report packages, conc for
// fan-out and chromedp for the browser check.
//
// Every check is listed once, in Catalogue; `sandprobe checks`, the docs and
// the probe itself all read that table.
package probes

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/sandprobe/sandprobe/internal/version"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// Env is what a check may look at.
type Env struct {
	Policy  *policy.Policy
	Nonce   string
	Environ []string // the process environment, as os.Environ gives it
	Now     func() time.Time

	egressMu sync.Mutex
	egress   *egressRun // every egress attempt, run once for all egress checks
	// dnsServer replaces resolv.conf's nameservers (tests: a loopback server).
	dnsServer string
	// tokenRoots replaces the usual mount points creds.sa-token searches
	// (tests: a temporary directory).
	tokenRoots []string
	// RuntimeClass is the runtime class (or Docker runtime) the runner
	// launched the probe under; "" when it did not say.
	RuntimeClass string
	// ImageCommand is the image's own entrypoint and command, handed over by
	// verify-image so the probe can start it under the same constraints.
	ImageCommand        []string
	ImageCommandTimeout time.Duration
	// PodInfoDir is the pod's downward-API volume (Kubernetes runners only).
	PodInfoDir string
	// Phase is set when the probe runs in a phase's own sandbox, with the
	// workspace and caches the phases share mounted (probe --phase): a
	// probe pod the runner launched has none of them, and leaves the
	// phase.* checks out rather than judge a volume it does not have.
	Phase bool
	// SettleDelay, when set, is how long the probe waits before it dials
	// once more every direct deny that answered: a new Kubernetes pod can
	// run before its NetworkPolicy engine isolates it (recheckAnswered).
	SettleDelay time.Duration
	// Runtime is what the probe sees of its isolation runtime; Run fills it.
	Runtime *result.RuntimeEvidence
}

// Check is one entry of the catalogue.
type Check struct {
	ID     string // "fs.root-readonly"
	Proves string // one sentence: what a pass proves
	Fix    string // the default fix for a failure, when the finding has none
	// Severity is how bad a failure is: critical when the sandbox boundary
	// is gone, high when one wall is down, medium for missing hardening in
	// depth, low for what breaks the sandbox's work rather than its walls.
	Severity result.Severity
	// Role is what a finding of the check means beyond its own status (a
	// deny the control must prove, an allowance, a DNS channel); "" for
	// none. The runner, the metrics and the page read it from the finding.
	Role result.Role
	// Judge is how the runner judges the check's denies beyond its role:
	// whether what answers nobody (the control included) is not
	// applicable, whether the DNS-only follow-up settles a name the
	// sandbox's resolver stopped. Zero for none.
	Judge result.Judge
	// Network checks send traffic; verify-image runs without them.
	Network bool
	// Late checks run after the quick local ones, concurrently: they are slow
	// (network, browser) or write to the declared writable paths.
	Late bool
	// Applies says whether the policy asks for this check at all.
	Applies func(*policy.Policy) bool
	// Needs says whether the runner handed over what the check needs; nil
	// means nothing. A check without its input is left out, not skipped.
	Needs func(*Env) bool
	Run   func(ctx context.Context, env *Env) []result.Finding
}

// Area is the check's group ("fs" for "fs.root-readonly").
func (c Check) Area() string { return result.Area(c.ID) }

// Catalogue is the one table of checks, in the order they run.
func Catalogue() []Check {
	return []Check{
		// Runs first: every other check may write into the declared paths.
		{ID: "fs.empty-at-start", Run: checkEmptyAtStart, Severity: result.High,
			Proves:  "each declared empty path (the workspace) holds nothing when the sandbox starts, so no earlier job's files leak in",
			Fix:     "mount a fresh emptyDir (or tmpfs) at the path instead of a reused volume or image directory",
			Applies: func(p *policy.Policy) bool { return len(p.Spec.Filesystem.EmptyAtStart) > 0 }},
		{ID: CheckPersistence, Run: checkPhasePersistence, Severity: result.High,
			Proves:  "in a phase's own sandbox (probe --phase), nothing on the shared workspace (spec.phases.workspace) would run, or change how tools run, in this phase beyond what the trusted step sealed in the baseline (spec.phases.baseline, itself out of the sandbox's reach): no executable git hook (.git/hooks, submodules, bare repositories, the directory core.hooksPath names), no git config key that runs a command or redirects git (core.hooksPath, core.fsmonitor, include and includeIf, filter, diff and merge drivers, url.*.insteadOf, …), no .git file or symlink pointing out of the workspace, no shell start-up file, no .npmrc, pip.conf, NuGet.Config, .envrc or .tool-versions, no npm lifecycle script outside node_modules; named by path and reason, never by content; a part the scan cannot read is an error, an empty workspace inconclusive",
			Fix:     "remove what the earlier phase left (the finding names it), keep HOME off the shared volume, and seal the workspace after the trusted clone: sandprobe scan-workspace DIR --seal FILE",
			Applies: func(p *policy.Policy) bool { return p.Spec.Phases.Workspace != "" },
			Needs:   func(e *Env) bool { return e.Phase }},
		{ID: "phase.cache-readonly", Run: checkCacheReadOnly, Severity: result.High,
			Proves:  "in a phase's own sandbox (probe --phase), each declared package-cache mount (spec.phases.caches) refuses writes because it is mounted read-only — statfs ST_RDONLY, the mount table's ro or EROFS for a write, not merely EACCES for this uid — and no read-write mount sits under it: no phase can poison the cache the next phase (and, through the sync, every node) installs from",
			Fix:     "mount the cache read-only into every sandbox (volumeMounts[].readOnly: true; docker: -v CACHE:PATH:ro) and fill it only from a trusted step, sealed (sandprobe cache seal)",
			Applies: func(p *policy.Policy) bool { return len(p.Spec.Phases.Caches) > 0 },
			Needs:   func(e *Env) bool { return e.Phase }},
		{ID: "identity.uid", Run: checkUID, Severity: result.High,
			Proves: "the sandbox runs as the declared user id (real and effective)",
			Fix:    "set securityContext.runAsUser and runAsNonRoot: true (docker: --user UID:GID)"},
		{ID: "identity.gid", Run: checkGID, Severity: result.Medium,
			Proves: "the sandbox runs as the declared group id (real and effective)",
			Fix:    "set securityContext.runAsGroup (docker: --user UID:GID)"},
		{ID: "identity.groups", Run: checkGroups, Severity: result.High,
			Proves: "the process holds no supplementary groups beyond the declared ones (no root group 0, no docker group)",
			Fix:    "set supplementalGroups explicitly and do not add groups in the image (docker: no --group-add)"},
		{ID: "caps.sets", Run: checkCapabilities, Severity: result.High,
			Proves: "the effective, permitted, inheritable, bounding and ambient capability sets hold nothing beyond the declared capabilities",
			Fix:    "drop ALL capabilities (securityContext.capabilities.drop: [ALL]; docker: --cap-drop ALL) and add none"},
		{ID: "caps.no-new-privs", Run: checkNoNewPrivs, Severity: result.High,
			Proves:  "no_new_privs is set (prctl), so setuid binaries and file capabilities cannot raise privileges",
			Fix:     "set allowPrivilegeEscalation: false (docker: --security-opt no-new-privileges)",
			Applies: func(p *policy.Policy) bool { return p.Spec.NoNewPrivs() }},
		{ID: "caps.seccomp", Run: checkSeccomp, Severity: result.Medium,
			Proves:  "a seccomp filter is installed (prctl PR_GET_SECCOMP reports filter mode)",
			Fix:     "set securityContext.seccompProfile.type: RuntimeDefault (docker: do not pass --security-opt seccomp=unconfined)",
			Applies: func(p *policy.Policy) bool { return p.Spec.Seccomp != policy.SeccompUnconfined }},
		{ID: "fs.root-readonly", Run: checkRootReadOnly, Severity: result.Medium,
			Proves:  "the root filesystem is mounted read-only (statvfs ST_RDONLY, the mount table's ro flag, or EROFS for a write the uid's permissions allow), not merely unwritable for this uid (EACCES)",
			Fix:     "set securityContext.readOnlyRootFilesystem: true (docker: --read-only)",
			Applies: func(p *policy.Policy) bool { return p.Spec.Filesystem.ReadOnlyRoot }},
		{ID: "fs.writable", Run: checkWritable, Severity: result.Low,
			Proves:  "each declared writable path accepts a new file from the sandbox's uid",
			Fix:     "mount an emptyDir at the path (docker: --tmpfs PATH:mode=1777) so the sandbox uid can write it",
			Applies: func(p *policy.Policy) bool { return len(p.Spec.Filesystem.Writable) > 0 }},
		{ID: "creds.sa-token", Run: checkServiceAccountToken, Severity: result.High,
			Proves:  "no Kubernetes service-account token is mounted at the declared path, nor any file named like a token under the usual mount points (/var/run/secrets, /run/secrets: projected tokens for other audiences, a cloud's workload identity, Docker secrets); no token is read",
			Fix:     "set automountServiceAccountToken: false on the pod (and its ServiceAccount) and mount no projected token",
			Applies: func(p *policy.Policy) bool { return p.Spec.ServiceAccount == policy.TokenAbsent }},
		{ID: "creds.env-secrets", Run: checkEnvSecrets, Severity: result.High,
			Proves: "no environment variable whose name looks like a credential holds anything but a declared placeholder",
			Fix:    "remove the variable from the sandbox's environment and let the broker inject the credential outside the sandbox"},
		{ID: "creds.token-lifetime", Run: checkTokenLifetime, Severity: result.Medium,
			Proves: "each declared credential with spec.credentials[].maxLifetime holds a JWT that lives no longer than that from issue to expiry (exp − iat, or nbf): a stolen copy is worth that long at most; a token that never expires fails, one without iat or nbf is inconclusive unless it outlives the bound from now, an opaque token is an error; the token is in no output",
			Fix:    "issue the token with a shorter lifetime (a TokenRequest's or a projected serviceAccountToken's expirationSeconds) and rotate it, or declare the lifetime it really has",
			Applies: func(p *policy.Policy) bool {
				return slices.ContainsFunc(p.Spec.Credentials, func(c policy.Credential) bool { return c.MaxLifetime != nil })
			}},
		{ID: "creds.files", Run: checkCredFiles, Severity: result.High,
			Proves: "no credential file is readable beyond the declared credentials: ~/.git-credentials, .netrc, an .npmrc with a literal _authToken, ~/.docker/config.json auths, AWS, gcloud, Azure and OCI credential files, kubeconfigs the policy does not declare, gh, PyPI, cargo, RubyGems and Terraform tokens, SSH private keys — in HOME, /root, every /home directory, the shared workspace and wherever the environment points tools (KUBECONFIG, GOOGLE_APPLICATION_CREDENTIALS, DOCKER_CONFIG, …); named by path and what it holds, never by content",
			Fix:    "remove the file from the image and the home directory, and hand the sandbox only declared credentials (spec.credentials) through a broker or a read-only mount"},
		{ID: "creds.proc-environ", Run: checkProcEnviron, Severity: result.High,
			Proves: "no other process the sandbox can see has a readable environment (/proc/PID/environ) holding a credential-looking variable (spec.secrets.envNamePatterns) that the probe does not hold itself: no sidecar or agent process of the same uid carries a token within reach; names only, never values",
			Fix:    "run processes that hold credentials as another uid and outside the sandbox's PID namespace (no shareProcessNamespace with them, no hostPID), or give them the credential through a file only they can read"},
		{ID: "creds.scope", Run: checkCredsScope, Severity: result.High, Network: true, Late: true,
			Proves: "each declared Kubernetes credential (spec.credentials[].kubernetes) may do no more than its declared scope: the probe asks the API server with the credential itself (SelfSubjectRulesReview, and a SelfSubjectAccessReview for each verb that matters: secrets get/list/watch, pods create, pods/exec and attach create, tokens, impersonation, role bindings, writes, everything); a credential the server refuses (expired, revoked) is an error, never a pass; its secret is in no output",
			Fix:    "bind the credential's user to a role with no more than the declared scope (view-only: the view ClusterRole), or declare what it really needs",
			Applies: func(p *policy.Policy) bool {
				return slices.ContainsFunc(p.Spec.Credentials, func(c policy.Credential) bool { return c.Kubernetes != nil })
			}},
		// Escape preconditions: observed only (stat, open for reading,
		// access(2), connect(2), /proc); nothing is written, loaded or attached.
		{ID: "escape.runtime-socket", Run: checkRuntimeSocket, Severity: result.Critical,
			Proves: "no container runtime socket (Docker, containerd, CRI-O, Podman, BuildKit) is reachable: none at the usual paths, mounted in, named by $DOCKER_HOST and friends, or named like one in the usual directories accepts a connection (connect(2), closed at once, nothing sent)",
			Fix:    "remove the runtime socket from the sandbox (no hostPath of /var/run/docker.sock or containerd.sock; docker: no -v /var/run/docker.sock): whoever reaches it runs a privileged container on the node"},
		{ID: "escape.host-pid", Run: checkHostPID, Severity: result.Critical,
			Proves: "the sandbox has a PID namespace of its own: no kernel thread is visible (they exist only in the host's namespace) and, on Linux, the namespace is not the kernel's initial one",
			Fix:    "do not share the host's PID namespace (hostPID: false; docker: no --pid=host)"},
		{ID: "escape.host-net", Run: checkHostNet, Severity: result.Critical,
			Proves: "the sandbox has a network namespace of its own: on Linux the sysctls only the initial namespace has are absent and its inode is not the initial one's; under gVisor no node interface is visible",
			Fix:    "do not share the host's network namespace (hostNetwork: false; docker: no --network host); on the host's network no egress policy applies"},
		{ID: "escape.cgroup", Run: checkCgroup, Severity: result.Critical,
			Proves: "no cgroup filesystem the sandbox sees has a control file (cgroup.procs, tasks, notify_on_release, subtree_control) or a release_agent this process may write (access(2), nothing written)",
			Fix:    "mount the cgroup filesystem read-only (the runtime default; not privileged: true, docker: no --privileged, no -v /sys/fs/cgroup:…:rw) and run as non-root"},
		{ID: "escape.host-fs", Run: checkHostFS, Severity: result.Critical,
			Proves: "no block device node is visible (under /dev or mounted elsewhere) and no mounted filesystem root holds a system's directory tree (the host's / mounted in)",
			Fix:    "remove the host disk and the host root from the sandbox (no privileged: true, no hostPath: / or of a device; docker: no --device /dev/sdX, no -v /:/host)"},
		{ID: "escape.devices", Run: checkDevices, Severity: result.High,
			Proves: "every device node (under /dev, or mounted elsewhere) is in the container default set — null, zero, full, random, urandom, tty, console, ptmx, pts — or declared in spec.devices; judged by device number, whatever its name (gVisor's own FUSE and TUN excepted)",
			Fix:    "remove the device from the sandbox (no privileged: true, no device plugin or --device for it), or declare it in spec.devices if the sandbox really needs it"},
		{ID: "escape.proc-sys", Run: checkProcSys, Severity: result.Critical,
			Proves: "no host-wide kernel tunable under /proc/sys (kernel, vm, fs), /proc/sysrq-trigger nor sysfs attribute under /sys is writable by this process (access(2) file by file, nothing written)",
			Fix:    "keep /proc/sys and /sys read-only (the runtime default: not privileged: true, procMount: Default; docker: no --privileged, no --security-opt systempaths=unconfined) and run as non-root"},
		{ID: "escape.ptrace", Run: checkPtrace, Severity: result.High,
			Proves: "no process outside the probe's own can be ptraced: the kernel's ptrace access check (opening /proc/PID/maps, closed unread) refuses every other visible process, or Yama's ptrace_scope or a seccomp filter forbids attaching; nothing is attached to",
			Fix:    "give the sandbox its own PID namespace (no hostPID, no shareProcessNamespace with other workloads), drop CAP_SYS_PTRACE, and keep the runtime's seccomp profile"},
		{ID: "escape.module-load", Run: checkModuleLoad, Severity: result.Critical,
			Proves: "this process cannot load a kernel module: the kernel has no module support, or kernel.modules_disabled is 1, or the process lacks CAP_SYS_MODULE (nothing is loaded)",
			Fix:    "drop CAP_SYS_MODULE (capabilities.drop: [ALL]; docker: --cap-drop ALL, no --privileged); on the node, set kernel.modules_disabled=1 once its modules are loaded"},
		{ID: "tools.run", Run: checkTools, Severity: result.Low,
			Proves:  "each declared tool starts by name with its arguments and exits 0 within its timeout",
			Fix:     "install the tool in the image, on PATH, runnable by the sandbox uid under a read-only root",
			Applies: func(p *policy.Policy) bool { return len(p.Spec.Image.Tools) > 0 }},
		{ID: checkAllowed, Run: checkEgressAllowed, Role: result.RoleAllowance, Severity: result.Medium, Network: true, Late: true,
			Proves:  "each allowed host answers from inside the sandbox — through the proxy when one is declared (CONNECT for HTTPS, an absolute URL for HTTP) — and its TLS handshake completes (an HTTP status line for plain HTTP); a connection accepted and closed with nothing exchanged (a sidecar's blackhole) is intercepted: inconclusive",
			Fix:     "allow the host in the sandbox's egress rules (and the proxy's allow-list)",
			Applies: func(p *policy.Policy) bool { return len(p.Spec.Egress.Allow) > 0 }},
		{ID: checkMustFail, Run: checkEgressMustFail, Role: result.RoleMustFail, Judge: result.Judge{FollowUp: true}, Severity: result.Critical, Network: true, Late: true,
			Proves: "every must-fail host (each address it resolves to, and each declared), raw IP and CIDR, and every neighbour derived from where the sandbox runs (its node's address from the downward API on the kubelet's 10250 and 10255, a container runtime's TCP API 2375 and 2376 and spec.egress.mustFail.nodePorts, subjects node:PORT; the API server's service address unless the policy allows it), fails directly — with the pinned failure class where one is declared — and through the proxy by the proxy's own deny status, over CONNECT and, for every target, over plain HTTP (a GET to port 80); each attempt made with its whole timeout; inconclusive when a connection was only accepted and closed with nothing exchanged, or answered only by an Envoy sidecar's own 502 for a host it will not route (intercepted: a mesh sidecar, a transparent proxy), when nothing shows the network works, when only the resolver stopped a name and no address was dialled (a DNS-only block is no network deny), or when the failure cannot be told from the probe's own",
			Fix:    "restore the deny rule for the destination in the sandbox's egress policy",
			Applies: func(p *policy.Policy) bool {
				return len(p.Spec.Egress.MustFail.Hosts)+len(p.Spec.Egress.MustFail.IPs) > 0
			}},
		{ID: checkMetadata, Run: checkEgressMetadata, Role: result.RoleMetadata, Judge: result.Judge{Unserved: true}, Severity: result.Critical, Network: true, Late: true,
			Proves: "no cloud metadata address answers — 169.254.169.254, fd00:ec2::254, 169.254.170.2 and 100.100.100.200 on ports 80 and 443, unless the policy names others — directly, nor through the proxy (only its deny passes); a place the control vantage cannot reach either, while it reaches others on the same run, is not applicable (no metadata service answers there)",
			Fix:    "block the metadata address in the sandbox's egress policy and in the proxy"},
		{ID: checkProxyBypass, Run: checkEgressProxyBypass, Role: result.RoleProxyBypass, Severity: result.High, Network: true, Late: true,
			Proves:  "with a proxy declared, a direct connection to each allowed host's own addresses (resolved in the sandbox, or declared in the allowance) fails: nothing goes around the proxy; inconclusive when no address is known",
			Fix:     "deny direct egress to allowed hosts; only the proxy may reach them",
			Applies: func(p *policy.Policy) bool { return p.Spec.Egress.Proxy != "" && len(p.Spec.Egress.Allow) > 0 }},
		{ID: checkSNIMismatch, Run: checkEgressSNIMismatch, Role: result.RoleFronting, Severity: result.High, Network: true, Late: true,
			Proves: "domain fronting through the proxy fails: in a tunnel the proxy opened for an allowed HTTPS host — which first answered through a tunnel of its own (TLS for its name verified, an HTTP answer) — a ClientHello naming a must-fail host (default a random name under .invalid) is cut off by the proxy (a quiet close counts only where the control vantage, asking the front directly, got an answer for that name), or refused with a status the proxy signs as its own; inconclusive when the allowed host did not answer first or the front is silent to the control too; not run when spec.egress.fronting.accepted says why the proxy cannot check SNI",
			Fix:    "make the proxy check the TLS server name against its allow-list (Squid: ssl_bump peek step1, splice an ssl::server_name ACL, terminate all)",
			Applies: func(p *policy.Policy) bool {
				plan, _ := PlanEgress(p.Spec.Egress)
				return slices.ContainsFunc(plan, func(a Attempt) bool { return a.Check == checkSNIMismatch })
			}},
		{ID: checkDNSExfil, Run: checkEgressDNSExfil, Role: result.RoleDNSChannel, Severity: result.High, Network: true, Late: true,
			Proves: "the sandbox's resolver does not carry names outside the allow-list out: a random name under the canary zone and each must-fail host name do not resolve, and a random name under each declared domain is refused — or gets NXDOMAIN from a resolver shown not to forward (by the canary, a REFUSED, or a must-fail name the control vantage resolves: a name that does not exist gets NXDOMAIN from a forwarder too); NOERROR with no records is not resolved",
			Fix:    "make the sandbox's resolver answer only the names it must and refuse the rest, never forward them",
			Applies: func(p *policy.Policy) bool {
				return slices.ContainsFunc(planDNS(p.Spec.Egress), func(a Attempt) bool { return a.Check == checkDNSExfil })
			}},
		{ID: checkDNSBypass, Run: checkEgressDNSBypass, Role: result.RoleDNSBypass, Severity: result.High, Network: true, Late: true,
			Proves: "no DNS server outside (spec.egress.dns.outsideResolvers, default the must-fail IPs) answers a direct query over UDP or TCP 53 while the control vantage gets an answer from it (else inconclusive: a deny unproven): DNS cannot go around the sandbox's resolver",
			Fix:    "deny UDP and TCP 53 to everything but the sandbox's own resolver",
			Applies: func(p *policy.Policy) bool {
				return slices.ContainsFunc(planDNS(p.Spec.Egress), func(a Attempt) bool { return a.Check == checkDNSBypass })
			}},
		{ID: checkUDP, Run: checkEgressUDP, Role: result.RoleMustFail, Judge: result.Judge{Unserved: true, FollowUp: true}, Severity: result.High, Network: true, Late: true,
			Proves: "UDP does not go where TCP may not: a QUIC probe (1,200 bytes, a reserved version every QUIC server answers with Version Negotiation) to 443/udp of every direct must-fail host and IP and, with a proxy, of each allowed host's own addresses gets no datagram back; silence is proven only where the control vantage got an answer from the same address, and where nothing answers the control either (no QUIC server there) while it reached others, the destination is not applicable",
			Fix:    "deny UDP to everything but the sandbox's resolver (a rule that lists TCP ports only, or one widened for HTTP/3, leaves QUIC open)",
			Applies: func(p *policy.Policy) bool {
				plan, _ := PlanEgress(p.Spec.Egress)
				return slices.ContainsFunc(plan, func(a Attempt) bool { return a.Check == checkUDP })
			}},
		{ID: "runtime.isolation", Run: checkRuntimeIsolation, Severity: result.Critical,
			Proves:  "the sandbox runs under the isolation its runtime class declares: gVisor's kernel (its own markers), or a VM — a hypervisor counts only when the runner, reading the node's kernel from outside (every backend does), finds the probe's kernel is not the node's; inconclusive when the node's kernel cannot be read",
			Fix:     "set the pod's runtimeClassName to a RuntimeClass whose handler gives the declared isolation (docker: --runtime runsc)",
			Applies: func(p *policy.Policy) bool { return len(p.Spec.Runtime.ClassNames) > 0 }},
		{ID: "pod.labels", Run: checkPodLabels, Severity: result.High,
			Proves: "the probe pod carries the sandbox selector's labels, as admitted (read back through the downward API); whether the policies that select sandboxes select it too is the kube runner's parity check (parity.policies), from outside",
			Fix:    "give the probe pod (and every sandbox) the selector's labels: spec.selector.matchLabels",
			Needs:  func(e *Env) bool { return e.PodInfoDir != "" }},
		{ID: "image.entrypoint", Run: checkImageEntrypoint, Severity: result.Low, Late: true,
			Proves: "the image's own entrypoint and command start under the sandbox's constraints and do not fail within a short grace period",
			Fix:    "make the entrypoint write only under the declared writable paths, as the declared uid, without capabilities",
			Needs:  func(e *Env) bool { return len(e.ImageCommand) > 0 }},
		{ID: "browser.screenshot", Run: checkBrowserScreenshot, Severity: result.Low, Late: true,
			Proves:  "a headless Chromium starts with a fresh profile, renders a self-contained page and writes a screenshot that decodes to the expected size and colours",
			Fix:     "install Chromium in the image and give it a writable HOME and profile directory (spec.browser.writeTo)",
			Applies: func(p *policy.Policy) bool { return p.Spec.Browser.Screenshot }},
	}
}

// Selection picks checks from the catalogue.
type Selection struct {
	NoNetwork bool     // leave out checks that send traffic
	Only      []string // check IDs or areas; empty means all
}

func (s Selection) keep(c Check) bool {
	if s.NoNetwork && c.Network {
		return false
	}
	if len(s.Only) == 0 {
		return true
	}
	return slices.Contains(s.Only, c.ID) || slices.Contains(s.Only, c.Area())
}

// Run executes the selected checks and returns the probe's result. Quick
// local checks run in catalogue order; late checks run concurrently after them.
func Run(ctx context.Context, env *Env, sel Selection) result.ProbeResult {
	res, start := newResult(env)
	if env.Runtime == nil {
		env.Runtime = CollectRuntime()
	}
	res.Runtime = env.Runtime
	cat := Catalogue()
	results := make([][]result.Finding, len(cat))
	var late []int
	for i, c := range cat {
		if !sel.keep(c) {
			continue
		}
		if c.Applies != nil && !c.Applies(env.Policy) {
			continue
		}
		if c.Needs != nil && !c.Needs(env) {
			continue
		}
		if c.Late {
			late = append(late, i)
			continue
		}
		results[i] = runOne(ctx, env, c)
	}
	runLate(ctx, env, cat, late, results)
	for _, fs := range results {
		res.Findings = append(res.Findings, fs...)
	}
	res.DeclareRoles()
	res.Seconds = env.Now().Sub(start).Seconds()
	return res
}

// newResult starts a result for this run: schema, nonce, policy, version,
// host and start time.
func newResult(env *Env) (result.ProbeResult, time.Time) {
	if env.Now == nil {
		env.Now = time.Now
	}
	start := env.Now()
	host, _ := os.Hostname()
	return result.ProbeResult{
		Schema: result.ProbeResultSchema, Nonce: env.Nonce, Policy: env.Policy.Metadata.Name,
		Version: Version(), Hostname: host, StartedAt: start.UTC(),
	}, start
}

// runOne runs a check, turning a panic into an error finding and filling in
// the catalogue's fix and the time it took.
func runOne(ctx context.Context, env *Env, c Check) (out []result.Finding) {
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			out = []result.Finding{{Check: c.ID, Status: result.Error, Actual: fmt.Sprintf("check panicked: %v", r), Evidence: string(debug.Stack())}}
		}
		took := time.Since(start).Seconds()
		for i := range out {
			f := &out[i]
			if f.Check == "" {
				f.Check = c.ID
			}
			if f.Role == "" && f.Check == c.ID {
				f.Role = c.Role
			}
			if f.Judge == (result.Judge{}) && f.Check == c.ID {
				f.Judge = c.Judge
			}
			if f.Fix == "" && (f.Status == result.Fail || f.Status == result.Error) {
				f.Fix = c.Fix
			}
			if f.Seconds == 0 {
				f.Seconds = took / float64(len(out))
			}
		}
		if len(out) == 0 {
			out = []result.Finding{{Check: c.ID, Status: result.Error, Actual: "the check returned no finding"}}
		}
	}()
	return c.Run(ctx, env)
}

// FixFor returns the catalogue's fix for a check ID ("" if unknown); the
// runner uses it to refill a compact result.
func FixFor(id string) string {
	for _, c := range Catalogue() {
		if c.ID == id {
			return c.Fix
		}
	}
	return ""
}

// Version is the version stamped into the binary (internal/version).
func Version() string { return version.Get().Version }

// pass, fail and errorf build findings for the calling check.
func pass(subject, expected, actual, evidence string) result.Finding {
	return result.Finding{Subject: subject, Status: result.Pass, Expected: expected, Actual: actual, Evidence: evidence}
}

func fail(subject, expected, actual, evidence string) result.Finding {
	return result.Finding{Subject: subject, Status: result.Fail, Expected: expected, Actual: actual, Evidence: evidence}
}

func errorf(subject, format string, args ...any) result.Finding {
	return result.Finding{Subject: subject, Status: result.Error, Actual: fmt.Sprintf(format, args...)}
}

func joinOr(list []string, empty string) string {
	if len(list) == 0 {
		return empty
	}
	return strings.Join(list, ", ")
}

// runLate runs the slow checks concurrently (bounded); each writes only its own slot.
func runLate(ctx context.Context, env *Env, cat []Check, idx []int, results [][]result.Finding) {
	p := pool.New().WithMaxGoroutines(4)
	for _, i := range idx {
		p.Go(func() { results[i] = runOne(ctx, env, cat[i]) })
	}
	p.Wait()
}

// RoleOf returns the catalogue's role for a check ID ("" if it has none).
func RoleOf(id string) result.Role { return roles()[id] }

// roles maps each check ID of the catalogue to its role.
func roles() map[string]result.Role {
	m := map[string]result.Role{}
	for _, c := range Catalogue() {
		if c.Role != "" {
			m[c.ID] = c.Role
		}
	}
	return m
}

// judges maps each check ID of the catalogue to its judge.
func judges() map[string]result.Judge {
	m := map[string]result.Judge{}
	for _, c := range Catalogue() {
		if c.Judge != (result.Judge{}) {
			m[c.ID] = c.Judge
		}
	}
	return m
}
