package result

// Role is what a check's findings mean to those who read them beyond the
// check itself: the runner, which proves a deny against its control
// vantage; the metrics, which count open egress; the page, which groups
// destinations. It is declared once, on the check's catalogue row
// (probes.Check.Role), and every finding carries its check's (Finding.Role:
// the probe stamps it, its result declares it to the runner, and the
// reports' catalogue fills it for findings read back from a file).
type Role string

// Roles. A check without one ("") is judged by its own status alone.
const (
	// RoleAllowance: a destination that must answer (egress.allowed).
	RoleAllowance Role = "allowance"
	// RoleMustFail: a destination that must stay closed, dialled directly
	// or through the proxy; a blocked verdict counts only where a control
	// vantage reached it (or the proxy refused it itself).
	RoleMustFail Role = "must-fail"
	// RoleMetadata: a cloud metadata place, closed like a must-fail one
	// (its row's Judge says it is not applicable where nothing answers
	// the control either: no metadata service there).
	RoleMetadata Role = "metadata"
	// RoleProxyBypass: an allowed host's own addresses dialled around the
	// proxy.
	RoleProxyBypass Role = "proxy-bypass"
	// RoleFronting: a must-fail name inside a tunnel the proxy opened for
	// an allowed host; only the proxy's refusal is a deny.
	RoleFronting Role = "fronting"
	// RoleDNSBypass: a resolver outside the sandbox asked directly.
	RoleDNSBypass Role = "dns-bypass"
	// RoleDNSChannel: names the sandbox's resolver must not carry out; its
	// failure is a channel open whatever the class (the name resolved).
	RoleDNSChannel Role = "dns-channel"
)

// Deny reports whether a blocked verdict of the role is a deny that needs
// proof: the control vantage reached the destination, or the proxy
// refused it itself.
func (r Role) Deny() bool {
	switch r {
	case RoleMustFail, RoleMetadata, RoleProxyBypass, RoleFronting, RoleDNSBypass:
		return true
	}
	return false
}

// MustStayClosed reports whether a failure of the role means a way out of
// the sandbox is open: every deny, and the DNS channel.
func (r Role) MustStayClosed() bool { return r.Deny() || r == RoleDNSChannel }

// Judge is how the runner settles a check's deny verdicts beyond what its
// role says (a control answer from the same destination proves a direct
// deny, the proxy's own refusal one through it). Like the role, it is
// declared once, on the check's catalogue row (probes.Check.Judge), and
// travels with the check's findings to the runner, which branches on it
// and never on a check's ID: a new check of the kind declares it and the
// runner needs no change.
type Judge struct {
	// Unserved: where the control vantage got nothing back from a
	// destination either, while it reached others, nothing serves it (no
	// metadata service, no QUIC server): the destination is not
	// applicable, nothing to keep the sandbox from, rather than an
	// unproven deny.
	Unserved bool `json:"unserved,omitempty"`
	// FollowUp: a verdict that rests on the sandbox's resolver alone (the
	// name stopped, nothing dialled) is settled by the runner's DNS-only
	// follow-up, which runs the check again with the policy's must-fail
	// hosts narrowed to that name and given the addresses the control
	// resolved. The check plans from spec.egress.mustFail.hosts, and each
	// of its subjects begins with the host and port it dials.
	FollowUp bool `json:"followUp,omitempty"`
}

// DeclareRoles fills Roles and Judges from the findings' own roles and
// judges: what the probe does before it prints its result.
func (p *ProbeResult) DeclareRoles() {
	for _, f := range p.Findings {
		if f.Role != "" {
			if p.Roles == nil {
				p.Roles = map[string]Role{}
			}
			p.Roles[f.Check] = f.Role
		}
		if f.Judge != (Judge{}) {
			if p.Judges == nil {
				p.Judges = map[string]Judge{}
			}
			p.Judges[f.Check] = f.Judge
		}
	}
}

// StampRoles gives every finding the role and the judge its result
// declares for its check, and drops the declarations: what the runner does
// with a result it has read.
func (p *ProbeResult) StampRoles() {
	for i := range p.Findings {
		if r, ok := p.Roles[p.Findings[i].Check]; ok {
			p.Findings[i].Role = r
		}
		if j, ok := p.Judges[p.Findings[i].Check]; ok {
			p.Findings[i].Judge = j
		}
	}
	p.Roles, p.Judges = nil, nil
}
