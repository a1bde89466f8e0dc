package policy

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Verdict classes: every network attempt the probe makes ends in exactly one.
const (
	VerdictAnswered    = "answered"
	VerdictRefused     = "refused"
	VerdictTimeout     = "timeout"
	VerdictNXDomain    = "dns-nxdomain"
	VerdictDNSTimeout  = "dns-timeout"
	VerdictProxyDenied = "proxy-denied"
	VerdictError       = "error"
	// VerdictDNSRefused is a resolver that refused to answer (REFUSED): what
	// a DNS proxy with an allow-list (Cilium's matchPattern) says to names
	// outside it.
	VerdictDNSRefused = "dns-refused"
	// VerdictProxyForwarded is a proxy that accepted the destination (its
	// status was not its deny) but could not reach it (5xx): the proxy's
	// allow-list let it through, only the upstream failed. Never a pass.
	VerdictProxyForwarded = "proxy-forwarded"
	// VerdictIntercepted is something in the path that took the connection
	// and gave no application-level proof of who it was: accepted and
	// closed with no byte exchanged (a mesh sidecar's blackhole, a CNI's
	// transparent proxy), or a deny status served inside a TLS tunnel with
	// no proxy signature. Neither an answer nor a deny: inconclusive.
	VerdictIntercepted = "intercepted"
)

// FailureVerdicts are the classes a must-fail target may pin with expect.
var FailureVerdicts = []string{VerdictRefused, VerdictTimeout, VerdictNXDomain, VerdictDNSRefused, VerdictDNSTimeout, VerdictProxyDenied, VerdictError}

// Isolation kinds a runtime class can promise.
const (
	IsolationGVisor = "gvisor"
	IsolationVM     = "vm"
	IsolationNone   = "none"
)

// IsolationFor says what a runtime class must look like from inside: the
// declared isolation, or a guess from well-known names.
func (r Runtime) IsolationFor(class string) string {
	if v, ok := r.Isolation[class]; ok {
		return v
	}
	v, _ := InferIsolation(class)
	return v
}

// InferIsolation guesses a runtime class's isolation from well-known names
// (gvisor and runsc; kata, firecracker, qemu, cloud-hypervisor); ok is
// false for any other name (runc, a custom handler), whose isolation the
// policy must declare: guessing "none" would hold a VM runtime with a
// custom name to nothing.
func InferIsolation(class string) (iso string, ok bool) {
	c := strings.ToLower(class)
	switch {
	case strings.Contains(c, "gvisor"), strings.Contains(c, "runsc"):
		return IsolationGVisor, true
	case strings.Contains(c, "kata"), strings.Contains(c, "firecracker"), strings.Contains(c, "qemu"), strings.Contains(c, "cloud-hypervisor"):
		return IsolationVM, true
	}
	return IsolationNone, false
}

// Capabilities lists Linux capability names by number (CAP_LAST_CAP = 40).
var Capabilities = []string{
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
	"IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
	"SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
	"LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
	"WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
}

// CapabilityNumber returns the number of a capability name, or -1.
func CapabilityNumber(name string) int {
	name = NormalizeCapability(name)
	for i, c := range Capabilities {
		if c == name {
			return i
		}
	}
	return -1
}

// CapabilityNames decodes a capability bit mask into names.
func CapabilityNames(mask uint64) []string {
	var out []string
	for i := 0; i < 64; i++ {
		if mask&(1<<uint(i)) == 0 {
			continue
		}
		if i < len(Capabilities) {
			out = append(out, Capabilities[i])
		} else {
			out = append(out, "cap_"+strconv.Itoa(i))
		}
	}
	return out
}

var quantityRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$`)

// ParseQuantity parses a Kubernetes quantity ("6Gi", "500m", "2") into a
// float (bytes for memory, cores for CPU).
func ParseQuantity(s string) (float64, error) {
	m := quantityRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("bad quantity %q: expected a number with an optional suffix like 500m, 2, 6Gi or 8G", s)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("bad quantity %q: %w", s, err)
	}
	mult := map[string]float64{
		"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
		"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
	}[m[2]]
	out := v * mult
	if math.IsInf(out, 0) || out > 1<<62 {
		return 0, fmt.Errorf("bad quantity %q: too large", s)
	}
	return out, nil
}

// KubeVerbs are the verbs an RBAC rule names ("*" is every verb).
var KubeVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "impersonate", "bind", "escalate", "use", "approve", "sign", "attest", "*"}
