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

	"github.com/sourcegraph/conc/pool"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
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

// attempt is one planned network attempt.
type attempt struct {
	check    string
	subject  string
	host     string // name or address
	port     int
	scheme   string // https, http or tcp
	viaProxy bool
	expect   string // a pinned failure class (direct must-fail targets only)
	dnsOnly  bool   // resolve only (dns-exfil)
	allAddrs bool   // dial every resolved address: each must fail
}

func (a attempt) mustAnswer() bool { return a.check == checkAllowed }

// egressRun is the memoised result of all attempts for one probe run.
type egressRun struct {
	once     sync.Once
	findings map[string][]report.Finding
}

// egressFindings runs every egress attempt once and returns the findings of one check.
func egressFindings(ctx context.Context, env *Env, check string) []report.Finding {
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
	return []report.Finding{{Check: check, Status: report.Skip, Actual: "nothing to check for this policy"}}
}

func checkEgressAllowed(ctx context.Context, env *Env) []report.Finding {
	return egressFindings(ctx, env, checkAllowed)
}

func checkEgressMustFail(ctx context.Context, env *Env) []report.Finding {
	return egressFindings(ctx, env, checkMustFail)
}

func checkEgressMetadata(ctx context.Context, env *Env) []report.Finding {
	return egressFindings(ctx, env, checkMetadata)
}

func checkEgressProxyBypass(ctx context.Context, env *Env) []report.Finding {
	return egressFindings(ctx, env, checkProxyBypass)
}

func checkEgressDNSExfil(ctx context.Context, env *Env) []report.Finding {
	return egressFindings(ctx, env, checkDNSExfil)
}

// planEgress turns the policy into attempts; planning problems (an allowance
// with only a wildcard to dial) become skip findings.
func planEgress(e policy.Egress) ([]attempt, []report.Finding) {
	var plan []attempt
	var notes []report.Finding
	proxy := e.Proxy != ""
	var concrete []policy.Allowance
	for _, a := range e.Allow {
		name := a.Host
		if a.Probe != "" {
			name = a.Probe
		}
		if strings.Contains(name, "*") {
			notes = append(notes, report.Finding{Check: checkAllowed, Subject: hostPort(a.Host, a.Port), Status: report.Skip,
				Actual: "a wildcard cannot be dialled and no concrete name is declared",
				Fix:    "add probe: <a real name under the pattern> to this allowance"})
			continue
		}
		concrete = append(concrete, policy.Allowance{Host: name, Port: a.Port, Scheme: a.Scheme})
		sub := hostPort(name, a.Port)
		if proxy {
			sub += " via proxy"
		}
		plan = append(plan, attempt{check: checkAllowed, subject: sub, host: name, port: a.Port, scheme: a.Scheme, viaProxy: proxy})
	}
	mustFail := func(check string, t policy.Target) {
		d, err := policy.ParseDestination(t.Target)
		if err != nil {
			return // validation already refused it
		}
		port := t.Port
		if port == 0 {
			port = d.Port
		}
		if port == 0 {
			port = policy.DefaultMustFailPort
		}
		host := d.DialHost()
		plan = append(plan, attempt{check: check, subject: hostPort(host, port), host: host, port: port, scheme: schemeFor(port), expect: t.Expect, allAddrs: true})
		if proxy {
			plan = append(plan, attempt{check: check, subject: hostPort(host, port) + " via proxy", host: host, port: port, scheme: schemeFor(port), viaProxy: true})
		}
	}
	for _, t := range e.MustFail.Hosts {
		mustFail(checkMustFail, t)
	}
	for _, t := range e.MustFail.IPs {
		mustFail(checkMustFail, t)
	}
	mustFail(checkMetadata, policy.Target{Target: e.Metadata.Address, Port: e.Metadata.Port})
	if proxy {
		for _, a := range concrete {
			plan = append(plan, attempt{check: checkProxyBypass, subject: hostPort(a.Host, a.Port) + " direct", host: a.Host, port: a.Port, scheme: "tcp", allAddrs: true})
		}
	}
	if e.DNS.ArbitraryNames == "deny" {
		for _, d := range exfilDomains(e) {
			name := "sandprobe-" + randomLabel() + "." + d
			plan = append(plan, attempt{check: checkDNSExfil, subject: "*." + d, host: name, dnsOnly: true})
		}
	}
	return plan, notes
}

// exfilDomains are the declared DNS domains, or the parents of the allowed names.
func exfilDomains(e policy.Egress) []string {
	if len(e.DNS.Domains) > 0 {
		return e.DNS.Domains
	}
	var out []string
	for _, a := range e.Allow {
		h := strings.TrimPrefix(a.Host, "*.")
		if h == "*" || net.ParseIP(h) != nil {
			continue
		}
		if !strings.HasPrefix(a.Host, "*.") {
			if _, parent, ok := strings.Cut(h, "."); ok && strings.Contains(parent, ".") {
				h = parent
			}
		}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

func runEgress(ctx context.Context, env *Env) map[string][]report.Finding {
	e := env.Policy.Spec.Egress
	out := map[string][]report.Finding{}
	client, err := newNetClient(e)
	if err != nil {
		for _, c := range []string{checkAllowed, checkMustFail, checkMetadata} {
			out[c] = []report.Finding{{Check: c, Status: report.Error, Actual: err.Error(), Fix: "make spec.egress.caFile readable inside the sandbox"}}
		}
		return out
	}
	plan, notes := planEgress(e)
	for _, n := range notes {
		out[n.Check] = append(out[n.Check], n)
	}
	results := make([]attemptResult, len(plan))
	ctx, cancel := context.WithTimeout(ctx, e.Timeout.Duration)
	defer cancel()
	p := pool.New().WithMaxGoroutines(max(1, e.Concurrency))
	for i, a := range plan {
		p.Go(func() { results[i] = client.try(ctx, a) })
	}
	p.Wait()

	allowedTried, allowedOK := 0, 0
	for i, a := range plan {
		if a.mustAnswer() {
			allowedTried++
			if results[i].Class == policy.VerdictAnswered {
				allowedOK++
			}
		}
	}
	deadNetwork := allowedTried > 0 && allowedOK == 0
	for i, a := range plan {
		f := judge(a, results[i], e)
		if deadNetwork && !a.mustAnswer() && f.Status == report.Pass {
			f.Status = report.Inconclusive
			f.Actual = fmt.Sprintf("%s, but every allowed host failed too: a dead network proves nothing about the rules", f.Actual)
		}
		out[a.check] = append(out[a.check], f)
	}
	return out
}

// try performs one attempt and classifies it.
func (c *netClient) try(ctx context.Context, a attempt) attemptResult {
	start := time.Now()
	r := c.tryOnce(ctx, a)
	r.Took = time.Since(start)
	return r
}

func (c *netClient) tryOnce(ctx context.Context, a attempt) attemptResult {
	if a.dnsOnly {
		addrs, err := c.lookup(ctx, a.host)
		if err != nil {
			class, detail := classify(err)
			return attemptResult{Class: class, Detail: detail}
		}
		return attemptResult{Class: policy.VerdictAnswered, Detail: a.host + " resolved to " + strings.Join(addrs, ", "), Answered: addrs}
	}
	if a.viaProxy {
		if c.proxy == nil {
			return attemptResult{Class: policy.VerdictError, Detail: "no proxy declared"}
		}
		conn, status, err := c.viaProxy(ctx, a.host, a.port, a.scheme)
		if err != nil {
			class, detail := classify(err)
			if status != "" && !strings.Contains(detail, status) {
				detail = status + ": " + detail
			}
			return attemptResult{Class: class, Detail: detail}
		}
		detail := "via " + c.proxy.Host + ": " + status
		if conn != nil {
			defer conn.Close()
			if a.scheme == "https" && a.mustAnswer() {
				tlsDetail, err := c.handshake(ctx, conn, a.host)
				if err != nil {
					_, d := classify(err)
					return attemptResult{Class: policy.VerdictError, Detail: detail + "; " + d}
				}
				detail += "; " + tlsDetail
			}
		}
		return attemptResult{Class: policy.VerdictAnswered, Detail: detail, Answered: []string{a.host}}
	}
	addrs, err := c.lookup(ctx, a.host)
	if err != nil {
		class, detail := classify(err)
		return attemptResult{Class: class, Detail: detail}
	}
	// Every address is tried at once: a must-fail name is only closed if
	// each of its A and AAAA addresses is.
	type dialed struct {
		addr  string
		class string
		info  string
	}
	res := make([]dialed, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			conn, err := c.dialAddr(ctx, addr, a.port)
			class, info := classify(err)
			if err == nil {
				info = "connected"
				if a.mustAnswer() && a.scheme == "https" {
					if d, herr := c.handshake(ctx, conn, a.host); herr != nil {
						class, info = policy.VerdictError, herr.Error()
					} else {
						info = d
					}
				}
				conn.Close()
			}
			res[i] = dialed{addr, class, info}
		})
	}
	wg.Wait()
	out := attemptResult{}
	var parts []string
	classes := map[string]bool{}
	for _, d := range res {
		parts = append(parts, fmt.Sprintf("%s: %s", net.JoinHostPort(d.addr, strconv.Itoa(a.port)), d.info))
		classes[d.class] = true
		if d.class == policy.VerdictAnswered {
			out.Answered = append(out.Answered, d.addr)
		}
	}
	out.Detail = strings.Join(parts, "; ")
	switch {
	case len(out.Answered) > 0:
		out.Class = policy.VerdictAnswered
	case len(classes) == 1:
		out.Class = res[0].class
	default:
		// Mixed failures: report the first address's class; the detail has each.
		out.Class = res[0].class
	}
	if a.expect != "" && !a.mustAnswer() {
		for _, d := range res {
			if d.class != a.expect && d.class != policy.VerdictAnswered {
				out.Class = d.class // a pinned class must hold for every address
			}
		}
	}
	return out
}

// judge turns an attempt's result into a finding with expected, actual and fix.
func judge(a attempt, r attemptResult, e policy.Egress) report.Finding {
	f := report.Finding{Check: a.check, Subject: a.subject, Class: r.Class, Seconds: r.Took.Seconds(),
		Evidence: fmt.Sprintf("%s in %s", r.Detail, r.Took.Round(time.Millisecond))}
	answered := r.Class == policy.VerdictAnswered
	if a.mustAnswer() {
		f.Expected = "answered"
		if answered {
			f.Status, f.Actual = report.Pass, "answered"
			return f
		}
		f.Status, f.Actual = report.Fail, r.Class+": "+r.Detail
		f.Fix = allowedFix(a, r)
		return f
	}
	f.Expected = "no answer (any failure)"
	if a.expect != "" {
		f.Expected = "fails with " + a.expect
	}
	switch a.check {
	case checkDNSExfil:
		f.Expected = "a random name under " + strings.TrimPrefix(a.subject, "*.") + " does not resolve"
	}
	switch {
	case answered:
		f.Status = report.Fail
		f.Actual = "answered: " + r.Detail
		f.Fix = openFix(a, e)
	case a.expect != "" && r.Class != a.expect:
		f.Status = report.Fail
		f.Actual = r.Class + " instead of " + a.expect + ": the blocking behaviour changed"
		f.Fix = fmt.Sprintf("find what changed in the rule for %s (a DROP that became a reject, or the reverse), or update expect in the policy", a.subject)
	default:
		f.Status = report.Pass
		f.Actual = r.Class
	}
	return f
}

func allowedFix(a attempt, r attemptResult) string {
	switch r.Class {
	case policy.VerdictProxyDenied:
		return fmt.Sprintf("add %s to the forward proxy's allow-list (it refused the CONNECT)", a.host)
	case policy.VerdictNXDomain, policy.VerdictDNSTimeout:
		if a.viaProxy {
			return "the proxy's name does not resolve inside the sandbox: check the sandbox's DNS and spec.egress.proxy"
		}
		return fmt.Sprintf("%s does not resolve inside the sandbox: check the sandbox's resolver", a.host)
	case policy.VerdictTimeout:
		if a.viaProxy {
			return "the path to the proxy (or from it to the host) is dropped: allow egress to the proxy and the proxy's egress to this host"
		}
		return fmt.Sprintf("egress to %s:%d is dropped: allow it in the sandbox's NetworkPolicy/CNI rules", a.host, a.port)
	case policy.VerdictRefused:
		return fmt.Sprintf("egress to %s:%d is rejected (or nothing listens): allow it and check the host is up", a.host, a.port)
	}
	if strings.Contains(r.Detail, "certificate") {
		return "the TLS certificate is not trusted: give the probe the CA that signs it (spec.egress.caFile)"
	}
	if strings.Contains(r.Detail, "could not reach it") {
		return fmt.Sprintf("the proxy accepted %s but could not reach it: check the host is up and the proxy's own egress", a.host)
	}
	return fmt.Sprintf("make %s:%d reachable from the sandbox as declared", a.host, a.port)
}

func openFix(a attempt, e policy.Egress) string {
	switch a.check {
	case checkMetadata:
		return fmt.Sprintf("block the metadata address %s in the sandbox's egress policy (ipBlock except / a CNI deny) and in the proxy", e.Metadata.Address)
	case checkProxyBypass:
		return fmt.Sprintf("deny direct egress to %s's addresses: only the proxy may reach allowed hosts", a.host)
	case checkDNSExfil:
		return "make the sandbox's resolver answer only the allowed names (no wildcard, no forwarding of arbitrary names), or declare dns.arbitraryNames: allow"
	}
	if a.viaProxy {
		return fmt.Sprintf("the proxy lets %s through: restore its default-deny allow-list", a.subject)
	}
	return fmt.Sprintf("a rule that blocked %s is gone or was widened: restore the deny in the sandbox's egress policy (NetworkPolicy / CNI)", a.subject)
}

func hostPort(host string, port int) string {
	if port == 0 {
		return host
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
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
