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

// Rank orders severities worst first: 0 for critical to 3 for low; a
// finding without a severity ranks after low.
func (s Severity) Rank() int {
	switch s {
	case Critical:
		return 0
	case High:
		return 1
	case Medium:
		return 2
	case Low:
		return 3
	}
	return 4
}

// SecurityScore is the severity as a CVSS-like score, what code scanning
// reads from SARIF's security-severity: critical ≥ 9.0, high 7.0–8.9,
// medium 4.0–6.9, low below 4.0; "" for no severity.
func (s Severity) SecurityScore() string {
	switch s {
	case Critical:
		return "9.5"
	case High:
		return "8.0"
	case Medium:
		return "5.5"
	case Low:
		return "2.0"
	}
	return ""
}
