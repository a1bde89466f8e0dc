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
	rank := t.ranks()
	u.Denied = t.uses(denied, opt.MaxListed, rank)
	u.WouldBlock = t.uses(wouldBlock, max(opt.MaxListed, opt.MaxFindings+1), rank)

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

// judgement is what one Judge call reads the tally with: the allowances
// and their host rules, the allowed path to the proxy and the resolver,
// and which sandboxes used each allowance.
type judgement struct {
	allow     []policy.Allowance
	rules     []policy.HostRule
	proxyHost string
	proxyPort int
	paths     []netip.Prefix
	sandboxes []map[string]bool
	// What allowanceOf and onPath said of a (host id, port) and a host id:
	// a record has few destinations and many keys.
	matchCache map[uint64]int
	pathCache  []int8 // 0 not asked, 1 on the path, -1 not
}

// newJudgement parses the allowances' rules and adds a usage row for each
// to u.
func newJudgement(e *policy.Egress, u *report.EgressUsage) *judgement {
	j := &judgement{allow: e.Allow, rules: make([]policy.HostRule, len(e.Allow)), sandboxes: make([]map[string]bool, len(e.Allow)), matchCache: map[uint64]int{}}
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

// onPath says whether host (the tally's host id) is an address of the
// proxy or the resolver.
func (j *judgement) onPath(host string, id uint32) bool {
	if int(id) >= len(j.pathCache) {
		j.pathCache = append(j.pathCache, make([]int8, int(id)+1-len(j.pathCache))...)
	}
	if c := j.pathCache[id]; c != 0 {
		return c > 0
	}
	on := j.addressOnPath(host)
	j.pathCache[id] = -1
	if on {
		j.pathCache[id] = 1
	}
	return on
}

func (j *judgement) addressOnPath(host string) bool {
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
// (host the tally's host id) through (by its rule, or by one of its
// declared addresses), -1 if none.
func (j *judgement) allowanceOf(host string, id uint32, port int) int {
	k := uint64(id)<<16 | uint64(port)
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
	for k := range int32(t.keys.n) {
		en, host := t.entry(k), t.keys.at(k).host
		i := j.allowanceOf(en.host, host, en.port)
		switch en.decision {
		case egresslog.Allowed:
			if i < 0 {
				if en.host == j.proxyHost && (j.proxyPort == 0 || en.port == j.proxyPort) || j.onPath(en.host, host) {
					continue // the way to the proxy or the resolver (a flow record): the allowed path
				}
				wouldBlock = append(wouldBlock, k)
				continue
			}
			j.used(&u.Allowances[i], i, en)
		case egresslog.Denied:
			if i >= 0 {
				u.Allowances[i].Denied += en.count
			}
			denied = append(denied, k)
		}
	}
	return denied, wouldBlock
}

// used adds an allowed entry to allowance i's usage a.
func (j *judgement) used(a *report.AllowanceUsage, i int, en entry) {
	a.Requests += en.count
	a.BytesOut = addBytes(a.BytesOut, en.bytesOut)
	a.BytesIn = addBytes(a.BytesIn, en.bytesIn)
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
// sandbox, host and port, and returns the first n as report rows. The
// sort compares integers: each key's count and its names' ranks in name
// order, in an array of its own (the same order as comparing the names).
func (t *Tally) uses(keys []int32, n int, rank *nameRanks) []report.DestinationUse {
	type useKey struct {
		count         int64
		sandbox, host uint32 // ranks
		port          uint16
		key           int32
	}
	order := make([]useKey, len(keys))
	for i, k := range keys {
		s := t.keys.at(k)
		order[i] = useKey{t.keys.stats(k).count, rank.sandboxes[s.sandbox], rank.hosts[s.host], s.port, k}
	}
	order = firstSorted(order, n, func(a, b useKey) int {
		if a.count != b.count {
			return cmp.Compare(b.count, a.count)
		}
		if a.sandbox != b.sandbox {
			return cmp.Compare(a.sandbox, b.sandbox)
		}
		if a.host != b.host {
			return cmp.Compare(a.host, b.host)
		}
		return cmp.Compare(a.port, b.port)
	})
	out := make([]report.DestinationUse, 0, min(len(keys), n))
	for _, o := range order {
		out = append(out, destUse(t.entry(o.key)))
	}
	return out
}

// firstSorted returns the first n of list in the total order cmp, sorted,
// reusing list: a heap of the n best so far keeps the rest from being
// sorted (tens of thousands of denied keys, of which a thousand are listed).
func firstSorted[T any](list []T, n int, cmp func(a, b T) int) []T {
	if len(list) <= n {
		slices.SortFunc(list, cmp)
		return list
	}
	if n <= 0 {
		return list[:0]
	}
	// best is a heap whose root is the last of the n best so far.
	best := list[:n]
	down := func(i int) {
		for {
			c := 2*i + 1
			if c >= n {
				return
			}
			if c+1 < n && cmp(best[c+1], best[c]) > 0 {
				c++
			}
			if cmp(best[c], best[i]) <= 0 {
				return
			}
			best[i], best[c] = best[c], best[i]
			i = c
		}
	}
	for i := n/2 - 1; i >= 0; i-- {
		down(i)
	}
	for _, x := range list[n:] {
		if cmp(x, best[0]) < 0 {
			best[0] = x
			down(0)
		}
	}
	slices.SortFunc(best, cmp)
	return best
}

// nameRanks is each sandbox's and host's place in name order, by id.
type nameRanks struct{ sandboxes, hosts []uint32 }

func (t *Tally) ranks() *nameRanks {
	rank := func(names []string) []uint32 {
		ids := make([]uint32, len(names))
		for i := range ids {
			ids[i] = uint32(i)
		}
		slices.SortFunc(ids, func(a, b uint32) int { return strings.Compare(names[a], names[b]) })
		r := make([]uint32, len(names))
		for place, id := range ids {
			r[id] = uint32(place)
		}
		return r
	}
	return &nameRanks{rank(t.sandboxes), rank(t.hosts)}
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
