package result

// Severity is how bad a failing check or drift rule is, declared once on its
// catalogue row. The values follow the scale code-scanning tools and
// alerting use (critical, high, medium, low).
type Severity string

// Severities, worst first.
const (
	// Critical: the sandbox boundary is gone (a privileged container, a
	// host namespace, the node's filesystem or a runtime socket).
	Critical Severity = "critical"
	// High: one wall of the sandbox is down (root, capabilities, privilege
	// escalation, a credential or an open egress path).
	High Severity = "high"
	// Medium: hardening in depth is missing (seccomp, AppArmor, SELinux,
	// a writable root, an unpinned image).
	Medium Severity = "medium"
	// Low: a limit or hygiene rule (resources, emptyDir sizes).
	Low Severity = "low"
)
