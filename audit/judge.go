package audit

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandprobe/sandprobe/egresslog"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// Check IDs of what the egress record proves.
const (
	CheckUnused     = "egress.allowance-unused"
	CheckWildcard   = "egress.allowance-wildcard"
	CheckWouldBlock = "egress.would-block"
)

// Check is one row of the record's checks, for `sandprobe checks` and
// docs/checks.md.
type Check struct {
	ID, Proves, Fix string
	Severity        report.Severity
}

// Checks lists what the proxy's record is judged for: by `sandprobe
// egress-usage`, and by a run given --proxy-log (egress.audit-trail).
func Checks() []Check {
	return []Check{
		{CheckUnused, "the allowance was used in the last --unused-days of the proxy's record (the probe's own marked attempts left out): every allowance earns its place",
			"remove the allowance, or write in its reason why it must stay although nothing uses it", report.Low},
		{CheckWildcard, "the wildcard allowance does not open a user-content or multi-tenant suffix (a public suffix such as *.github.io, *.s3.amazonaws.com, *.herokuapp.com, or a domain that holds one): nobody else can serve the sandbox under it",
			"allow the exact host names the sandbox needs (or the organisation's own name under the suffix: *.myorg.github.io)", report.Medium},
		{CheckTrail, TrailProves, TrailFix, report.Medium},
		{CheckWouldBlock, "every destination a sandbox reached in the record is allowed by the declared policy: enforcing it blocks nothing that is used today (the egress audit stage)",
			"add an allowance with its reason for a destination that must keep working, or accept that the sandbox loses it; then enforce", report.Medium},
	}
}

// Options tune a judgement.
type Options struct {
	UnusedDays int // default 30
	// MaxListed bounds the denied and would-block lists (default 1000) and
	// MaxFindings the would-block findings (default 200).
	MaxListed, MaxFindings int
}

// maxSandboxesNamed is how many sandboxes an allowance's usage names.
const maxSandboxesNamed = 10

// Judge holds the tally against the policy: the usage of each allowance,
// the attempts denied, what the policy would block, and the findings.
func Judge(p *policy.Policy, t *Tally, sources []report.UsageSource, opt Options) (*report.EgressUsage, []report.Finding) {
	if opt.UnusedDays <= 0 {
		opt.UnusedDays = 30
	}
	if opt.MaxListed <= 0 {
		opt.MaxListed = 1000
	}
	if opt.MaxFindings <= 0 {
		opt.MaxFindings = 200
	}
	e := p.Spec.Egress
	u := &report.EgressUsage{Sources: sources, UnusedDays: opt.UnusedDays, ProbeRecords: t.probe, Folded: t.folded}
	u.Unmarked = t.total > 0 && t.marked == 0
	for _, s := range sources {
		if !s.From.IsZero() && (u.From.IsZero() || s.From.Before(u.From)) {
			u.From = s.From
		}
		if s.To.After(u.To) {
			u.To = s.To
		}
	}
	j := newJudgement(&e, u)
	denied, wouldBlock := j.tally(t, u)
	j.nameSandboxes(u)
	u.DeniedTotal, u.WouldBlockTotal = len(denied), len(wouldBlock)
	u.Denied = t.uses(denied, opt.MaxListed)
	u.WouldBlock = t.uses(wouldBlock, max(opt.MaxListed, opt.MaxFindings+1))

	var fs []report.Finding
	for i := range u.Allowances {
		fs = append(fs, judgeUse(&u.Allowances[i], u, opt.UnusedDays))
	}
	for i := range u.Allowances {
		if f, ok := judgeWildcard(&u.Allowances[i]); ok {
			fs = append(fs, f)
		}
	}
	fs = append(fs, wouldBlockFindings(u.WouldBlock, u.WouldBlockTotal, u, opt.MaxFindings)...)
	u.WouldBlock = u.WouldBlock[:min(len(u.WouldBlock), opt.MaxListed)]
	return u, fs
}

type hostPort struct {
	host string
	port int
}

// judgement is what one Judge call reads the tally with: the allowances
// and their host rules, the allowed path to the proxy and the resolver,
// and which sandboxes used each allowance.
type judgement struct {
	allow      []policy.Allowance
	rules      []policy.HostRule
	proxyHost  string
	proxyPort  int
	paths      []netip.Prefix
	sandboxes  []map[string]bool
	matchCache map[hostPort]int
}

// newJudgement parses the allowances' rules and adds a usage row for each
// to u.
func newJudgement(e *policy.Egress, u *report.EgressUsage) *judgement {
	j := &judgement{allow: e.Allow, rules: make([]policy.HostRule, len(e.Allow)), sandboxes: make([]map[string]bool, len(e.Allow)), matchCache: map[hostPort]int{}}
	for i, a := range e.Allow {
		r, _ := policy.ParseHostRule(a.Host) // validated with the policy
		if r.Port == 0 {
			r.Port = a.Port
		}
		j.rules[i] = r
		u.Allowances = append(u.Allowances, report.AllowanceUsage{Index: i, Host: a.Host, Port: a.Port, Reason: a.Reason, BytesOut: -1, BytesIn: -1})
	}
	j.proxyHost, j.proxyPort = proxyAddr(e.Proxy)
	// The proxy's and the resolver's declared addresses are the allowed
	// path, not destinations (a flow record sees the sandbox reach them).
	j.paths = append(e.ProxyLocation.Prefixes(), e.DNS.ResolverLocation.Prefixes()...)
	return j
}

// onPath says whether host is an address of the proxy or the resolver.
func (j *judgement) onPath(host string) bool {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	for _, p := range j.paths {
		if p.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// allowanceOf is the index of the first allowance that lets host:port
// through (by its rule, or by one of its declared addresses), -1 if none.
func (j *judgement) allowanceOf(host string, port int) int {
	k := hostPort{host, port}
	if i, ok := j.matchCache[k]; ok {
		return i
	}
	i := -1
	for n, r := range j.rules {
		if r.Matches(host, port) || slices.Contains(j.allow[n].Addresses, host) && (r.Port == 0 || r.Port == port) {
			i = n
			break
		}
	}
	j.matchCache[k] = i
	return i
}

// tally adds every key of t to its allowance's usage in u and returns the
// denied and would-block keys, as indexes into t.keys: sorted as they are,
// and made into report rows only as far as they are listed.
func (j *judgement) tally(t *Tally, u *report.EgressUsage) (denied, wouldBlock []int32) {
	for k := range t.keys {
		en := t.entry(&t.keys[k])
		i := j.allowanceOf(en.host, en.port)
		switch en.decision {
		case egresslog.Allowed:
			if i < 0 {
				if en.host == j.proxyHost && (j.proxyPort == 0 || en.port == j.proxyPort) || j.onPath(en.host) {
					continue // the way to the proxy or the resolver (a flow record): the allowed path
				}
				wouldBlock = append(wouldBlock, int32(k))
				continue
			}
			j.used(&u.Allowances[i], i, en)
		case egresslog.Denied:
			if i >= 0 {
				u.Allowances[i].Denied += en.count
			}
			denied = append(denied, int32(k))
		}
	}
	return denied, wouldBlock
}

// used adds an allowed entry to allowance i's usage a.
func (j *judgement) used(a *report.AllowanceUsage, i int, en entry) {
	a.Requests += en.count
	if en.outKnown {
		a.BytesOut = max(a.BytesOut, 0) + en.bytesOut
	}
	if en.inKnown {
		a.BytesIn = max(a.BytesIn, 0) + en.bytesIn
	}
	if en.last != 0 {
		if l := time.UnixMilli(en.last).UTC(); l.After(a.LastUse) {
			a.LastUse = l
		}
	}
	if j.sandboxes[i] == nil {
		j.sandboxes[i] = map[string]bool{}
	}
	j.sandboxes[i][en.sandbox] = true
}

// nameSandboxes counts and names (the first few, sorted) the sandboxes
// that used each allowance.
func (j *judgement) nameSandboxes(u *report.EgressUsage) {
	for i := range u.Allowances {
		names := make([]string, 0, len(j.sandboxes[i]))
		for s := range j.sandboxes[i] {
			names = append(names, s)
		}
		sort.Strings(names)
		u.Allowances[i].SandboxCount = len(names)
		u.Allowances[i].Sandboxes = names[:min(len(names), maxSandboxesNamed)]
	}
}

// uses sorts keys (indexes into t.keys) the most frequent first, then by
// sandbox, host and port, and returns the first n as report rows.
func (t *Tally) uses(keys []int32, n int) []report.DestinationUse {
	slices.SortFunc(keys, func(i, j int32) int {
		a, b := &t.keys[i], &t.keys[j]
		if a.count != b.count {
			return cmp.Compare(b.count, a.count)
		}
		if c := strings.Compare(t.sandboxes[a.sandbox], t.sandboxes[b.sandbox]); c != 0 {
			return c
		}
		if c := strings.Compare(t.hosts[a.host], t.hosts[b.host]); c != 0 {
			return c
		}
		return cmp.Compare(a.port, b.port)
	})
	out := make([]report.DestinationUse, 0, min(len(keys), n))
	for _, k := range keys[:min(len(keys), n)] {
		out = append(out, destUse(t.entry(&t.keys[k])))
	}
	return out
}

func destUse(en entry) report.DestinationUse {
	d := report.DestinationUse{Sandbox: en.sandbox, Host: en.host, Port: en.port, Count: en.count}
	if en.first != 0 {
		d.First, d.Last = time.UnixMilli(en.first).UTC(), time.UnixMilli(en.last).UTC()
	}
	return d
}

func proxyAddr(proxy string) (string, int) {
	if proxy == "" {
		return "", 0
	}
	u, err := url.Parse(proxy)
	if err != nil {
		return "", 0
	}
	port, _ := strconv.Atoi(u.Port())
	return strings.ToLower(u.Hostname()), port
}

// HostPort renders a destination.
func HostPort(host string, port int) string {
	if port == 0 {
		return host
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

func days(d time.Duration) string {
	n := d.Hours() / 24
	if n < 1 {
		return strconv.FormatFloat(d.Hours(), 'f', 1, 64) + " hours"
	}
	if n < 10 {
		return strconv.FormatFloat(n, 'f', 1, 64) + " days"
	}
	return strconv.Itoa(int(n)) + " days"
}

// judgeUse is an allowance's egress.allowance-unused finding. The window is
// the record's own (its first to its last line), never the clock's: an
// allowance unused in two days of log is not "unused for 30 days".
func judgeUse(a *report.AllowanceUsage, u *report.EgressUsage, unusedDays int) report.Finding {
	subject := HostPort(a.Host, a.Port)
	f := report.Finding{Check: CheckUnused, Target: "policy", Subject: subject,
		Expected: fmt.Sprintf("a request through this allowance in the last %d days of the record", unusedDays)}
	need := time.Duration(unusedDays) * 24 * time.Hour
	window := u.To.Sub(u.From)
	reason := fmt.Sprintf("remove spec.egress.allow[%d] (%s)? the reason says %q", a.Index, subject, a.Reason)
	evidence := usageEvidence(a, u)
	switch {
	case a.Requests > 0 && u.To.Sub(a.LastUse) <= need:
		f.Status, f.Actual = report.Pass, fmt.Sprintf("%d requests, last %s", a.Requests, a.LastUse.Format(time.RFC3339))
	case a.Requests > 0:
		f.Status = report.Fail
		f.Actual = fmt.Sprintf("last used %s, %s before the record ends (%s)", a.LastUse.Format(time.RFC3339), days(u.To.Sub(a.LastUse)), u.To.Format(time.RFC3339))
		f.Fix = reason
	case u.From.IsZero() || window < need:
		f.Status = report.Inconclusive
		f.Actual = fmt.Sprintf("no request in the %s the record covers; %d days are needed to call it unused", days(window), unusedDays)
		f.Fix = "read a record that covers --unused-days (older rotated logs too), or lower --unused-days"
	default:
		f.Status = report.Fail
		f.Actual = fmt.Sprintf("no request in the %s the record covers (%s to %s)", days(window), u.From.Format(time.RFC3339), u.To.Format(time.RFC3339))
		f.Fix = reason
	}
	if a.Denied > 0 {
		evidence += fmt.Sprintf("; the proxy denied %d attempts to it: its own allow-list lacks what the policy allows", a.Denied)
	}
	f.Evidence = evidence
	a.Verdict, a.Note = f.Status, f.Actual
	return f
}

func usageEvidence(a *report.AllowanceUsage, u *report.EgressUsage) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests", a.Requests)
	if a.BytesOut >= 0 || a.BytesIn >= 0 {
		fmt.Fprintf(&b, ", %s out, %s in", bytesText(a.BytesOut), bytesText(a.BytesIn))
	}
	if a.SandboxCount > 0 {
		fmt.Fprintf(&b, ", by %d sandboxes (%s)", a.SandboxCount, strings.Join(a.Sandboxes, ", "))
	}
	if u.ProbeRecords > 0 {
		fmt.Fprintf(&b, "; the probe's own %d attempts left out", u.ProbeRecords)
	}
	if u.Unmarked {
		b.WriteString("; this record keeps no User-Agent or proxy user, so the probe's own attempts are counted")
	}
	return b.String()
}

func bytesText(n int64) string {
	if n < 0 {
		return "? bytes"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// wouldBlockFindings are the audit stage's findings: one per sandbox and
// destination it reached that the declared policy does not allow (the most
// frequent first, at most max, then one that counts the rest), or one
// pass that says nothing would be.
func wouldBlockFindings(list []report.DestinationUse, total int, u *report.EgressUsage, max int) []report.Finding {
	if total == 0 {
		st, actual := report.Pass, "every destination a sandbox reached is allowed by the declared policy"
		if u.From.IsZero() {
			st, actual = report.Inconclusive, "the record holds no attempt a sandbox made"
		}
		return []report.Finding{{Check: CheckWouldBlock, Target: "policy", Status: st,
			Expected: "nothing the sandboxes reach is blocked by the declared policy", Actual: actual,
			Evidence: fmt.Sprintf("the record from %s to %s", u.From.Format(time.RFC3339), u.To.Format(time.RFC3339))}}
	}
	var fs []report.Finding
	for i, d := range list {
		if i == max {
			fs = append(fs, report.Finding{Check: CheckWouldBlock, Target: "policy", Subject: "(more)", Status: report.Fail,
				Expected: "nothing the sandboxes reach is blocked", Actual: fmt.Sprintf("%d more (sandbox, destination) pairs would be blocked", total-max),
				Fix: "see the JSON report's egressUsage.wouldBlock"})
			break
		}
		fs = append(fs, report.Finding{Check: CheckWouldBlock, Target: "sandbox/" + d.Sandbox, Subject: HostPort(d.Host, d.Port), Status: report.Fail,
			Expected: "allowed by the declared policy",
			Actual:   fmt.Sprintf("reached %d times from %s to %s; no allowance covers it, so enforcing the policy blocks it", d.Count, d.First.Format(time.RFC3339), d.Last.Format(time.RFC3339)),
			Fix:      fmt.Sprintf("add an allowance for %s with its reason if %s needs it, or accept that it loses it", HostPort(d.Host, d.Port), d.Sandbox)})
	}
	return fs
}
