package runner

import (
	"fmt"
	"strings"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// Control is what a control vantage saw: for each destination (check and
// subject), the control's finding. Err, when set, is why there is none.
type Control struct {
	// Vantage names where it dialled from: "namespace/sandprobe-system",
	// "local/sp-control".
	Vantage string
	Seen    map[string]report.Finding
	// reached are the destinations (check and subject) the control got an
	// answer from: what shows the control itself is alive.
	reached []string
	Err     error
	// Isolated, when set, says why no direct destination is reachable from
	// the sandbox by construction (a network namespace of its own holding
	// only loopback): every direct deny is proven by it, and nothing needs
	// to be dialled from elsewhere.
	Isolated string
}

func controlKey(check, subject string) string { return check + " " + subject }

// NewControl indexes a control vantage's result.
func NewControl(vantage string, res report.ProbeResult) *Control {
	c := &Control{Vantage: vantage, Seen: map[string]report.Finding{}}
	for _, f := range res.Findings {
		if f.Role.Deny() || (f.Role == report.RoleDNSChannel && strings.HasPrefix(f.Subject, dnsNamePrefix)) {
			c.Seen[controlKey(f.Check, f.Subject)] = f
			// A name resolved (from a hosts file, maybe) shows nothing of
			// the control's network: only a destination that answered.
			if f.Role.Deny() && f.Status == report.Pass && f.Class == report.ClassAnswered {
				c.reached = append(c.reached, f.Name())
			}
		}
	}
	return c
}

// aliveBy names a destination other than key that the control got an
// answer from ("" if none): a control that reached nothing may be dead
// itself, and its silence then says nothing about any destination.
func (c *Control) aliveBy(key string) string {
	for _, k := range c.reached {
		if k != key {
			return k
		}
	}
	return ""
}

const (
	// neighbourPrefix begins the subject of a neighbour the probe derives
	// on its node (probes.NeighbourPrefix).
	neighbourPrefix = "node:"
	// apiServerPrefix begins the API server's service address the probe
	// derives (no path to it for anyone: a cluster without kube-proxy).
	apiServerPrefix = "kubernetes API "
	// dnsNamePrefix begins the subject of a must-fail name asked for by
	// the DNS channel's check (role dns-channel: "name blocked.example");
	// "canary " the canary's.
	dnsNamePrefix   = "name "
	dnsCanaryPrefix = "canary "
)

// ApplyControl judges every deny verdict of a probe result against the
// control: a destination the sandbox could not reach is a proven deny only
// if the control got an answer from it (or, through the proxy, if the proxy
// refused it itself: its answer is the enforcement). Otherwise the deny is
// unproven — the target refuses or ignores everyone, or nothing could tell
// — and a pass becomes inconclusive. c may be nil: no control vantage at
// all, and no deny is proven but the proxy's.
func ApplyControl(res *report.ProbeResult, c *Control) {
	for i := range res.Findings {
		applyControlTo(&res.Findings[i], c)
	}
	applyDNSControl(res, c)
}

// applyControlTo settles one finding's deny against the control.
func applyControlTo(f *report.Finding, c *Control) {
	// A verdict of a destination the sandbox could not reach: a pass,
	// an inconclusive one (a dead network), or a failure in another
	// way than pinned. Answers and could-not-checks are no denies.
	blocked := f.Status == report.Pass || f.Status == report.Inconclusive || f.Status == report.Fail
	if !f.Role.Deny() || !blocked || f.Class == "" || f.Class == report.ClassAnswered {
		return
	}
	if f.Class == policy.VerdictIntercepted {
		unproven(f, "something in the path took the connection and gave no proof of who it was (intercepted): nothing shows it was stopped")
		return
	}
	if f.Role == report.RoleFronting {
		// Fronting: only the proxy's refusals are denies. One it
		// answered itself (in HTTP, or a signed deny status) is
		// proven by its own word; a tunnel closed quietly at the
		// ClientHello only if the front answers that name directly.
		if f.Class != policy.VerdictProxyDenied {
			return
		}
		if f.Attempt == nil || f.Attempt.Signal != report.SignalClosedAtHello {
			f.Deny = report.DenyProven
			return
		}
	} else if strings.HasSuffix(f.Subject, " via proxy") {
		if f.Class == policy.VerdictProxyDenied {
			f.Deny = report.DenyProven
		} else {
			unproven(f, "the proxy did not refuse it itself, so nothing shows it would have been reached")
		}
		return
	}
	if f.Attempt != nil && f.Attempt.StoppedBy == report.StoppedByResolver && len(f.Attempt.Addresses) == 0 && f.Role != report.RoleDNSBypass {
		// Only the sandbox's resolver stopped it: no address was
		// dialled, so whatever the control reached, no path was tested.
		unproven(f, "no address was dialled from the sandbox (its resolver stopped the name): a DNS-only block is not a network deny")
		return
	}
	if c != nil && c.Isolated != "" && f.Role != report.RoleFronting {
		f.Deny = report.DenyProven
		f.Evidence = joinEvidence(f.Evidence, "deny proven by construction: "+c.Isolated)
		return
	}
	why, done := controlWhy(f, c)
	if !done {
		unproven(f, why)
	}
}

// controlWhy compares a deny with what the control vantage saw: done when
// that proved it (or made it not applicable), else why it is unproven.
func controlWhy(f *report.Finding, c *Control) (string, bool) {
	switch {
	case c == nil:
		return "no control vantage dialled it (local: --control-netns; kube: the control pod)", false
	case c.Err != nil:
		return fmt.Sprintf("the control vantage %s could not run: %v", c.Vantage, c.Err), false
	}
	seen, ok := c.Seen[controlKey(f.Check, f.Subject)]
	switch {
	case !ok:
		return fmt.Sprintf("the control vantage %s did not dial it", c.Vantage), false
	case seen.Status != report.Pass:
		f.Control = seen.Class
		return fmt.Sprintf("the control vantage %s could not dial it: %s", c.Vantage, seen.Actual), false
	case seen.Class == report.ClassAnswered:
		f.Control, f.Deny = seen.Class, report.DenyProven
		f.Evidence = joinEvidence(f.Evidence, fmt.Sprintf("control (%s, no sandbox policy): answered: %s", c.Vantage, seen.Evidence))
		return "", true
	case unservedNotApplicable(f, c, seen):
		return "", true
	default:
		f.Control = seen.Class
		return fmt.Sprintf("the control vantage %s, where no sandbox policy applies, got %s too (%s): the target refuses or ignores everyone", c.Vantage, seen.Class, seen.Evidence), false
	}
}

// unservedNotApplicable marks a destination the control got nothing from
// either as not applicable, and says whether it did: a check whose row
// says so (Judge.Unserved) probes places where most of the time nothing
// serves — the default metadata set names every cloud's places and on any
// one cloud at most one or two answer; most hosts speak no QUIC — and
// what answers nobody is nothing to keep the sandbox from. Only a control
// proven alive on this run says so.
//
// The neighbours the must-fail check derives (a node's kubelet and
// runtime ports, subjects "node:PORT (…)", and the API server's service
// address) are judged alike: a kubelet's read-only port or a runtime's
// TCP API is off on most nodes, and a cluster without kube-proxy has no
// path to the service address.
func unservedNotApplicable(f *report.Finding, c *Control, seen report.Finding) bool {
	neighbour := f.Role == report.RoleMustFail && (strings.HasPrefix(f.Subject, neighbourPrefix) || strings.HasPrefix(f.Subject, apiServerPrefix))
	if (!f.Judge.Unserved && !neighbour) || (f.Status != report.Pass && f.Status != report.Inconclusive) {
		return false
	}
	alive := c.aliveBy(controlKey(f.Check, f.Subject))
	if alive == "" {
		return false
	}
	what := "nothing answers it here, for the control either"
	if f.Role == report.RoleMetadata {
		what = "no metadata service answers here"
	}
	f.Control, f.Deny, f.Status = seen.Class, "", report.Skip
	f.Actual = fmt.Sprintf("not applicable: %s: the control vantage %s, where no sandbox policy applies, got %s too, while it reached %s", what, c.Vantage, seen.Class, alive)
	f.Evidence = joinEvidence(f.Evidence, fmt.Sprintf("control (%s, no sandbox policy): %s (%s)", c.Vantage, seen.Class, seen.Evidence))
	f.Fix = ""
	return true
}

// applyDNSControl judges the DNS channel's NXDOMAIN evidence (role
// dns-channel) against the control. A must-fail name's NXDOMAIN in the sandbox shows the resolver
// does not forward only if the name exists: the control resolves it. Real
// policies are full of names that do not exist upstream, and a forwarding
// resolver relays their NXDOMAIN as it is. A random name's NXDOMAIN that
// rested on such names alone is then unproven too; one that rests on the
// canary zone or on a resolver's REFUSED stands.
func applyDNSControl(res *report.ProbeResult, c *Control) {
	const fix = "declare spec.egress.dns.canaryZone (a zone you control whose authority answers every name): it settles whether the resolver forwards; or list a must-fail host name that exists"
	proof := false
	for i := range res.Findings {
		f := &res.Findings[i]
		if f.Role != report.RoleDNSChannel || f.Status != report.Pass {
			continue
		}
		switch {
		case strings.HasPrefix(f.Subject, dnsCanaryPrefix), strings.HasPrefix(f.Subject, dnsNamePrefix) && f.Class == policy.VerdictDNSRefused:
			proof = true
		case strings.HasPrefix(f.Subject, dnsNamePrefix) && f.Class == policy.VerdictNXDomain:
			name := strings.TrimPrefix(f.Subject, dnsNamePrefix)
			var why string
			switch {
			case c == nil || c.Isolated != "":
				why = "no control vantage resolved it, so nothing shows the name exists"
			case c.Err != nil:
				why = fmt.Sprintf("the control vantage %s could not run: %v", c.Vantage, c.Err)
			default:
				seen, ok := c.Seen[controlKey(f.Check, f.Subject)]
				switch {
				case !ok:
					why = fmt.Sprintf("the control vantage %s did not resolve it", c.Vantage)
				case seen.Status == report.Pass && seen.Class == report.ClassAnswered:
					f.Control, f.Deny = seen.Class, report.DenyProven
					f.Evidence = joinEvidence(f.Evidence, fmt.Sprintf("control (%s, no sandbox policy): %s", c.Vantage, seen.Evidence))
					proof = true
					continue
				default:
					f.Control = seen.Class
					why = fmt.Sprintf("the control vantage %s got %s for it too (%s): a name that does not exist gets NXDOMAIN from a forwarder as well", c.Vantage, seen.Class, seen.Evidence)
				}
			}
			f.Status, f.Deny, f.Fix = report.Inconclusive, report.DenyUnproven, fix
			f.Actual += fmt.Sprintf(" — unproven: %s is NXDOMAIN, but %s", name, why)
			f.Evidence = joinEvidence(f.Evidence, "deny unproven: "+why)
		}
	}
	if proof {
		return
	}
	for i := range res.Findings {
		f := &res.Findings[i]
		if f.Role != report.RoleDNSChannel || f.Status != report.Pass || f.Class != policy.VerdictNXDomain || !strings.HasPrefix(f.Subject, "*.") {
			continue
		}
		f.Status, f.Deny, f.Fix = report.Inconclusive, report.DenyUnproven, fix
		f.Actual += " — unproven: the only sign the resolver does not forward was NXDOMAIN for must-fail names that the control vantage does not resolve either"
		f.Evidence = joinEvidence(f.Evidence, "deny unproven: no name the control resolves, no canary zone, no REFUSED shows the resolver does not forward")
	}
}

// unproven marks a deny that proves nothing; a pass becomes inconclusive.
func unproven(f *report.Finding, why string) {
	f.Deny = report.DenyUnproven
	f.Evidence = joinEvidence(f.Evidence, "deny unproven: "+why)
	const fix = "point the check at a destination that answers when nothing blocks it (a live listener), and give the runner a control vantage, so that its failure proves the rule; a target that refuses or ignores everyone proves nothing"
	switch f.Status {
	case report.Pass:
		f.Status = report.Inconclusive
		f.Actual += " — deny unproven: " + why
		f.Fix = fix
	case report.Inconclusive:
		if f.Fix == "" {
			f.Fix = fix
		}
	}
}

func joinEvidence(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
