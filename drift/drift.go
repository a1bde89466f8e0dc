// Package drift compares live sandboxes with the declared policy from the
// outside: Kubernetes pods (containers, init and ephemeral containers), agent
// Sandbox objects, the NetworkPolicies and Cilium policies that select them,
// and Docker containers. Every difference becomes a finding that names the
// object, the rule, what was expected, what was found and the exact field or
// flag that fixes it.
//
// The rules are pure functions of one object plus the policy indexes built
// before it (the NetworkPolicy union needs every policy first), so objects
// can be streamed through an Engine page by page and memory stays flat
// however many pods a cluster runs. Where the objects come from — a live
// cluster (kube.go), a Docker engine (dockerlive.go) or files (files.go) —
// is kept apart from the rules.
package drift

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// Rule is one entry of the drift catalogue.
type Rule struct {
	ID     string // "drift.pod.privileged"
	Proves string // what a clean result proves
	Fix    string // the usual fix; each finding carries its exact one
}

// Kind is the object kind a rule applies to ("pod" for "drift.pod.privileged").
func (r Rule) Kind() string {
	_, rest, _ := strings.Cut(r.ID, ".")
	k, _, _ := strings.Cut(rest, ".")
	return k
}

// Check IDs. They are constants so a typo is a compile error, and they are
// listed once more, with what they prove, in Rules.
const (
	PodSelectorLabels     = "drift.pod.selector-labels"
	PodRuntimeClass       = "drift.pod.runtime-class"
	PodSAToken            = "drift.pod.sa-token"
	PodRunAsNonRoot       = "drift.pod.run-as-non-root"
	PodRunAsUser          = "drift.pod.run-as-user"
	PodRunAsGroup         = "drift.pod.run-as-group"
	PodFSGroup            = "drift.pod.fs-group"
	PodSupplementalGroups = "drift.pod.supplemental-groups"
	PodSeccomp            = "drift.pod.seccomp"
	PodPrivilegeEsc       = "drift.pod.privilege-escalation"
	PodReadOnlyRoot       = "drift.pod.readonly-root"
	PodCapDrop            = "drift.pod.cap-drop"
	PodCapAdd             = "drift.pod.cap-add"
	PodPrivileged         = "drift.pod.privileged"
	PodHostNetwork        = "drift.pod.host-network"
	PodHostPID            = "drift.pod.host-pid"
	PodHostIPC            = "drift.pod.host-ipc"
	PodHostPorts          = "drift.pod.host-ports"
	PodHostPath           = "drift.pod.host-path"
	PodProcMount          = "drift.pod.proc-mount"
	PodSysctls            = "drift.pod.sysctls"
	PodSELinux            = "drift.pod.selinux"
	PodAppArmor           = "drift.pod.apparmor"
	PodImageDigest        = "drift.pod.image-digest"
	PodResources          = "drift.pod.resources"
	PodEmptyDirSize       = "drift.pod.emptydir-size"
	PodSecretEnv          = "drift.pod.secret-env"
	PodPSSRestricted      = "drift.pod.pss-restricted"

	NetpolEgressUnrestricted = "drift.netpol.egress-unrestricted"
	NetpolAnyDestination     = "drift.netpol.any-destination"
	NetpolWorld              = "drift.netpol.world"
	NetpolIPBlock            = "drift.netpol.ipblock"
	NetpolPort               = "drift.netpol.port"
	NetpolPeer               = "drift.netpol.peer"

	CiliumFQDNExtra      = "drift.cilium.fqdn-extra"
	CiliumFQDNMissing    = "drift.cilium.fqdn-missing"
	CiliumWorld          = "drift.cilium.world"
	CiliumCIDR           = "drift.cilium.cidr"
	CiliumAnyDestination = "drift.cilium.any-destination"
	CiliumPeer           = "drift.cilium.peer"

	ANPWorld  = "drift.anp.world"
	ANPCIDR   = "drift.anp.cidr"
	ANPPeer   = "drift.anp.peer"
	ANPDomain = "drift.anp.domain"

	ScanSandboxesFound  = "drift.scan.sandboxes-found"
	ScanNamespaceExists = "drift.scan.namespace-exists"

	DockerReadOnlyRoot    = "drift.docker.readonly-root"
	DockerCapDrop         = "drift.docker.cap-drop"
	DockerCapAdd          = "drift.docker.cap-add"
	DockerNoNewPrivileges = "drift.docker.no-new-privileges"
	DockerPids            = "drift.docker.pids"
	DockerMemory          = "drift.docker.memory"
	DockerCPU             = "drift.docker.cpu"
	DockerNetwork         = "drift.docker.network"
	DockerUser            = "drift.docker.user"
	DockerProxy           = "drift.docker.proxy"
	DockerTmpfs           = "drift.docker.tmpfs"
	DockerSensitiveMount  = "drift.docker.sensitive-mount"
	DockerCredential      = "drift.docker.credential"
	DockerSecretEnv       = "drift.docker.secret-env"
	DockerPrivileged      = "drift.docker.privileged"
	DockerHostNamespaces  = "drift.docker.host-namespaces"
	DockerSeccomp         = "drift.docker.seccomp"
	DockerAppArmor        = "drift.docker.apparmor"
	DockerDevices         = "drift.docker.devices"
	DockerRuntime         = "drift.docker.runtime"
	DockerImageDigest     = "drift.docker.image-digest"
)

// Rules is the one table of drift rules: `sandprobe drift`, the docs and the
// run summary all read it.
func Rules() []Rule {
	return []Rule{
		{PodSelectorLabels, "every pod in a sandbox namespace carries the selector's labels, so the sandbox NetworkPolicies select it", "add the selector's labels to the pod template, or move the workload out of the sandbox namespace"},
		{PodRuntimeClass, "the pod runs under one of the declared isolation runtimes", "set spec.runtimeClassName to a declared class"},
		{PodSAToken, "no service-account token reaches the sandbox: automount is off and no projected token volume exists", "set spec.automountServiceAccountToken: false and remove serviceAccountToken projections"},
		{PodRunAsNonRoot, "the kubelet refuses to start any container of the pod as root", "set securityContext.runAsNonRoot: true"},
		{PodRunAsUser, "every container runs as the declared uid", "set securityContext.runAsUser to the declared uid"},
		{PodRunAsGroup, "every container runs as the declared gid", "set securityContext.runAsGroup to the declared gid"},
		{PodFSGroup, "volumes are owned by the declared fsGroup", "set spec.securityContext.fsGroup to the declared group"},
		{PodSupplementalGroups, "the pod adds no supplementary groups beyond the declared ones", "set spec.securityContext.supplementalGroups to (a subset of) the declared groups"},
		{PodSeccomp, "every container runs under the declared seccomp profile (RuntimeDefault or Localhost)", "set securityContext.seccompProfile.type: RuntimeDefault"},
		{PodPrivilegeEsc, "no container can gain privileges through setuid binaries (no_new_privs)", "set securityContext.allowPrivilegeEscalation: false on every container"},
		{PodReadOnlyRoot, "every container's root filesystem is read-only", "set securityContext.readOnlyRootFilesystem: true on every container"},
		{PodCapDrop, "every container drops ALL capabilities", "set securityContext.capabilities.drop: [ALL] on every container"},
		{PodCapAdd, "no container adds a capability the policy does not declare", "remove the capability from securityContext.capabilities.add"},
		{PodPrivileged, "no container is privileged", "remove securityContext.privileged (or set it to false)"},
		{PodHostNetwork, "the pod has its own network namespace", "remove spec.hostNetwork"},
		{PodHostPID, "the pod has its own PID namespace", "remove spec.hostPID"},
		{PodHostIPC, "the pod has its own IPC namespace", "remove spec.hostIPC"},
		{PodHostPorts, "no container binds a port on the node", "remove hostPort from the container's ports"},
		{PodHostPath, "no volume exposes a node path", "replace the hostPath volume with an emptyDir, a secret or a configMap"},
		{PodProcMount, "every container gets the masked /proc", "remove securityContext.procMount (or set it to Default)"},
		{PodSysctls, "the pod sets only namespaced, safe sysctls", "remove the sysctl from spec.securityContext.sysctls"},
		{PodSELinux, "no container loosens its SELinux type or sets a user or role", "remove securityContext.seLinuxOptions.type/user/role"},
		{PodAppArmor, "no container runs AppArmor-unconfined", "set securityContext.appArmorProfile.type: RuntimeDefault (and drop unconfined annotations)"},
		{PodImageDigest, "every image is pinned by digest", "reference the image as REPO@sha256:DIGEST"},
		{PodResources, "every container carries the declared limits (and no more)", "set resources.limits as declared"},
		{PodEmptyDirSize, "every emptyDir has a sizeLimit within the declared size", "set sizeLimit on the emptyDir"},
		{PodSecretEnv, "no credential reaches a container through its environment (names only are reported)", "remove the variable, or hand over a declared placeholder the broker swaps"},
		{PodPSSRestricted, "the pod passes the Pod Security Standard \"restricted\", whatever the policy allows", "fix the field the standard names"},

		{NetpolEgressUnrestricted, "at least one NetworkPolicy (or Cilium policy) restricts the sandbox's egress", "apply the NetworkPolicy from `sandprobe render` (policyTypes: [Egress]) in the pod's namespace"},
		{NetpolAnyDestination, "no egress rule selecting a sandbox has an empty `to` (every destination)", "list the destinations in `to`"},
		{NetpolWorld, "no egress rule selecting a sandbox opens 0.0.0.0/0 or ::/0", "remove the ipBlock or narrow it to a declared address"},
		{NetpolIPBlock, "every ipBlock a sandbox may reach is a declared allowance", "remove the ipBlock or declare the address in spec.egress.allow"},
		{NetpolPort, "every allowed destination is limited to its declared port", "list only the declared port in the rule's ports"},
		{NetpolPeer, "in-cluster peers are limited to cluster DNS and the declared proxy", "remove the peer or narrow it to DNS (port 53) or the proxy"},

		{CiliumFQDNExtra, "every toFQDNs name or pattern is covered by a declared allowance on its port", "remove the name or declare it in spec.egress.allow"},
		{CiliumFQDNMissing, "every declared name is allowed by the Cilium policies (info: the sandbox cannot reach it)", "add the name to a toFQDNs rule, or drop the allowance"},
		{CiliumWorld, "no Cilium rule opens toEntities world/all or a /0 CIDR", "remove the entity or CIDR"},
		{CiliumCIDR, "every toCIDR/toCIDRSet is a declared address", "remove the CIDR or declare the address in spec.egress.allow"},
		{CiliumAnyDestination, "no Cilium egress rule allows ports to every destination (toPorts without a peer)", "add toFQDNs/toEndpoints/toCIDR to the rule"},
		{CiliumPeer, "in-cluster Cilium peers are limited to cluster DNS and the declared proxy", "remove the peer or narrow it to DNS (port 53) or the proxy"},

		{ANPWorld, "no admin or baseline admin network policy Allow opens 0.0.0.0/0 or ::/0 to a sandbox (an admin Allow overrides every NetworkPolicy)", "remove the network from the Allow rule"},
		{ANPCIDR, "every network an admin network policy allows a sandbox is a declared address", "remove the network or declare the address in spec.egress.allow"},
		{ANPPeer, "in-cluster peers an admin network policy allows a sandbox are limited to cluster DNS and the declared proxy", "remove the peer or narrow it to DNS (port 53) or the proxy"},
		{ANPDomain, "every domain name an admin network policy allows a sandbox is covered by a declared allowance", "remove the name or declare it in spec.egress.allow"},

		{ScanSandboxesFound, "the selector and namespaces matched at least one live sandbox, so the other rules judged something", "fix the selector, the namespaces or the context so the sandboxes are found (or remove the policy)"},
		{ScanNamespaceExists, "every namespace the policy declares exists", "create the namespace, or remove it from spec.namespaces"},

		{DockerReadOnlyRoot, "the container's root filesystem is read-only", "add --read-only"},
		{DockerCapDrop, "the container drops ALL capabilities", "add --cap-drop ALL"},
		{DockerCapAdd, "the container adds no undeclared capability", "remove --cap-add"},
		{DockerNoNewPrivileges, "no_new_privs is set", "add --security-opt no-new-privileges"},
		{DockerPids, "the container has the declared pids limit", "add --pids-limit N"},
		{DockerMemory, "the container has the declared memory limit", "add --memory SIZE"},
		{DockerCPU, "the container has the declared CPU limit", "add --cpus N"},
		{DockerNetwork, "the container is attached only to the declared internal network (or none)", "use --network NAME (an --internal network) or --network none"},
		{DockerUser, "the container runs as the declared uid:gid, not root", "add --user UID:GID"},
		{DockerProxy, "the proxy variables point at the declared proxy, in both spellings", "add -e HTTP_PROXY=… -e http_proxy=… -e HTTPS_PROXY=… -e https_proxy=…"},
		{DockerTmpfs, "every declared writable path is a fresh tmpfs", "add --tmpfs PATH for each writable path"},
		{DockerSensitiveMount, "no host socket, system directory or credential directory is mounted", "remove the bind mount"},
		{DockerCredential, "each declared credential is mounted read-only from its declared source", "add --mount type=bind,src=SOURCE,dst=PATH,readonly"},
		{DockerSecretEnv, "no credential reaches the container through its environment (names only are reported)", "remove -e NAME, or pass a declared placeholder"},
		{DockerPrivileged, "the container is not privileged", "remove --privileged"},
		{DockerHostNamespaces, "the container shares no namespace with the host", "remove --pid/--ipc/--uts/--userns host"},
		{DockerSeccomp, "the container runs under a seccomp filter", "remove --security-opt seccomp=unconfined"},
		{DockerAppArmor, "the container is not AppArmor-unconfined", "remove --security-opt apparmor=unconfined"},
		{DockerDevices, "no host device is passed in", "remove --device"},
		{DockerRuntime, "the container runs under a declared isolation runtime", "add --runtime NAME"},
		{DockerImageDigest, "the container was created from an image pinned by digest", "reference the image as REPO@sha256:DIGEST"},
	}
}

// Target names for findings.
func containerTarget(name string) string { return "container/" + name }

// SummaryTarget is the target of the passing summary findings: one per rule
// that found no drift, so JUnit stays one suite however many objects pass.
const SummaryTarget = "drift"

// Collector gathers the findings of one drift run. Only drifted objects
// contribute findings; clean objects only count, which keeps a report of
// ten thousand conformant pods as small as one of ten.
type Collector struct {
	Findings []report.Finding
	Notes    []string
	// Scanned counts sandboxes (pods, Sandbox objects, containers) checked.
	Scanned int
	// Drifted counts objects with at least one failing finding.
	Drifted int

	// spool, when set, takes the findings instead of Findings.
	spool *report.Spool
	// locate, when set, gives findings their file and line as they are
	// added (FileScan).
	locate func([]report.Finding)

	failed  map[string]int  // rule → failing findings
	skipped map[string]int  // rule → objects it could not judge
	checked map[string]bool // kinds that were checked at all: pod, netpol, cilium, docker
	noted   map[string]bool
}

// NewCollector returns an empty collector.
func NewCollector() *Collector {
	return &Collector{failed: map[string]int{}, skipped: map[string]int{}, checked: map[string]bool{}, noted: map[string]bool{}}
}

// NewSpoolingCollector returns an empty collector whose findings go to sp
// instead of Findings: a drift over a hundred thousand pods.
func NewSpoolingCollector(sp *report.Spool) *Collector {
	c := NewCollector()
	c.spool = sp
	return c
}

// emit records findings in order, in Findings or the spool.
func (c *Collector) emit(fs ...report.Finding) {
	if c.spool != nil {
		c.spool.Add(fs...)
		return
	}
	c.Findings = append(c.Findings, fs...)
}

// Add records findings for one object; it counts the object as scanned.
func (c *Collector) Add(fs []report.Finding) {
	c.Scanned++
	drifted := false
	for _, f := range fs {
		switch f.Status {
		case report.Fail:
			c.failed[f.Check]++
			drifted = true
		case report.Skip, report.Inconclusive:
			c.skipped[f.Check]++
		}
	}
	if drifted {
		c.Drifted++
	}
	if c.locate != nil {
		c.locate(fs)
	}
	c.emit(fs...)
}

// addLocated is Add for findings already located (FileScan's pods).
func (c *Collector) addLocated(fs []report.Finding) {
	locate := c.locate
	c.locate = nil
	c.Add(fs)
	c.locate = locate
}

// Checked marks a kind of rules as applied in this run ("pod", "netpol", …).
func (c *Collector) Checked(kind string) { c.checked[kind] = true }

// Note adds a note once, however often it is reported.
func (c *Collector) Note(format string, args ...any) {
	n := fmt.Sprintf(format, args...)
	if c.noted[n] {
		return
	}
	c.noted[n] = true
	c.Notes = append(c.Notes, n)
}

// AddError records that something could not be checked: an error finding,
// never a pass.
func (c *Collector) AddError(target, what string, err error) {
	c.emit(report.Finding{
		Check: "drift.run", Target: target, Subject: what, Status: report.Error,
		Expected: "the objects listed", Actual: err.Error(),
		Fix: "check connectivity and permissions (list/watch on the objects) and rerun",
	})
}

// RequireFound fails drift.scan.sandboxes-found when a live source (a
// cluster, a Docker engine) held no sandbox since before (col.Scanned then):
// every rule would have had nothing to judge, and silence is no pass.
func (c *Collector) RequireFound(p *policy.Policy, source string, before int) {
	c.Checked("scan")
	if c.Scanned > before {
		return
	}
	where := selectorText(p.Spec.Selector.MatchLabels)
	exp := "at least one sandbox: a pod, workload or Sandbox with labels " + where
	if len(p.Spec.Namespaces) > 0 {
		exp += ", or anything in namespaces " + strings.Join(p.Spec.Namespaces, ", ")
	}
	c.emit(report.Finding{
		Check: ScanSandboxesFound, Target: SummaryTarget, Subject: source, Status: report.Fail,
		Expected: exp, Actual: "no sandbox found in " + source + ": every other rule had nothing to judge",
		Fix:      "check the selector (a renamed or misspelt label), spec.namespaces and the kubeconfig context or engine; until sandboxes are found the run is not conformant",
		Evidence: "the selector stopped matching, the label was renamed, or this is the wrong cluster: none of them fails loudly on its own",
	})
	c.failed[ScanSandboxesFound]++
}

// MissingNamespace fails drift.scan.namespace-exists for a declared
// namespace the cluster does not have.
func (c *Collector) MissingNamespace(p *policy.Policy, ns, source string) {
	c.Checked("scan")
	idx := slices.Index(p.Spec.Namespaces, ns)
	c.emit(report.Finding{
		Check: ScanNamespaceExists, Target: "namespace/" + ns, Namespace: ns, Subject: fmt.Sprintf("spec.namespaces[%d]", idx), Status: report.Fail,
		Expected: "namespace " + ns + " exists", Actual: "not found in " + source,
		Fix:      "create namespace " + ns + " (where the sandboxes should run), or remove it from spec.namespaces",
		Evidence: "a sandbox namespace that does not exist holds no sandbox to check, and nothing the policy says about it is true anywhere",
	})
	c.failed[ScanNamespaceExists]++
}

// Summary appends one passing finding per applicable rule that found no
// drift, so a clean run still says what it proved.
func (c *Collector) Summary(p *policy.Policy) {
	var out []report.Finding
	for _, r := range Rules() {
		if !c.checked[r.Kind()] || c.failed[r.ID] > 0 || !ruleApplies(p, r.ID) {
			continue
		}
		f := report.Finding{
			Check: r.ID, Target: SummaryTarget, Status: report.Pass,
			Actual:   fmt.Sprintf("no drift in %d sandboxes", c.Scanned),
			Evidence: r.Proves,
		}
		switch r.ID {
		case ScanSandboxesFound:
			f.Actual = fmt.Sprintf("%d sandboxes found", c.Scanned)
			out = append(out, f)
			continue
		case ScanNamespaceExists:
			f.Actual = fmt.Sprintf("the %d declared namespaces exist", len(p.Spec.Namespaces))
			out = append(out, f)
			continue
		}
		switch {
		case c.Scanned == 0:
			// Nothing was there to prove anything about: say so, not "pass".
			f.Status, f.Actual = report.Skip, "no sandbox found"
		case c.skipped[r.ID] > 0:
			// Some objects could not be judged: no pass for the rule.
			f.Status, f.Actual = report.Skip, fmt.Sprintf("not judged for %d of %d sandboxes (see their findings)", c.skipped[r.ID], c.Scanned)
		}
		out = append(out, f)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Check < out[j].Check })
	c.emit(out...)
}

// ruleApplies says whether the policy asks for a rule at all (a rule the
// policy does not ask for gets no passing summary line either).
func ruleApplies(p *policy.Policy, id string) bool {
	s := &p.Spec
	switch id {
	case PodSelectorLabels, ScanNamespaceExists:
		return len(s.Namespaces) > 0
	case PodRuntimeClass, DockerRuntime:
		return len(s.Runtime.ClassNames) > 0
	case PodRunAsNonRoot:
		return s.Identity.UID != 0
	case PodSAToken:
		return s.ServiceAccount == policy.TokenAbsent
	case PodFSGroup:
		return s.Identity.FSGroup != nil
	case PodReadOnlyRoot, DockerReadOnlyRoot:
		return s.Filesystem.ReadOnlyRoot
	case PodPrivilegeEsc, DockerNoNewPrivileges:
		return s.NoNewPrivs()
	case PodSeccomp, DockerSeccomp:
		return s.Seccomp != policy.SeccompUnconfined
	case PodImageDigest, DockerImageDigest:
		return s.Image.RequireDigest
	case PodResources:
		return len(s.Resources.Limits) > 0
	case DockerMemory:
		return s.Resources.Limits["memory"] != ""
	case DockerCPU:
		return s.Resources.Limits["cpu"] != ""
	case DockerPids:
		return s.Resources.Pids > 0
	case DockerProxy:
		return s.Egress.Proxy != ""
	case DockerTmpfs:
		return len(s.Filesystem.Writable) > 0
	case DockerCredential:
		return len(s.Credentials) > 0
	}
	return true
}

// SelectorText says what a sandbox of the policy carries, for "none found"
// messages: its labels and, when it names them, its namespaces
// ("sandbox=true and nothing in namespaces agents").
func SelectorText(p *policy.Policy) string {
	var pairs []string
	for k, v := range p.Spec.Selector.MatchLabels {
		pairs = append(pairs, k+"="+v)
	}
	sort.Strings(pairs)
	s := strings.Join(pairs, ",")
	if len(p.Spec.Namespaces) > 0 {
		s += " and nothing in namespaces " + strings.Join(p.Spec.Namespaces, ", ")
	}
	return s
}
