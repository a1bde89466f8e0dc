package probes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// Egress check IDs. All of them are computed by one concurrent run of every
// attempt under one deadline (egressResults), because the must-fail verdicts
// depend on the allowed ones: if every allowed host fails too, a failure
// proves nothing about the rules.
const (
	checkAllowed     = "egress.allowed"
	checkMustFail    = "egress.must-fail"
	checkMetadata    = "egress.metadata"
	checkProxyBypass = "egress.proxy-bypass"
	checkDNSExfil    = "egress.dns-exfil"
)

// egressRun is the memoised result of all attempts for one probe run.
type egressRun struct {
	once     sync.Once
	findings map[string][]result.Finding
}

// egressFindings runs every egress attempt once and returns the findings of one check.
func egressFindings(ctx context.Context, env *Env, check string) []result.Finding {
	env.egressMu.Lock()
	if env.egress == nil {
		env.egress = &egressRun{}
	}
	er := env.egress
	env.egressMu.Unlock()
	er.once.Do(func() { er.findings = runEgress(ctx, env) })
	if fs := er.findings[check]; len(fs) > 0 {
		return fs
	}
	return []result.Finding{{Check: check, Status: result.Skip, Actual: "nothing to check for this policy"}}
}

func checkEgressAllowed(ctx context.Context, env *Env) []result.Finding {
	return egressFindings(ctx, env, checkAllowed)
}

func checkEgressMustFail(ctx context.Context, env *Env) []result.Finding {
	return egressFindings(ctx, env, checkMustFail)
}

func checkEgressMetadata(ctx context.Context, env *Env) []result.Finding {
	return egressFindings(ctx, env, checkMetadata)
}

func checkEgressProxyBypass(ctx context.Context, env *Env) []result.Finding {
	return egressFindings(ctx, env, checkProxyBypass)
}

func checkEgressDNSExfil(ctx context.Context, env *Env) []result.Finding {
	return egressFindings(ctx, env, checkDNSExfil)
}

func checkEgressDNSBypass(ctx context.Context, env *Env) []result.Finding {
	return egressFindings(ctx, env, checkDNSBypass)
}

func checkEgressUDP(ctx context.Context, env *Env) []result.Finding {
	return egressFindings(ctx, env, checkUDP)
}

// PlanEgress turns the policy into attempts; planning problems (an
// allowance with only a wildcard to dial) become skip findings.
func PlanEgress(e policy.Egress) ([]Attempt, []result.Finding) {
	var plan []Attempt
	var notes []result.Finding
	proxy := e.Proxy != ""
	var concrete []policy.Allowance
	for _, a := range e.Allow {
		name := a.Host
		if a.Probe != "" {
			name = a.Probe
		}
		if strings.Contains(name, "*") {
			notes = append(notes, result.Finding{Check: checkAllowed, Subject: hostPort(a.Host, a.Port), Status: result.Skip,
				Actual: "a wildcard cannot be dialled and no concrete name is declared",
				Fix:    "add probe: <a real name under the pattern> to this allowance"})
			continue
		}
		if a.InCluster() {
			// An in-cluster peer (a broker) is reached directly by its
			// Service name, proxy or not, and must answer as an
			// application (its scheme defaults to http, not tcp).
			plan = append(plan, Attempt{Check: checkAllowed, Subject: hostPort(name, a.Port) + " in-cluster", Host: name, Port: a.Port, Scheme: a.Scheme})
			continue
		}
		concrete = append(concrete, policy.Allowance{Host: name, Port: a.Port, Scheme: a.Scheme, Addresses: a.Addresses})
		sub := hostPort(name, a.Port)
		if proxy {
			sub += " via proxy"
		}
		plan = append(plan, Attempt{Check: checkAllowed, Subject: sub, Host: name, Port: a.Port, Scheme: a.Scheme, ViaProxy: proxy})
	}
	mustFail := func(check string, t policy.Target) {
		host, port, ok := t.Dial()
		if !ok {
			return // validation already refused it
		}
		plan = append(plan, Attempt{Check: check, Subject: hostPort(host, port), Host: host, Port: port, Scheme: schemeFor(port), Expect: t.Expect, AllAddrs: true, Addresses: t.Addresses})
		if proxy {
			plan = append(plan, Attempt{Check: check, Subject: hostPort(host, port) + " via proxy", Host: host, Port: port, Scheme: schemeFor(port), ViaProxy: true})
		}
	}
	for _, t := range e.MustFail.Hosts {
		mustFail(checkMustFail, t)
	}
	for _, t := range e.MustFail.IPs {
		mustFail(checkMustFail, t)
	}
	if proxy {
		plan = append(plan, plainGETs(plan)...)
	}
	for _, addr := range e.Metadata.Addresses {
		for _, port := range e.Metadata.Ports {
			mustFail(checkMetadata, policy.Target{Target: addr, Port: port})
		}
	}
	if proxy {
		for _, a := range concrete {
			plan = append(plan, Attempt{Check: checkProxyBypass, Subject: hostPort(a.Host, a.Port) + " direct", Host: a.Host, Port: a.Port, Scheme: bypassScheme(a), AllAddrs: true, Addresses: a.Addresses})
		}
	}
	plan = append(plan, planSNI(e, concrete)...)
	plan = append(plan, planUDP(e, concrete)...)
	plan = append(plan, planDNS(e)...)
	return plan, notes
}

func runEgress(ctx context.Context, env *Env) map[string][]result.Finding {
	e := env.Policy.Spec.Egress
	out := map[string][]result.Finding{}
	client, err := NewNetClient(e)
	if err == nil {
		client.withNonce(env.Nonce)
		if env.dnsServer != "" {
			client.useDNSServer(env.dnsServer)
		}
	}
	if err != nil {
		for _, c := range []string{checkAllowed, checkMustFail, checkMetadata} {
			out[c] = []result.Finding{{Check: c, Status: result.Error, Actual: err.Error(), Fix: "make spec.egress.caFile readable inside the sandbox"}}
		}
		return out
	}
	plan, notes := planRun(env)
	for _, n := range notes {
		out[n.Check] = append(out[n.Check], n)
	}
	results := client.RunAttempts(ctx, plan, OptionsFor(e))
	late := settleNewPod(ctx, client, plan, results, OptionsFor(e), env.SettleDelay)

	deadNetwork, noControl := networkProof(plan, results, len(e.Allow))
	dns := dnsEvidence(plan, results)
	np := readNoProxy(env.Environ)
	byCheck, judgeOf := roles(), judges()
	for i, a := range plan {
		var f result.Finding
		judgeOne := func(r Result) result.Finding { return judge(a, r, e) }
		switch a.Op {
		case OpResolve, OpQuery:
			judgeOne = func(r Result) result.Finding { return judgeDNS(a, r, dns) }
		case OpFront:
			judgeOne = func(r Result) result.Finding { return judgeFront(a, r) }
		}
		f = late.judge(i, judgeOne(results[i]), judgeOne)
		// A resolver's own answer proves what it does whatever the network.
		resolverAnswered := byCheck[a.Check] == result.RoleDNSChannel && f.Attempt != nil && f.Attempt.Rcode != ""
		if !a.MustAnswer() && f.Status == result.Pass && !resolverAnswered {
			unproven(&f, deadNetwork, noControl)
		}
		if r := byCheck[a.Check]; e.Proxy != "" && !a.ViaProxy && (r == result.RoleMustFail || r == result.RoleMetadata) && a.Op == OpDial {
			np.note(&f, a)
		}
		f.Role, f.Judge = byCheck[a.Check], judgeOf[a.Check]
		out[a.Check] = append(out[a.Check], f)
	}
	return out
}

// networkProof says whether the allowed targets show the network works:
// deadNetwork when every one tried failed; noControl when allowances
// exist but none could be dialled, so a failure proves no more than on a
// dead network.
func networkProof(plan []Attempt, results []Result, allowances int) (deadNetwork, noControl bool) {
	allowedTried, allowedOK := 0, 0
	for i, a := range plan {
		if a.MustAnswer() {
			allowedTried++
			if results[i].Class == policy.VerdictAnswered {
				allowedOK++
			}
		}
	}
	return allowedTried > 0 && allowedOK == 0, allowedTried == 0 && allowances > 0
}

// unproven turns a deny's pass into inconclusive when nothing shows the
// network works.
func unproven(f *result.Finding, deadNetwork, noControl bool) {
	switch {
	case deadNetwork:
		f.Status = result.Inconclusive
		f.Actual = fmt.Sprintf("%s, but every allowed host failed too: a dead network proves nothing about the rules", f.Actual)
		f.Fix = "make the allowed hosts reachable (see egress.allowed); until then no deny is proven"
	case noControl:
		f.Status = result.Inconclusive
		f.Actual = fmt.Sprintf("%s, but no allowed target could be probed (every allowance is a wildcard without probe:): nothing shows the network works", f.Actual)
		f.Fix = "add probe: <a real name under the pattern> to an allowance, so an answer proves the network works"
	}
}

// planRun is the run's plan: the policy's attempts and the neighbours
// derived from where the probe stands.
func planRun(env *Env) ([]Attempt, []result.Finding) {
	e := env.Policy.Spec.Egress
	plan, notes := PlanEgress(e)
	return append(plan, planNeighbours(e, &env.Policy.Spec, env.Environ, nodePorts())...), notes
}

// note says, on a direct deny's finding, that NO_PROXY sends the
// sandbox's HTTP clients to its destination around the proxy. Not a
// verdict of its own: the direct deny is what stops them.
func (np noProxy) note(f *result.Finding, a Attempt) {
	entry := np.covers(a.Host, a.Port)
	if entry == "" {
		return
	}
	why := fmt.Sprintf("%s=%q covers %s (entry %q): HTTP clients in the sandbox go to it directly, around the proxy and its record; only the direct deny stops them", np.name, strings.Join(np.entries, ","), a.Host, entry)
	f.Evidence = joinText(f.Evidence, why)
	if f.Status == result.Fail {
		f.Fix += fmt.Sprintf("; and take %s out of %s", a.Host, np.name)
	}
}

func joinText(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// try performs one attempt and classifies it; ctx carries the attempt's own timeout.
func (c *NetClient) try(ctx context.Context, a Attempt) Result {
	switch a.Op {
	case OpResolve:
		return c.tryResolve(ctx, a)
	case OpQuery:
		return c.tryQuery(ctx, a)
	case OpFront:
		return c.tryFront(ctx, a)
	case OpHello:
		return c.tryHello(ctx, a)
	case OpUDP:
		return c.tryUDP(ctx, a)
	}
	if a.ViaProxy {
		return c.tryProxy(ctx, a)
	}
	addrs, err := c.lookup(ctx, a.Host)
	if err != nil {
		dns := classify(err)
		if len(a.Addresses) == 0 {
			r := failed(dns)
			r.Unresolved = true
			return r
		}
		// The name does not resolve here, but its addresses are known:
		// the path to them is what must be closed.
		r := c.dialAll(ctx, a, a.Addresses)
		r.Detail = dns.detail + "; the declared addresses: " + r.Detail
		r.Evidence.Rcode, r.Evidence.Resolver = dns.rcode, dns.resolver
		return r
	}
	var resolved []string // only a control keeps them
	if c.keepResolved && net.ParseIP(a.Host) == nil {
		resolved = slices.Clone(addrs)
	}
	for _, k := range a.Addresses {
		if !slices.Contains(addrs, k) {
			addrs = append(addrs, k)
		}
	}
	r := c.dialAll(ctx, a, addrs)
	r.Evidence.Resolved = resolved
	return r
}

// failed is a result whose outcome came from one error.
func failed(o outcome) Result {
	r := Result{Class: o.class, Detail: o.detail}
	o.fill(&r.Evidence)
	return r
}

func (c *NetClient) tryProxy(ctx context.Context, a Attempt) Result {
	if c.proxy == nil {
		return Result{Class: policy.VerdictError, Detail: "no proxy declared"}
	}
	conn, status, err := c.viaProxy(ctx, a.Host, a.Port, a.Scheme)
	if err != nil {
		o := classify(err)
		if status != "" && !strings.Contains(o.detail, status) {
			o.detail = status + ": " + o.detail
		}
		return failed(o)
	}
	r := Result{Class: policy.VerdictAnswered, Detail: "via " + c.proxy.Host + ": " + status, Answered: []string{a.Host}}
	r.Evidence.ProxyStatus = status
	if conn != nil {
		defer conn.Close()
		if a.Scheme == "https" && a.MustAnswer() {
			tlsDetail, err := c.handshake(ctx, conn, a.Host)
			if err != nil {
				r.Class, r.Answered = policy.VerdictError, nil
				r.Detail += "; " + classify(err).detail
				return r
			}
			r.Detail += "; " + tlsDetail
		} else if a.Scheme == "https" {
			refused, unsigned, detail := c.refusedInTunnel(ctx, conn, a.Host)
			switch {
			case refused:
				r.Class, r.Answered = policy.VerdictProxyDenied, nil
				r.Detail = "via " + c.proxy.Host + ": " + status + "; " + detail
				r.Evidence.ProxyStatus = status + "; then inside TLS: " + detail
				r.Evidence.StoppedBy = result.StoppedByProxy
			case unsigned:
				r.Class, r.Answered = policy.VerdictIntercepted, nil
				r.Detail += "; " + detail
				r.Evidence.ProxyStatus = status + "; then inside TLS: " + detail
			default:
				r.Detail += "; " + detail
			}
		}
	}
	return r
}

// dialAll dials every address at once: a must-fail name is only closed if
// each of its A and AAAA addresses is.
func (c *NetClient) dialAll(ctx context.Context, a Attempt, addrs []string) Result {
	type dialed struct {
		addr  string
		o     outcome
		info  string
		took  time.Duration
		class string
	}
	res := make([]dialed, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			t0 := time.Now()
			conn, err := c.dialAddr(ctx, addr, a.Port)
			o := classify(err)
			info := o.detail
			if err == nil {
				o, info = c.whoAnswered(ctx, conn, a)
				conn.Close()
			}
			res[i] = dialed{addr: addr, o: o, info: info, took: time.Since(t0), class: o.class}
		})
	}
	wg.Wait()
	out := Result{}
	var parts []string
	for _, d := range res {
		parts = append(parts, fmt.Sprintf("%s: %s", net.JoinHostPort(d.addr, strconv.Itoa(a.Port)), d.info))
		if d.class == policy.VerdictAnswered {
			out.Answered = append(out.Answered, d.addr)
		}
		out.Evidence.Addresses = append(out.Evidence.Addresses, result.AddressAttempt{
			Address: d.addr, Class: d.class, Errno: d.o.errno, Signal: d.o.signal, Waited: d.took.Seconds()})
	}
	out.Detail = strings.Join(parts, "; ")
	// The first address's class and evidence stand for the attempt (the
	// detail and the per-address evidence have each); an answer from any
	// address, or an address that breaks a pinned class, wins.
	first := res[0]
	out.Class = first.class
	first.o.fill(&out.Evidence)
	if len(out.Answered) > 0 {
		out.Class = policy.VerdictAnswered
		out.Evidence.Errno, out.Evidence.Signal, out.Evidence.StoppedBy = "", "", ""
	} else if a.Expect != "" && !a.MustAnswer() {
		for _, d := range res {
			if d.class != a.Expect {
				out.Class = d.class // a pinned class must hold for every address
				d.o.fill(&out.Evidence)
			}
		}
	}
	if len(addrs) == 1 {
		out.Evidence.Addresses = nil // the attempt's own fields say it all
	}
	return out
}

// judge turns an attempt's result into a finding with expected, actual and fix.
func judge(a Attempt, r Result, e policy.Egress) result.Finding {
	f, made := baseFinding(a, r)
	if !made {
		return f
	}
	ev := r.Evidence
	answered := r.Class == policy.VerdictAnswered
	if a.MustAnswer() {
		f.Expected = "answered"
		if r.Class == policy.VerdictIntercepted {
			f.Status, f.Actual = result.Inconclusive, "intercepted: "+r.Detail+": nothing from the host itself shows it answered"
			f.Fix = fmt.Sprintf("find what takes connections to %s (a mesh sidecar, a transparent proxy) and let it through, or declare the scheme the host speaks (http or https) so the probe can ask it", a.Subject)
			return f
		}
		if answered {
			f.Status, f.Actual = result.Pass, "answered"
			return f
		}
		f.Status, f.Actual = result.Fail, r.Class+": "+r.Detail
		f.Fix = allowedFix(a, r)
		return f
	}
	f.Expected = "no answer (any failure)"
	switch {
	case a.Expect != "":
		f.Expected = "fails with " + a.Expect
	case a.ViaProxy:
		f.Expected = "the proxy refuses it (" + statusList(e.ProxyDenyStatuses()) + ")"
	}
	inconclusive := func(actual, fix string) result.Finding {
		f.Status, f.Actual, f.Fix = result.Inconclusive, actual, fix
		return f
	}
	switch {
	case answered:
		f.Status = result.Fail
		f.Actual = "answered: " + r.Detail
		f.Fix = openFix(a, e)
	case r.Class == policy.VerdictIntercepted && !a.ViaProxy:
		return inconclusive(fmt.Sprintf("intercepted: %s: neither an answer nor a deny", r.Detail),
			fmt.Sprintf("find what takes connections to %s (a mesh sidecar's outbound capture, a CNI's transparent proxy) and deny the destination there, or exclude the probe's traffic from it", a.Subject))
	case r.Class == policy.VerdictProxyForwarded:
		f.Status = result.Fail
		f.Actual = "the proxy let it through (" + ev.ProxyStatus + "): its allow-list does not deny it, only the upstream failed"
		f.Fix = fmt.Sprintf("restore the proxy's deny for %s: its allow-list accepts it, so it answers as soon as the destination is up", a.Host)
	case a.Expect != "" && r.Class != a.Expect:
		f.Status = result.Fail
		f.Actual = r.Class + " instead of " + a.Expect + ": the blocking behaviour changed"
		f.Fix = fmt.Sprintf("find what changed in the rule for %s (a DROP that became a reject, or the reverse), or update expect in the policy", a.Subject)
	case r.Unresolved && a.Check != checkProxyBypass:
		// The resolver's answer is no network deny: the address may be
		// open from the sandbox, and nothing was dialled to see.
		return inconclusive(fmt.Sprintf("%s: the sandbox's resolver stopped the name, but no address of %s was dialled: a DNS-only block is not a network deny (its address may be open from here)", r.Class, a.Host),
			fmt.Sprintf("list %s's addresses in the policy (mustFail.hosts[].addresses) so the probe dials them from the sandbox", a.Host))
	case a.Expect != "":
		f.Status, f.Actual = result.Pass, r.Class+stoppedByText(ev)
	case r.Class == policy.VerdictIntercepted && a.ViaProxy:
		return inconclusive(fmt.Sprintf("intercepted: %s", r.Detail),
			"if the proxy signs its refusals with a header of its own, declare it in spec.egress.proxyDenyHeaders; else make it add Proxy-Status (RFC 9209) to the refusals it serves inside TLS")
	case a.ViaProxy && r.Class != policy.VerdictProxyDenied:
		// Only the proxy's own refusal shows its allow-list denies the destination.
		return inconclusive(fmt.Sprintf("%s (%s): the proxy never refused it, so its allow-list is untested", r.Class, r.Detail),
			"make the proxy reachable from the sandbox (spec.egress.proxy), or declare the status it denies with in spec.egress.proxyDenyStatus")
	case a.Check == checkProxyBypass && r.Unresolved:
		return inconclusive(fmt.Sprintf("%s: no address of %s was dialled, so nothing shows a direct path is closed", r.Class, a.Host),
			fmt.Sprintf("list %s's addresses in its allowance (addresses: [...]) so the probe can dial them directly", a.Host))
	case r.Class == policy.VerdictError || r.Class == policy.VerdictDNSTimeout:
		return inconclusive(fmt.Sprintf("%s (%s): a failure that cannot be told apart from the probe's own", r.Class, r.Detail),
			"read the evidence; if this is how the path is meant to fail, pin it with expect: "+r.Class)
	default:
		f.Status, f.Actual = result.Pass, r.Class+stoppedByText(ev)
	}
	return f
}

func stoppedByText(ev result.Attempt) string {
	if ev.StoppedBy == "" {
		return ""
	}
	return " (stopped by the " + ev.StoppedBy + ")"
}

// baseFinding is the finding every attempt starts from; made is false for
// an attempt that was never made or was cut short, which is an error.
func baseFinding(a Attempt, r Result) (result.Finding, bool) {
	ev := r.Evidence
	f := result.Finding{Check: a.Check, Subject: a.Subject, Class: r.Class, Seconds: ev.Waited, Attempt: &ev,
		Evidence: fmt.Sprintf("%s in %s", r.Detail, r.Took().Round(time.Millisecond))}
	if !ev.Attempted || r.Interrupted {
		f.Status, f.Expected, f.Actual = result.Error, "the attempt is made, with its whole timeout", r.Detail
		f.Evidence = r.Detail
		f.Fix = "give the probe the time its egress run needs (spec.probe.deadline), or fewer attempts per run (spec.egress.concurrency up, or fewer targets)"
		return f, false
	}
	return f, true
}

func statusList(sts []int) string {
	parts := make([]string, len(sts))
	for i, s := range sts {
		parts[i] = strconv.Itoa(s)
	}
	return strings.Join(parts, " or ")
}

func allowedFix(a Attempt, r Result) string {
	switch r.Class {
	case policy.VerdictProxyDenied:
		return fmt.Sprintf("add %s to the forward proxy's allow-list (it refused the CONNECT)", a.Host)
	case policy.VerdictDNSRefused:
		if strings.Contains(r.Detail, "search-list expansion") {
			return fmt.Sprintf("let the sandbox's resolver answer the search-list expansions of %s (NXDOMAIN, not REFUSED): `sandprobe render --egress cilium` writes them into the DNS rule; or give the sandbox pods dnsConfig options ndots:1, or have them ask for %s. with its trailing dot", a.Host, a.Host)
		}
		return fmt.Sprintf("the sandbox's resolver refuses %s: allow the name in its DNS rule", a.Host)
	case policy.VerdictNXDomain, policy.VerdictDNSTimeout:
		if a.ViaProxy {
			return "the proxy's name does not resolve inside the sandbox: check the sandbox's DNS and spec.egress.proxy"
		}
		return fmt.Sprintf("%s does not resolve inside the sandbox: check the sandbox's resolver", a.Host)
	case policy.VerdictTimeout:
		if a.ViaProxy {
			return "the path to the proxy (or from it to the host) is dropped: allow egress to the proxy and the proxy's egress to this host"
		}
		return fmt.Sprintf("egress to %s:%d is dropped: allow it in the sandbox's NetworkPolicy/CNI rules", a.Host, a.Port)
	case policy.VerdictRefused:
		return fmt.Sprintf("egress to %s:%d is rejected (or nothing listens): allow it and check the host is up", a.Host, a.Port)
	}
	if strings.Contains(r.Detail, "certificate") {
		return "the TLS certificate is not trusted: give the probe the CA that signs it (spec.egress.caFile)"
	}
	if strings.Contains(r.Detail, "could not reach it") {
		return fmt.Sprintf("the proxy accepted %s but could not reach it: check the host is up and the proxy's own egress", a.Host)
	}
	return fmt.Sprintf("make %s:%d reachable from the sandbox as declared", a.Host, a.Port)
}

func openFix(a Attempt, e policy.Egress) string {
	switch a.Check {
	case checkMetadata:
		return fmt.Sprintf("block the metadata address %s in the sandbox's egress policy (ipBlock except / a CNI deny) and in the proxy", a.Host)
	case checkProxyBypass:
		return fmt.Sprintf("deny direct egress to %s's addresses: only the proxy may reach allowed hosts", a.Host)
	case checkUDP:
		return fmt.Sprintf("deny UDP to %s (QUIC answered on %d/udp): a rule that lists TCP ports only, or one widened for HTTP/3, leaves it open; allow UDP to the sandbox's resolver alone", a.Host, a.Port)
	}
	if a.ViaProxy {
		return fmt.Sprintf("the proxy lets %s through: restore its default-deny allow-list", a.Subject)
	}
	return fmt.Sprintf("a rule that blocked %s is gone or was widened: restore the deny in the sandbox's egress policy (NetworkPolicy / CNI)", a.Subject)
}

func hostPort(host string, port int) string {
	if port == 0 {
		return host
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// plainGETs asks the proxy for every must-fail host over plain HTTP too
// (an absolute-URL GET to port 80), not only those declared on 80 or
// 8080: a proxy that filters CONNECT but forwards plain HTTP is a known
// way out of a sandbox. A host already asked for on 80 is not asked twice.
func plainGETs(plan []Attempt) []Attempt {
	asked := map[string]bool{}
	for _, a := range plan {
		if a.Check == checkMustFail && a.ViaProxy && a.Scheme == "http" {
			asked[a.Host] = true
		}
	}
	var out []Attempt
	for _, a := range plan {
		if a.Check != checkMustFail || !a.ViaProxy || asked[a.Host] {
			continue
		}
		asked[a.Host] = true
		out = append(out, Attempt{Check: checkMustFail, Subject: hostPort(a.Host, 80) + " via proxy", Host: a.Host, Port: 80, Scheme: "http", ViaProxy: true})
	}
	return out
}

// bypassScheme is what a direct attempt to an allowed host asks it, so an
// answer is the host's own (a TLS certificate, a status line).
func bypassScheme(a policy.Allowance) string {
	if a.Scheme != "" {
		return a.Scheme
	}
	return schemeFor(a.Port)
}

func schemeFor(port int) string {
	switch port {
	case 80, 8080:
		return "http"
	case 443, 8443:
		return "https"
	}
	return "tcp"
}

func randomLabel() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// judgeSettled judges a deny that answered (f, from first) by its re-dials
// (s, the deciding one judged g): denied twice in a row, the steady
// state's pass, saying the door was open when the pod started and for how
// long it may have been; otherwise f stands, saying what the re-dials saw.
// A re-dial that errs (an interrupted attempt, a local failure) proves no
// deny: the first answer stands, saying what the re-dials saw.
// A timeout settles it like a refusal (kube-router's steady state on
// this cluster is silence, measured: make e2e's healthy runs) only where
// an allowance answered in the same re-dial (witnessed): otherwise
// recheckAnswered hands it over unproven, and the verdict is inconclusive
// (the door was open at start; whether it closed cannot be told).
func judgeSettled(f, g result.Finding, first Result, s settling) result.Finding {
	if !s.settled || g.Status != result.Pass {
		switch {
		case s.final.Unproven:
			// Open at start, and the steady state cannot be told: neither
			// the fail of a door left open nor the pass of one that closed.
			f.Status = result.Inconclusive
			f.Actual += fmt.Sprintf("; %s, the last: %s", s.summary(), s.final.Detail)
			f.Fix = "make the allowed hosts reachable from the sandbox (spec.egress.allow), so a silent re-dial can be told from a failed network; then run again"
		case s.final.Class == policy.VerdictError && s.final.Detail != "":
			f.Actual += fmt.Sprintf("; %s, the last: %s", s.summary(), s.final.Detail)
		default:
			f.Actual += fmt.Sprintf("; %s: the deny is not in force", s.summary())
		}
		return f
	}
	g.Actual += fmt.Sprintf("; it answered once, %.1f s into the egress checks, and was denied %s later and again after that: "+
		"the network policy was %s (an engine that isolates new pods late "+
		"leaves every new sandbox open that long; docs/egress.md)", first.Evidence.Started, s.after.Round(100*time.Millisecond), result.SettledMark)
	return g
}

// DefaultSettleDelay is how long a probe in a new Kubernetes pod waits
// before it dials once more a deny that answered (Env.SettleDelay).
const DefaultSettleDelay = 2 * time.Second

// settleRounds bounds the re-dials: they go on, half the delay apart,
// until settleRounds×delay after the first (12 s by default).
const settleRounds = 6

// settling is what the re-dials of one deny saw.
type settling struct {
	final   Result        // the deciding re-dial: the second of two denies in a row, else the last that was no deny
	settled bool          // denied twice in a row, and never answered after a deny
	after   time.Duration // from the first dial's results to the first of the two denies
	rounds  int
	over    time.Duration // from the first round to the last re-dial
	tally   map[string]int
}

// summary says what the re-dials saw: "dialled again 9 times over 12.1 s:
// answered 7, refused 2".
func (s settling) summary() string {
	classes := make([]string, 0, len(s.tally))
	for c := range s.tally {
		classes = append(classes, c)
	}
	slices.Sort(classes)
	parts := make([]string, len(classes))
	for i, c := range classes {
		parts[i] = fmt.Sprintf("%s %d", c, s.tally[c])
	}
	times := "once"
	if s.rounds != 1 {
		times = fmt.Sprintf("%d times", s.rounds)
	}
	return fmt.Sprintf("dialled again %s over %s: %s", times, s.over.Round(100*time.Millisecond), strings.Join(parts, ", "))
}

// denied: a re-dial shows a deny in force (a refusal, or a witnessed
// silence).
func denied(r Result) bool {
	return r.Class == policy.VerdictRefused || (r.Class == policy.VerdictTimeout && !r.Unproven)
}

// recheckAnswered dials again every direct deny that answered or timed
// out: after delay, then every half delay, until each is denied twice in
// a row or settleRounds×delay has passed; it returns what the re-dials saw
// by plan index (nil when delay is 0 or nothing was re-dialled).
//
// A new pod can run before its NetworkPolicy engine has programmed it:
// kube-router learns the pod's address from the API and isolates it a sync
// later (its --netpol-default-deny closes that window; v2.1 has none), as
// do other engines (k3s#13432, aws-network-policy-agent#189), although the
// Kubernetes documentation asks for isolation "from the very first
// instant"; on a loaded node the kubelet can publish the pod's address
// seconds after its container started. A probe pod is such a new pod.
// Denied twice in a row, the steady state is proven and the finding says
// the door was open at start; still answering at the end, the deny is
// broken. An engine resyncing the node's rules can refuse a dial for an
// instant even where an allow-all is in force (make e2e saw a widened
// policy pass this way): one deny alone settles nothing.
//
// The re-dials stop early once the pod is evidently isolated: a deny that
// answered at first has been denied twice in a row, and each other one has
// answered at least once after that; those are open under the pod's rules.
func recheckAnswered(ctx context.Context, client *NetClient, plan []Attempt, results []Result, o RunOptions, delay time.Duration) map[int]settling {
	if delay <= 0 {
		return nil
	}
	idx, again, witnesses := redialPlan(plan, results)
	if len(idx) == 0 {
		return nil
	}
	ds := make([]redial, len(idx))
	for j, i := range idx {
		ds[j] = redial{settling: settling{tally: map[string]int{}}, answeredFirst: results[i].Class == policy.VerdictAnswered}
	}
	isolated := time.Duration(-1) // when a deny that answered at first was denied for good
	begin := time.Now()
	wait := delay
	for {
		if !sleepCtx(ctx, wait) {
			return nil
		}
		at := time.Since(begin)
		rs := client.RunAttempts(ctx, append(again[:len(again):len(again)], witnesses...), o)
		rs = witnessed(rs[:len(again)], rs[len(again):], witnesses)
		if ctx.Err() != nil {
			return nil
		}
		done := true
		for j, r := range rs {
			if ds[j].decided() {
				continue
			}
			if ds[j].observe(r, at, time.Since(begin)) && isolated < 0 {
				isolated = at
			}
			done = done && ds[j].decided()
		}
		if done || at+delay/2 > settleRounds*delay || openUnderRules(ds, isolated) {
			break
		}
		wait = delay / 2
	}
	out := make(map[int]settling, len(idx))
	for j, i := range idx {
		s := ds[j].settling
		if !s.settled && s.final.Class == "" {
			// Denied once at the very end, never twice: the last answer
			// it gave before stands (the first round's).
			s.final = results[i]
		}
		out[i] = s
	}
	return out
}

// redialPlan is what recheckAnswered dials again: the direct denies that
// answered (the pod not yet isolated) or were silent (not yet let out where
// an allowance opens it), by plan index, a direct query to an outside DNS
// server (egress.dns-bypass) included; and the witnesses, the allowances
// that answered the first time, dialled again with them: silence proves a
// deny only while the pod can still reach what it must (as networkProof
// asks of the first round).
func redialPlan(plan []Attempt, results []Result) (idx []int, again, witnesses []Attempt) {
	for i, a := range plan {
		if a.MustAnswer() && results[i].Class == policy.VerdictAnswered {
			witnesses = append(witnesses, a)
		}
		if c := results[i].Class; a.MustAnswer() || a.ViaProxy || !a.direct() || (c != policy.VerdictAnswered && c != policy.VerdictTimeout) {
			continue
		}
		idx = append(idx, i)
		again = append(again, a)
	}
	return idx, again, witnesses
}

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// redial is one deny's re-dials as they go.
type redial struct {
	settling
	answeredFirst bool          // its first dial answered
	streak        int           // denies in a row, up to now
	sawDeny       bool          // denied in some re-dial
	open          bool          // answered where it cannot be the start-up window
	lastOpen      time.Duration // when it last answered
}

func (d *redial) decided() bool { return d.settled || d.open }

// observe takes the re-dial at (since the first round) that ended over in;
// true when it settles a deny that answered at first: the pod is isolated.
func (d *redial) observe(r Result, at, over time.Duration) (isolatedNow bool) {
	d.rounds++
	d.over = over
	d.tally[r.Class]++
	switch {
	case denied(r):
		d.streak++
		if d.streak == 1 {
			d.after = at
		}
		if d.streak == 2 {
			d.settled, d.final = true, r
			isolatedNow = d.answeredFirst
		}
	case r.Class == policy.VerdictAnswered:
		// An answer after a deny is a door that flaps under the pod's
		// rules; silent at first and answered now, it is let out where it
		// must not be: either way open, not late.
		d.streak, d.final, d.lastOpen = 0, r, at
		d.open = d.sawDeny || !d.answeredFirst
	default:
		d.streak, d.final = 0, r
	}
	d.sawDeny = d.sawDeny || denied(r)
	return isolatedNow
}

// openUnderRules: the pod is isolated (a deny that answered at first is
// denied for good since isolated), and every deny still undecided answered
// after that: open under the pod's rules, not late.
func openUnderRules(ds []redial, isolated time.Duration) bool {
	if isolated < 0 {
		return false
	}
	for _, d := range ds {
		if !d.decided() && (d.final.Class != policy.VerdictAnswered || d.lastOpen <= isolated) {
			return false
		}
	}
	return true
}

// lateVerdicts is what the dials after a new pod's first instants saw:
// the denies' re-dials and the allowances' confirmations, by plan index.
type lateVerdicts struct {
	settled   map[int]settling
	confirmed map[int]confirmation
	first     []Result // the first dials' results (results holds the confirmations)
}

// settleNewPod runs the re-dials of a new pod (delay > 0): the denies'
// (recheckAnswered) and the allowances' (confirmAllowances), side by side;
// the allowances' results then replace the first ones in results.
func settleNewPod(ctx context.Context, client *NetClient, plan []Attempt, results []Result, o RunOptions, delay time.Duration) lateVerdicts {
	firstDone := time.Now()
	var l lateVerdicts
	var wg sync.WaitGroup
	// Side by side: the denies' re-dials can take the dial timeout a round.
	wg.Go(func() { l.settled = recheckAnswered(ctx, client, plan, results, o, delay) })
	wg.Go(func() { l.confirmed = confirmAllowances(ctx, client, plan, results, o, delay, firstDone) })
	wg.Wait()
	l.first = slices.Clone(results)
	for i, c := range l.confirmed {
		results[i] = c.final
	}
	return l
}

// judge is attempt i's finding f (judged on results[i]) once the late
// dials are taken into account; judgeOne judges another of its results.
func (l lateVerdicts) judge(i int, f result.Finding, judgeOne func(Result) result.Finding) result.Finding {
	if c, ok := l.confirmed[i]; ok {
		f.Actual += c.note(l.first[i])
	}
	s, ok := l.settled[i]
	switch {
	case ok && f.Status == result.Fail:
		return judgeSettled(f, judgeOne(s.final), l.first[i], s)
	case ok && f.Status == result.Pass && !s.settled && s.final.Class == policy.VerdictAnswered:
		f = judgeOne(s.final)
		f.Actual += fmt.Sprintf("; silent on the first dial, it answered on a re-dial (%s): the door is open once the pod's rules are in place", s.summary())
	}
	return f
}

// confirmation is what an allowance's dials after the pod's first instants
// saw (confirmAllowances).
type confirmation struct {
	final Result        // the one that decides: the last re-dial
	after time.Duration // from the first dial's results to it
	dials int
}

// note is what the finding adds to its text, given the first dial's
// result.
func (c confirmation) note(first Result) string {
	after := c.after.Round(100 * time.Millisecond)
	switch {
	case first.Class == policy.VerdictAnswered && c.final.Class != policy.VerdictAnswered:
		return fmt.Sprintf(" (%d dials up to %s after the first, which answered at the pod's first instant, before its network policy was in force)", c.dials, after)
	case first.Class != policy.VerdictAnswered && c.final.Class == policy.VerdictAnswered:
		return fmt.Sprintf("; %s at the pod's first instant (before its network policy let it out), it answered %s later", first.Class, after)
	case c.final.Class != policy.VerdictAnswered:
		return fmt.Sprintf("; dialled again %d times up to %s later: %s", c.dials, after, c.final.Class)
	}
	return ""
}

// confirmAllowances dials every allowance again once the pod's rules can
// be in force (delay after the first dials, as recheckAnswered waits for
// the denies), and once more half the delay later where it did not answer;
// it returns by plan index the allowances whose verdict those dials
// change or confirm as a failure (nil when delay is 0).
//
// A new pod's first dials can run before its NetworkPolicy engine has
// programmed it: everything answers then, an allowance the rules no
// longer open (a broker's podSelector typo) included, and an engine that
// drops until it has programmed the pod lets no allowance answer yet.
// Neither first answer is the steady state: an allowance passes only when
// it answers after the pod's first instants, and it fails only when it
// does not answer twice, half the delay apart, then (an engine resyncing
// can refuse a dial for an instant).
func confirmAllowances(ctx context.Context, client *NetClient, plan []Attempt, results []Result, o RunOptions, delay time.Duration, since time.Time) map[int]confirmation {
	if delay <= 0 {
		return nil
	}
	var idx []int
	var again []Attempt
	for i, a := range plan {
		if a.MustAnswer() {
			idx = append(idx, i)
			again = append(again, a)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	out := map[int]confirmation{}
	wait := time.Until(since.Add(delay))
	for round := 0; round < 2 && len(idx) > 0; round++ {
		if !sleepCtx(ctx, wait) {
			return nil
		}
		rs := client.RunAttempts(ctx, again, o)
		if ctx.Err() != nil {
			return nil
		}
		after := time.Since(since)
		var nextIdx []int
		var next []Attempt
		for j, r := range rs {
			i := idx[j]
			c := out[i]
			c.final, c.after, c.dials = r, after, c.dials+1
			out[i] = c
			if r.Class != policy.VerdictAnswered && !r.Interrupted {
				nextIdx, next = append(nextIdx, i), append(next, again[j])
			}
		}
		idx, again, wait = nextIdx, next, delay/2
	}
	for i, c := range out {
		// Answered at first and now: nothing to say.
		if results[i].Class == policy.VerdictAnswered && c.final.Class == policy.VerdictAnswered {
			delete(out, i)
		}
	}
	return out
}

// witnessed returns a re-dial round's results (rs) with each silence
// turned into an unproven error unless a witness (an allowance that
// answered before) answered in the same round (ws): a pod whose own
// network fails (a stale gateway address, a node in trouble) is silent
// everywhere, and that silence is no deny. A refusal is the network's own
// answer and stands alone.
func witnessed(rs, ws []Result, witnesses []Attempt) []Result {
	for _, w := range ws {
		if w.Class == policy.VerdictAnswered {
			return rs
		}
	}
	why := "silent, and no allowance answered before it to show the pod's network works: silence alone does not show a deny in force"
	if len(witnesses) > 0 {
		why = fmt.Sprintf("silent, but the allowance %s, which had answered, did not answer either: the pod's own network failed then, which does not show a deny in force", witnesses[0].Subject)
	}
	out := make([]Result, len(rs))
	for j, r := range rs {
		out[j] = r
		if r.Class == policy.VerdictTimeout {
			out[j] = Result{Class: policy.VerdictError, Detail: why, Evidence: r.Evidence, Unproven: true}
		}
	}
	return out
}
