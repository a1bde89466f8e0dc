package audit

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandprobe/sandprobe/egresslog"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// CheckTrail is the check ID of the audit trail: every attempt the probe
// made through the proxy is in the proxy's own record, with the decision
// the probe saw.
const CheckTrail = "egress.audit-trail"

// TrailProves and TrailFix describe the check for the catalogue.
const (
	TrailProves = "every attempt the probe made through the proxy is in the proxy's own record (read after the run: --proxy-log), found by the run's nonce where the record keeps the User-Agent and by destination, method and time where it does not, with the decision the probe saw; a must-fail destination the record shows allowed fails, naming it; a record that cannot be read, or was rotated during the run, is inconclusive"
	TrailFix    = "turn the proxy's access log on and keep it where sandprobe reads it (Squid: access_log with the sandprobe logformat or combined; tinyproxy: LogLevel Connect or finer), and find out why the proxy did not write down what it did"
)

// TrailAttempt is one attempt the probe made through the proxy.
type TrailAttempt struct {
	Target, Subject string
	Method          string // CONNECT or GET; "" when the probe's evidence does not say
	Host            string
	Port            int
	// Saw is the decision the probe saw: Denied (the proxy's deny status,
	// or its refusal inside a bumped tunnel), Allowed (a tunnel, an answer,
	// an upstream failure the proxy let through).
	Saw      egresslog.Decision
	MustFail bool
	Status   string // the proxy's answer as the probe saw it
}

// TrailAttempts lists the attempts of a run that went through the proxy
// and got a decision from it (an attempt that never reached the proxy has
// nothing to be found).
func TrailAttempts(run report.Run, denyStatus []int) []TrailAttempt {
	var out []TrailAttempt
	for _, f := range run.Findings {
		a := f.Attempt
		if a == nil || !a.Attempted || a.ProxyStatus == "" || !strings.HasPrefix(f.Check, "egress.") {
			continue
		}
		// The destination is the subject's ("host:port via proxy"); the
		// method and the proxy's code are in the status, "CONNECT
		// host:443 → 403 Filtered", or only "403 Filtered" for a refusal.
		dest, _, _ := strings.Cut(f.Subject, " ")
		d, err := policy.ParseDestination(dest)
		if err != nil || !strings.HasSuffix(f.Subject, " via proxy") {
			continue
		}
		method, answer := "", a.ProxyStatus
		if m, rest, ok := strings.Cut(a.ProxyStatus, " → "); ok {
			method, _, _ = strings.Cut(m, " ")
			answer = rest
		}
		code, _ := strconv.Atoi(strings.SplitN(answer, " ", 2)[0])
		t := TrailAttempt{Target: f.Target, Subject: f.Subject, Method: method, Host: strings.ToLower(d.DialHost()), Port: d.Port, Status: a.ProxyStatus,
			MustFail: f.Role.MustStayClosed()}
		switch {
		case f.Class == policy.VerdictProxyDenied || contains(denyStatus, code):
			t.Saw = egresslog.Denied
		case code >= 200:
			t.Saw = egresslog.Allowed
		default:
			continue
		}
		out = append(out, t)
	}
	return out
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// TrailRecord is a record kept for the trail (copied out of the scan).
type TrailRecord struct {
	Time     time.Time
	Client   string
	Method   string
	Host     string
	Port     int
	Decision egresslog.Decision
	Agent    string
	User     string
	Line     string
	LineNo   int64
	used     bool
}

// TrailSink keeps the records whose destination is one of the attempts'
// (a few of the record's lines), for Trail. One per scanning worker;
// Records merges them in line order.
type TrailSink struct {
	hosts map[string]bool
	recs  []TrailRecord
}

// NewTrailSinks returns a maker of sinks that keep the attempts' hosts.
func NewTrailSinks(attempts []TrailAttempt) func() *TrailSink {
	hosts := map[string]bool{}
	for _, a := range attempts {
		hosts[a.Host] = true
	}
	return func() *TrailSink { return &TrailSink{hosts: hosts} }
}

// Add keeps a record for one of the attempts' hosts.
func (s *TrailSink) Add(r *egresslog.Record) {
	h := string(appendHost(nil, r.Host))
	if !s.hosts[h] {
		return
	}
	s.recs = append(s.recs, TrailRecord{Time: time.UnixMilli(r.Time).UTC(), Client: string(r.Client), Method: string(r.Method), Host: h, Port: r.Port,
		Decision: r.Decision, Agent: string(r.Agent), User: string(r.User), Line: string(r.Line), LineNo: r.LineNo})
}

// TrailRecords merges the sinks' records in line order.
func TrailRecords(sinks []*TrailSink) []TrailRecord {
	var out []TrailRecord
	for _, s := range sinks {
		out = append(out, s.recs...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LineNo < out[j].LineNo })
	return out
}

// TrailOptions say what the record is matched on.
type TrailOptions struct {
	Nonce string
	// From and To bound the run: records outside (with a margin) are not
	// the run's.
	From, To time.Time
	// Client is the probe's address as the proxy sees it, when known.
	Client string
	// Source names the record ("/var/log/squid/access.log", "pod sandbox-system/egress-proxy").
	Source string
}

type matchBy int

const (
	byDestination matchBy = iota
	byMark
	byNonce
)

// trailMargin is how far outside the run a record may be stamped and still
// count (clock steps, a proxy that stamps the end of a long tunnel).
const trailMargin = 5 * time.Second

// Trail finds each attempt in the record and judges it. unreadable, when
// not nil, is why the record could not be read: every attempt is then
// inconclusive.
func Trail(attempts []TrailAttempt, recs []TrailRecord, opt TrailOptions, unreadable error) []report.Finding {
	var out []report.Finding
	if len(attempts) == 0 {
		return nil
	}
	// How the probe's records are told from others': by the run's nonce
	// when any record carries it; by the probe's mark (its User-Agent)
	// when the record keeps User-Agents at all — another sandbox's attempt
	// to the same host at the same time is not the probe's; else by
	// destination, method and time alone.
	by := byDestination
	for _, r := range recs {
		switch {
		case opt.Nonce != "" && (strings.Contains(r.Agent, opt.Nonce) || strings.Contains(r.User, opt.Nonce)):
			by = byNonce
		case by == byDestination && (r.Agent != "" || r.User != ""):
			by = byMark
		}
	}
	for _, a := range attempts {
		f := report.Finding{Check: CheckTrail, Target: a.Target, Subject: a.Subject,
			Expected: fmt.Sprintf("the proxy's record holds %s %s:%d %s, as the probe saw it", a.Method, a.Host, a.Port, a.Saw)}
		if unreadable != nil {
			f.Status = report.Inconclusive
			f.Actual = "the proxy's record could not be read: " + unreadable.Error()
			f.Fix = "keep the log where --proxy-log reads it, unrotated for the length of a run (or read the rotated file too)"
			out = append(out, f)
			continue
		}
		r := match(a, recs, opt, by)
		how := map[matchBy]string{byNonce: "by the run's nonce", byMark: "by the probe's User-Agent, destination and time (the record holds no nonce of this run)",
			byDestination: "by destination, method and time (the record keeps no User-Agent)"}[by]
		switch {
		case r == nil:
			f.Status = report.Fail
			f.Actual = fmt.Sprintf("no record of it in %s between %s and %s (matched %s); the probe saw %s", opt.Source, opt.From.Format(time.RFC3339), opt.To.Format(time.RFC3339), how, a.Status)
			f.Fix = TrailFix
		case a.MustFail && r.Decision == egresslog.Allowed:
			f.Status = report.Fail
			f.Actual = fmt.Sprintf("the proxy's record shows must-fail %s ALLOWED (the probe saw %s)", hostPortTrail(a), a.Status)
			f.Fix = fmt.Sprintf("the proxy let %s through: remove it from the proxy's allow-list; its own record says it was not denied", hostPortTrail(a))
		case r.Decision != a.Saw:
			f.Status = report.Fail
			f.Actual = fmt.Sprintf("the proxy's record says %s where the probe saw %s (%s)", r.Decision, a.Saw, a.Status)
			f.Fix = "the proxy's record and what it did disagree: the audit trail cannot be trusted for this destination"
		default:
			f.Status = report.Pass
			f.Actual = fmt.Sprintf("recorded %s, found %s", r.Decision, how)
		}
		if r != nil {
			f.Evidence = fmt.Sprintf("%s line %d: %s", opt.Source, r.LineNo, r.Line)
		}
		out = append(out, f)
	}
	return out
}

func hostPortTrail(a TrailAttempt) string { return HostPort(a.Host, a.Port) }

// match finds the record of one attempt and marks it used: the same host
// and port; the same method (a bumped GET https:// of a CONNECT counts);
// within the run; the run's nonce when the record keeps it, and the probe's
// address when known. A decided record wins over an undecided one (an
// ssl-bump step).
func match(a TrailAttempt, recs []TrailRecord, opt TrailOptions, by matchBy) *TrailRecord {
	var best *TrailRecord
	for i := range recs {
		r := &recs[i]
		if !recordOf(a, r, opt, by) {
			continue
		}
		if best == nil || best.Decision == egresslog.Unknown && r.Decision != egresslog.Unknown {
			best = r
		}
		if best.Decision != egresslog.Unknown {
			break
		}
	}
	if best != nil && best.Decision == egresslog.Unknown {
		best = decidingLine(a, recs, best)
	}
	if best != nil {
		best.used = true
		// The other lines of the same exchange (an ssl-bump step and its
		// bumped request) are not another attempt's.
		for i := range recs {
			r := &recs[i]
			if !r.used && r.Host == a.Host && r.Port == a.Port && r.Client == best.Client && abs(r.Time.Sub(best.Time)) < time.Second && (r.Decision == egresslog.Unknown || best.Decision == egresslog.Unknown) {
				r.used = true
			}
		}
	}
	return best
}

// recordOf says whether the unused record r can be attempt a's (match's
// rules, but for a decided record winning).
func recordOf(a TrailAttempt, r *TrailRecord, opt TrailOptions, by matchBy) bool {
	if r.used || r.Host != a.Host || r.Port != a.Port {
		return false
	}
	if a.Method != "" && r.Method != a.Method && !(a.Method == "CONNECT" && r.Method != "") {
		return false
	}
	if !opt.From.IsZero() && (r.Time.Before(opt.From.Add(-trailMargin)) || r.Time.After(opt.To.Add(trailMargin))) {
		return false
	}
	if by == byNonce && !strings.Contains(r.Agent, opt.Nonce) && !strings.Contains(r.User, opt.Nonce) {
		return false
	}
	if by == byMark && !ProbeMarked([]byte(r.Agent), []byte(r.User)) {
		return false
	}
	return opt.Client == "" || r.Client == "" || r.Client == opt.Client
}

// decidingLine is the line that decides an undecided best record, or best
// itself. Squid peeking at a tunnel it then splices writes the CONNECT
// twice: undecided, with the request's User-Agent, when it peeks;
// TCP_TUNNEL, without it, when the tunnel closes. The second line of the
// same exchange decides.
func decidingLine(a TrailAttempt, recs []TrailRecord, best *TrailRecord) *TrailRecord {
	for i := range recs {
		r := &recs[i]
		if !r.used && r != best && r.Decision != egresslog.Unknown && r.Host == a.Host && r.Port == a.Port && r.Method == best.Method &&
			r.Client == best.Client && abs(r.Time.Sub(best.Time)) < 2*time.Second && (r.Agent == "" || ProbeMarked([]byte(r.Agent), []byte(r.User))) {
			best.used = true
			return r
		}
	}
	return best
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
