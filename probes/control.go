package probes

import (
	"context"
	"strings"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// A must-fail verdict is proof only if the destination would have answered:
// a TCP reset from a port nothing listens on looks exactly like a REJECT
// rule from inside the sandbox, and a dead host like a DROP. So the runner
// also dials every such destination from a control vantage that no sandbox
// policy governs (a pod in the runner's namespace, a network namespace on
// the lab's side of the link) with `sandprobe probe --control`, and a deny
// counts only where the control got an answer.

// ControlQueryPrefix begins every name the control vantage asks an outside
// resolver for; a sandbox's own random names begin "sandprobe-" and never this.
const ControlQueryPrefix = "sandprobe-control-"

// VantageControl marks a control vantage's result (ProbeResult.Vantage).
const VantageControl = "control"

// ControlPlan is what a control vantage dials: the direct attempts of
// every check whose role is a deny (egress.must-fail, egress.metadata,
// egress.proxy-bypass: the catalogue row says so), the direct
// queries of egress.dns-bypass (an outside resolver that answers nobody
// proves no rule either), and for each egress.sni-mismatch attempt a
// ClientHello for its must-fail name sent to the front directly, exactly
// as the probe plans them (same subjects, same addresses, same timeout).
// It also resolves each must-fail host name egress.dns-exfil asks for: an
// NXDOMAIN in the sandbox shows the resolver does not forward only for a
// name that exists (a forwarder relays the NXDOMAIN of one that does not).
// Other attempts through the proxy are left out (the proxy's own refusal
// proves those), and so are the random names (nobody resolves them).
func ControlPlan(e policy.Egress) []Attempt {
	plan, _ := PlanEgress(e)
	byCheck := roles()
	var out []Attempt
	for _, a := range plan {
		switch {
		case a.Op == OpFront:
			// The front asked directly for the must-fail name: whether
			// it answers is what a quiet close through the proxy means.
			a.Op, a.ViaProxy = OpHello, false
			out = append(out, a)
		case a.ViaProxy:
		case (a.Op == OpDial || a.Op == OpUDP) && byCheck[a.Check].Deny():
			out = append(out, a)
		case a.Op == OpResolve && a.role == dnsName:
			out = append(out, a)
		case a.Op == OpQuery:
			// A name of its own, so that an authority's query log (a
			// canary zone is often watched as a tripwire) tells the
			// control's questions from a sandbox's.
			a.Host = ControlQueryPrefix + strings.TrimPrefix(a.Host, "sandprobe-")
			out = append(out, a)
		}
	}
	return out
}

// RunControl dials the control plan from wherever it runs and reports what
// each destination did: one finding per attempt, under the attempt's check
// and subject, its class what the control saw. These are observations, not
// verdicts: pass means the attempt was made (whatever it got), error that
// it could not be.
func RunControl(ctx context.Context, env *Env) result.ProbeResult {
	res := runControl(ctx, env)
	byCheck, judgeOf := roles(), judges()
	for i := range res.Findings {
		f := &res.Findings[i]
		f.Role, f.Judge = byCheck[f.Check], judgeOf[f.Check]
	}
	res.DeclareRoles()
	return res
}

func runControl(ctx context.Context, env *Env) result.ProbeResult {
	res, start := newResult(env)
	res.Vantage = VantageControl
	e := env.Policy.Spec.Egress
	// The neighbours from the control's own place: its node's kubelet
	// answering under the same subject is what proves the sandbox's deny.
	plan := append(ControlPlan(e), planNeighbours(e, &env.Policy.Spec, env.Environ, nodePorts())...)
	if len(plan) == 0 {
		res.Findings = []result.Finding{{Check: checkMustFail, Status: result.Skip, Actual: "no destination to dial: the policy's denies are all through the proxy or DNS"}}
		res.Seconds = env.Now().Sub(start).Seconds()
		return res
	}
	// Direct attempts only (TCP dials, DNS queries, ClientHellos to the
	// fronts): no proxy to go through, no TLS to verify.
	direct := policy.Egress{}
	client, err := NewNetClient(direct)
	if err == nil && env.dnsServer != "" {
		client.useDNSServer(env.dnsServer)
	}
	if err == nil {
		client.keepResolved = true
	}
	if err != nil {
		res.Findings = []result.Finding{{Check: checkMustFail, Status: result.Error, Actual: err.Error()}}
		return res
	}
	results := client.RunAttempts(ctx, plan, OptionsFor(e))
	for i, a := range plan {
		r := results[i]
		f := result.Finding{Check: a.Check, Subject: a.Subject, Status: result.Pass, Class: r.Class, Evidence: r.Detail, Seconds: r.Took().Seconds()}
		ev := r.Evidence
		f.Attempt = &ev
		if !ev.Attempted || r.Interrupted {
			f.Status, f.Actual = result.Error, r.Detail
		}
		res.Findings = append(res.Findings, f)
	}
	res.Seconds = env.Now().Sub(start).Seconds()
	return res
}
