// Package page renders the egress page people read: every allowance of the
// policy with its reason next to what the last run saw of it, every
// must-fail destination with its verdict and whether the deny was proven,
// the DNS and metadata results, drift grouped by object, and, under
// `serve`, the verdicts of the last runs, so a reopened host shows as a
// change over time. One self-contained HTML document (server-side
// html/template, inline CSS, no script, no external asset), readable
// without colour: every status is a word.
package page

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

//go:embed page.html.tmpl
var pageSource string

// ContentSecurityPolicy is what serve sends with the page: nothing but the
// page itself and its inline style may load, so even a value that slipped
// through escaping could not make the browser call anybody.
const ContentSecurityPolicy = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Page is what one rendering shows.
type Page struct {
	Policy *policy.Policy // the policy the run checked: allowances and reasons
	Run    report.Run
	// History, under serve, holds the last runs, Run among them (the
	// newest); nil for a one-shot run.
	History *History
	// Served adds the links to serve's other endpoints.
	Served bool
	// Now is when the page is rendered (ages are measured from it).
	Now time.Time
}

// Write renders the page.
func Write(w io.Writer, pg Page) error {
	t, err := parse()
	if err != nil {
		return err
	}
	var buf bytes.Buffer // a template error must not leave half a page behind
	if err := t.Execute(&buf, build(pg)); err != nil {
		return fmt.Errorf("render the egress page: %w", err)
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// WriteFile renders the page to a file atomically.
func WriteFile(path string, pg Page) error {
	return report.WriteFileAtomic(path, func(w io.Writer) error { return Write(w, pg) })
}

// Pending is the page serve shows before its first run has finished.
func Pending(w io.Writer, policyName string, since time.Time) error {
	t, err := parse()
	if err != nil {
		return err
	}
	return t.ExecuteTemplate(w, "pending", map[string]string{"Policy": policyName, "Since": stamp(since)})
}

func parse() (*template.Template, error) {
	t, err := template.New("page").Funcs(template.FuncMap{"join": strings.Join, "dict": dict}).Parse(pageSource)
	if err != nil {
		return nil, fmt.Errorf("parse the egress page template: %w", err)
	}
	return t, nil
}

// dict builds a template's argument from key, value pairs.
func dict(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, fmt.Errorf("dict: odd number of arguments")
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			return nil, fmt.Errorf("dict: key %v is not a string", kv[i])
		}
		m[k] = kv[i+1]
	}
	return m, nil
}

// The view: what the template shows, computed here so the template only
// lays it out.
type view struct {
	Policy, Backend, Version, Started, Duration, Generated string
	StartedRFC                                             string // the run's start, exactly, for scripts
	Result                                                 status
	Counts                                                 report.Counts
	Served, Multi                                          bool
	Probes                                                 []string // the probe targets (not drift objects)
	Proxy                                                  string
	HistoryRuns                                            int
	HistoryText                                            string // "3 runs"
	Attention                                              []row
	Changes                                                []change
	Allowed                                                []row
	MustFail, Metadata, Bypass, DNS                        []row
	Drift                                                  []driftGroup
	Other                                                  []row
	OtherPassed                                            int
	Notes                                                  []string
	Usage                                                  *usageView // the proxy's record, when the run read one (usage.go)
}

// status is a status as a word and its CSS class.
type status struct{ Word, Class string }

func statusOf(s report.Status) status {
	switch s {
	case report.Pass:
		return status{"PASS", "pass"}
	case report.Fail:
		return status{"FAIL", "fail"}
	case report.Skip:
		return status{"SKIP", "skip"}
	case report.Inconclusive:
		return status{"INCONCLUSIVE", "inconclusive"}
	}
	return status{"ERROR", "error"}
}

// row is one line of a table: one finding, with what the policy says of its
// subject and, under serve, its history.
type row struct {
	ID                             string // a stable anchor: the check, target and subject
	Check, Target, Subject, Status string
	Severity                       string // the check's: critical, high, medium, low
	S                              status
	Host, Port, Reason             string
	Class, Latency, Path, When     string
	StoppedBy, Deny, Control       string
	Expected, Actual, Fix          string
	Evidence                       []string
	History                        []histCell
	Since                          string
	Use                            *allowanceUse // what the proxy's record shows of an allowance
	allowance                      int           // spec.egress.allow index + 1 of an allowed row; 0 for none
	role                           report.Role   // the finding's check's
}

type histCell struct{ Letter, Class, Title string }

type change struct {
	Row      row
	From, To status
	At       string
}

type driftGroup struct {
	Object   string
	S        status
	Findings []row
	Passed   int
}

// PassedText is "1 rule passes", "3 rules pass".
func (g driftGroup) PassedText() string {
	if g.Passed == 1 {
		return "1 rule passes"
	}
	return strconv.Itoa(g.Passed) + " rules pass"
}

func build(pg Page) view {
	run := pg.Run
	v := view{
		Policy: run.Policy, Backend: run.Backend, Version: run.Version,
		Started: stamp(run.StartedAt), Duration: seconds(run.Seconds), Generated: stamp(pg.Now),
		Counts: run.Counts(), Served: pg.Served, Notes: run.Notes,
		StartedRFC: run.StartedAt.UTC().Format(time.RFC3339Nano),
	}
	switch run.ExitCode() {
	case report.ExitOK:
		v.Result = status{"CONFORMANT", "pass"}
	case report.ExitNonConformant:
		v.Result = status{"NOT CONFORMANT", "fail"}
	default:
		v.Result = status{"COULD NOT RUN", "error"}
	}
	var egress policy.Egress
	if pg.Policy != nil {
		egress = pg.Policy.Spec.Egress
		if v.Policy == "" {
			v.Policy = pg.Policy.Metadata.Name
		}
	}
	v.Proxy = egress.Proxy
	v.Probes = probeTargets(run)
	v.Multi = len(v.Probes) > 1
	reasons := reasonsOf(egress)
	hist := newHistView(pg.History)
	v.HistoryRuns = hist.runs()
	v.HistoryText = plural(v.HistoryRuns, "run")
	mk := func(f report.Finding) row { return hist.annotate(makeRow(run, f, reasons, egress.Proxy)) }

	seen := map[key]bool{}
	for _, f := range run.Findings {
		r := mk(f)
		switch f.Role {
		case report.RoleAllowance:
			// Listed below, in the policy's order.
		case report.RoleMustFail:
			v.MustFail = append(v.MustFail, r)
		case report.RoleMetadata:
			v.Metadata = append(v.Metadata, r)
		case report.RoleProxyBypass, report.RoleFronting:
			v.Bypass = append(v.Bypass, r) // around the proxy: beside it, or through it under another name
		case report.RoleDNSChannel, report.RoleDNSBypass:
			v.DNS = append(v.DNS, r)
		default:
			if isDrift(f.Check) {
				// Grouped by object below, and listed above when it fails
				// (the header's verdict counts it).
				if needsAttention(f) {
					v.Attention = append(v.Attention, r)
				}
				continue
			}
			if f.Status == report.Pass {
				v.OtherPassed++
			}
			v.Other = append(v.Other, r)
		}
		if needsAttention(f) {
			v.Attention = append(v.Attention, r)
		}
		seen[keyOf(f)] = true
	}
	sort.SliceStable(v.Attention, func(i, j int) bool { return attentionBefore(v.Attention[i], v.Attention[j]) })
	v.Allowed = allowedRows(run, egress, reasons, hist)
	v.Usage = usageOf(run.EgressUsage, v.Allowed)
	v.Drift = driftGroups(run, reasons, hist)
	v.Changes = hist.changes(run, func(f report.Finding) row { return mk(f) })
	return v
}

// probeTargets are the targets with no drift finding: where probes ran.
// One pass for the targets with a drift finding (a scan per target was
// quadratic: minutes for the page of a 10,000-pod drift -f).
func probeTargets(run report.Run) []string {
	drifted := map[string]bool{}
	for _, f := range run.Findings {
		if isDrift(f.Check) {
			drifted[f.Target] = true
		}
	}
	var out []string
	for _, t := range report.Targets(run.Findings) {
		if !drifted[t] {
			out = append(out, t)
		}
	}
	return out
}

// needsAttention: a failure, an error, or what could not be proven.
func needsAttention(f report.Finding) bool {
	return f.Status == report.Fail || f.Status == report.Error || f.Status == report.Inconclusive
}

// attentionBefore orders Needs attention: the failures before what could
// not be checked or proven, the worst severity first among each, then by
// attentionOrder (a reopened destination first).
func attentionBefore(a, b row) bool {
	if fa, fb := a.S.Class == "fail", b.S.Class == "fail"; fa != fb {
		return fa
	}
	if ra, rb := report.Severity(a.Severity).Rank(), report.Severity(b.Severity).Rank(); ra != rb {
		return ra < rb
	}
	return attentionOrder(a) < attentionOrder(b)
}

// attentionOrder puts what reopened first (a must-fail that answered), then
// the other failures, then errors, then what could not be proven.
func attentionOrder(r row) int {
	egress := report.Area(r.Check) == "egress"
	switch {
	case r.S.Class == "fail" && egress && r.role != report.RoleAllowance:
		return 0
	case r.S.Class == "fail" && egress:
		return 1
	case r.S.Class == "fail":
		return 2
	case r.S.Class == "error":
		return 3
	}
	return 4
}

func isDrift(check string) bool {
	return strings.HasPrefix(check, "drift.") || strings.HasPrefix(check, "admission.")
}

// makeRow turns a finding into a row, with the reason the policy gives for
// its subject.
func makeRow(run report.Run, f report.Finding, reasons map[string]string, proxy string) row {
	r := row{
		ID:    anchor(f),
		Check: f.Check, Target: f.Target, Subject: f.Subject, Status: string(f.Status), Severity: string(f.Severity), S: statusOf(f.Status),
		Class: f.Class, Expected: f.Expected, Actual: f.Actual, Fix: f.Fix,
		Reason: reasons[reasonKey(f.Role, f.Subject)], role: f.Role,
	}
	if r.Reason == "" {
		r.Reason = roleReason(f.Role)
	}
	if f.Evidence != "" {
		r.Evidence = append(r.Evidence, f.Evidence)
	}
	if a := f.Attempt; a != nil {
		r.Evidence = append(r.Evidence, a.Lines()...)
		if a.Attempted {
			r.Latency = latency(a.Waited)
			r.When = clock(run.StartedAt.Add(time.Duration(a.Started * float64(time.Second))))
		} else {
			r.Latency = "not attempted"
		}
		r.StoppedBy = a.StoppedBy
		if a.ProxyStatus != "" {
			r.StoppedBy = strings.TrimSpace(r.StoppedBy + " (" + a.ProxyStatus + ")")
		}
		if a.Rcode != "" && r.StoppedBy == report.StoppedByResolver {
			r.StoppedBy += " (" + a.Rcode + ")"
		}
	} else if f.Seconds > 0 {
		r.Latency = latency(f.Seconds)
	}
	r.Deny, r.Control = f.Deny, f.Control
	switch {
	case strings.HasSuffix(f.Subject, " via proxy"):
		r.Path = "via proxy"
	case strings.HasSuffix(f.Subject, " direct"):
		r.Path = "direct (around the proxy)"
	case report.Area(f.Check) == "egress" && f.Role != report.RoleDNSChannel:
		r.Path = "direct"
	}
	return r
}

// Judged says whether the row's verdict is a deny the control judges
// (its check's role), not the resolver's own answer: what the DNS table
// shows in its deny column.
func (r row) Judged() bool { return r.role.Deny() }

// anchor is a stable element id for a finding.
func anchor(f report.Finding) string {
	var b strings.Builder
	for _, r := range f.Check + "--" + f.Target + "--" + f.Subject {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// allowedRows lists every allowance of the policy, in its order, per probe
// target, with the verdict of its egress.allowed finding; an allowance no
// finding speaks of says so instead of vanishing.
func allowedRows(run report.Run, e policy.Egress, reasons map[string]string, hist *histView) []row {
	byKey := map[string][]report.Finding{} // subject -> findings (one per target)
	for _, f := range run.Findings {
		if f.Role == report.RoleAllowance {
			byKey[f.Subject] = append(byKey[f.Subject], f)
		}
	}
	var out []row
	used := map[string]bool{}
	for i, a := range e.Allow {
		subjects := []string{allowedSubject(a, e.Proxy != ""), hostPort(a.Host, a.Port)}
		var fs []report.Finding
		for _, s := range subjects {
			if len(byKey[s]) > 0 && !used[s] {
				fs, used[s] = byKey[s], true
				break
			}
		}
		if len(fs) == 0 {
			r := row{
				ID: "allowed-" + anchor(report.Finding{Subject: subjects[0]}), Check: "egress.allowed", Subject: subjects[0], role: report.RoleAllowance,
				S: status{"NO VERDICT", "error"}, Status: "none", Actual: "this run holds no verdict for this allowance (a run without network checks, or a probe that did not report)",
			}
			r.Host, r.Port, r.Reason = a.Host, strconv.Itoa(a.Port), a.Reason
			r.allowance = i + 1
			out = append(out, r)
			continue
		}
		for _, f := range fs {
			r := hist.annotate(makeRow(run, f, reasons, e.Proxy))
			r.Host, r.Port, r.Reason = a.Host, strconv.Itoa(a.Port), a.Reason
			r.allowance = i + 1
			if a.Probe != "" {
				r.Host = a.Host + " (probed as " + a.Probe + ")"
			}
			out = append(out, r)
		}
	}
	// Findings for allowances the policy no longer names (a page rendered
	// with another policy than the run's) still show.
	for _, f := range run.Findings {
		if f.Role == report.RoleAllowance && !used[f.Subject] {
			out = append(out, hist.annotate(makeRow(run, f, reasons, e.Proxy)))
		}
	}
	return out
}

// allowedSubject is the subject the probe gives an allowance's finding
// (probes.PlanEgress): the probed name and port, "via proxy" with a proxy.
func allowedSubject(a policy.Allowance, proxy bool) string {
	name := a.Host
	if a.Probe != "" {
		name = a.Probe
	}
	s := hostPort(name, a.Port)
	if proxy {
		s += " via proxy"
	}
	return s
}

// roleReason says why the policy asks for a check whose subjects it does
// not list one by one, by the check's role.
func roleReason(role report.Role) string {
	switch role {
	case report.RoleDNSChannel:
		return "names outside the allow-list must not resolve: a resolver that answers them carries data out (spec.egress.dns)"
	case report.RoleDNSBypass:
		return "a resolver other than the sandbox's own must not answer: DNS would go around it (spec.egress.dns.outsideResolvers)"
	case report.RoleMetadata:
		return "a cloud metadata address: it hands out the node's credentials (spec.egress.metadata)"
	case report.RoleProxyBypass:
		return "an allowed host, dialled around the proxy: only the proxy may reach it"
	case report.RoleFronting:
		return "domain fronting: a tunnel the proxy opened for an allowed host must not carry a ClientHello for another name"
	}
	return ""
}

// reasonKey keys what the policy says of a destination by the role of the
// check that dialled it, not by the check's ID: any check of the role
// whose subject names the destination shows the policy's reason.
func reasonKey(role report.Role, subject string) string { return string(role) + " " + subject }

// reasonsOf maps a role and a subject (reasonKey) to what the policy says
// of the destination.
func reasonsOf(e policy.Egress) map[string]string {
	out := map[string]string{}
	for _, a := range e.Allow {
		s := allowedSubject(a, e.Proxy != "")
		out[reasonKey(report.RoleAllowance, s)] = a.Reason
		out[reasonKey(report.RoleAllowance, hostPort(a.Host, a.Port))] = a.Reason
		name := a.Host
		if a.Probe != "" {
			name = a.Probe
		}
		out[reasonKey(report.RoleProxyBypass, hostPort(name, a.Port)+" direct")] = "allowed only through the proxy: " + a.Reason
	}
	mustFail := func(list []policy.Target, path string) {
		for i, t := range list {
			d, err := policy.ParseDestination(t.Target)
			if err != nil {
				continue
			}
			port := t.Port
			if port == 0 {
				port = d.Port
			}
			if port == 0 {
				port = policy.DefaultMustFailPort
			}
			reason := t.Reason
			if reason == "" {
				reason = fmt.Sprintf("must fail (%s[%d]: %s)", path, i, t.Target)
			}
			if t.Expect != "" {
				reason += "; expected " + t.Expect
			}
			s := hostPort(d.DialHost(), port)
			out[reasonKey(report.RoleMustFail, s)] = reason
			out[reasonKey(report.RoleMustFail, s+" via proxy")] = reason + "; the proxy must refuse it"
		}
	}
	mustFail(e.MustFail.Hosts, "spec.egress.mustFail.hosts")
	mustFail(e.MustFail.IPs, "spec.egress.mustFail.ips")
	for _, addr := range e.Metadata.Addresses {
		for _, port := range e.Metadata.Ports {
			s := hostPort(addr, port)
			out[reasonKey(report.RoleMetadata, s)] = "a cloud metadata address: credentials of the node"
			out[reasonKey(report.RoleMetadata, s+" via proxy")] = "a cloud metadata address; the proxy must refuse it"
		}
	}
	return out
}

// driftGroups groups drift findings by object, worst object first; passes
// are counted, not listed.
func driftGroups(run report.Run, reasons map[string]string, hist *histView) []driftGroup {
	idx := map[string]int{}
	var out []driftGroup
	for _, f := range run.Findings {
		if !isDrift(f.Check) {
			continue
		}
		obj := f.Target
		if obj == "" {
			obj = "(the run)"
		}
		i, ok := idx[obj]
		if !ok {
			i = len(out)
			idx[obj] = i
			out = append(out, driftGroup{Object: obj, S: statusOf(report.Pass)})
		}
		g := &out[i]
		if rank(f.Status) > rank(statusStatus(g.S)) {
			g.S = statusOf(f.Status)
		}
		if f.Status == report.Pass {
			g.Passed++
			continue
		}
		g.Findings = append(g.Findings, hist.annotate(makeRow(run, f, reasons, "")))
	}
	sort.SliceStable(out, func(i, j int) bool { return rank(statusStatus(out[i].S)) > rank(statusStatus(out[j].S)) })
	return out
}

func statusStatus(s status) report.Status {
	switch s.Class {
	case "pass":
		return report.Pass
	case "fail":
		return report.Fail
	case "skip":
		return report.Skip
	case "inconclusive":
		return report.Inconclusive
	}
	return report.Error
}

func hostPort(host string, port int) string {
	if port == 0 {
		return host
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func clock(t time.Time) string { return t.UTC().Format("15:04:05Z") }

func seconds(s float64) string { return strconv.FormatFloat(s, 'f', 2, 64) + " s" }

func latency(s float64) string {
	if s < 1 {
		return strconv.FormatFloat(s*1000, 'f', 0, 64) + " ms"
	}
	return seconds(s)
}

// histView answers, for one render, the history of each row.
type histView struct{ snaps []snapshot }

func newHistView(h *History) *histView {
	if h == nil {
		return &histView{}
	}
	return &histView{snaps: h.snapshots()}
}

func (h *histView) runs() int { return len(h.snaps) }

// annotate adds the row's verdicts over the kept runs, oldest first, and
// how long its current verdict has held.
func (h *histView) annotate(r row) row {
	if len(h.snaps) == 0 || r.Status == "none" {
		return r
	}
	k := key{r.Target, r.Check, r.Subject}
	for _, s := range h.snaps {
		v, ok := s.verdicts[k]
		if !ok {
			r.History = append(r.History, histCell{Letter: "·", Class: "none", Title: clock(s.started) + ": not checked"})
			continue
		}
		st := statusOf(v.status)
		title := clock(s.started) + ": " + st.Word
		if v.class != "" {
			title += " (" + v.class + ")"
		}
		r.History = append(r.History, histCell{Letter: st.Word[:1], Class: st.Class, Title: title})
	}
	r.Since = h.since(k)
	return r
}

// since says how long the newest verdict has held and what came before:
// "FAIL since 10:32:05Z (2 runs); PASS in the 8 runs before".
func (h *histView) since(k key) string {
	n := len(h.snaps)
	cur, ok := h.snaps[n-1].verdicts[k]
	if !ok {
		return ""
	}
	i := h.streakStart(k, n-1, cur.status)
	word := statusOf(cur.status).Word
	if i == 0 {
		return fmt.Sprintf("%s in all %s since %s", word, plural(n, "run"), clock(h.snaps[0].started))
	}
	text := fmt.Sprintf("%s since %s (%s)", word, clock(h.snaps[i].started), plural(n-i, "run"))
	prev, ok := h.snaps[i-1].verdicts[k]
	if !ok {
		return text + "; not checked before"
	}
	j := h.streakStart(k, i-1, prev.status)
	return text + fmt.Sprintf("; %s in the %s before", statusOf(prev.status).Word, plural(i-j, "run"))
}

// streakStart is the first run of the streak of runs, ending at run end,
// in which k had status st.
func (h *histView) streakStart(k key, end int, st report.Status) int {
	i := end
	for i > 0 {
		v, ok := h.snaps[i-1].verdicts[k]
		if !ok || v.status != st {
			break
		}
		i--
	}
	return i
}

// changes lists the rows whose verdict changed between the two newest runs,
// worst change first.
func (h *histView) changes(run report.Run, mk func(report.Finding) row) []change {
	n := len(h.snaps)
	if n < 2 {
		return nil
	}
	prev, cur := h.snaps[n-2], h.snaps[n-1]
	var out []change
	for _, f := range run.Findings {
		k := keyOf(f)
		c, ok1 := cur.verdicts[k]
		p, ok2 := prev.verdicts[k]
		if !ok1 || !ok2 || c.status == p.status {
			continue
		}
		out = append(out, change{Row: mk(f), From: statusOf(p.status), To: statusOf(c.status), At: stamp(cur.started)})
	}
	sort.SliceStable(out, func(i, j int) bool {
		return rank(statusStatus(out[i].To))-rank(statusStatus(out[i].From)) > rank(statusStatus(out[j].To))-rank(statusStatus(out[j].From))
	})
	return slices.Clip(out)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}
