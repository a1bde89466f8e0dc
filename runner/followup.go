package runner

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// The DNS-only follow-up. A must-fail host whose name the sandbox's own
// resolver stopped (NXDOMAIN, REFUSED) was never dialled: a DNS-only block
// is no network deny, since the address may be open from the sandbox, and
// such a verdict stays inconclusive. Where the control vantage resolved
// the name and got an answer, the addresses it resolved are what the
// sandbox must not reach: the runner has the sandbox dial them in a second,
// egress-only round, and the host's verdict rests on that dial, judged
// against the control like any other.

// FollowUp is the second round a run needs: the spec the probe runs with
// (its policy's must-fail hosts narrowed to the DNS-only ones, each with
// the control's addresses) and, per subject, those addresses.
type FollowUp struct {
	Spec      ProbeSpec
	Addresses map[string][]string
}

// DNSOnly says whether a finding is a verdict the DNS-only follow-up
// settles (its check's row says so: Judge.FollowUp) and that rests on the
// sandbox's resolver alone: nothing was dialled.
func DNSOnly(f report.Finding) bool {
	return f.Judge.FollowUp && !strings.HasSuffix(f.Subject, " via proxy") &&
		f.Attempt != nil && f.Attempt.StoppedBy == report.StoppedByResolver && len(f.Attempt.Addresses) == 0
}

// followUpOnly is the probe's --only for a follow-up: every check of
// results whose row the follow-up covers, in the order they came (the
// allowances are dialled still, as the witnesses a deny needs).
func followUpOnly(results []report.ProbeResult) string {
	var only []string
	for _, res := range results {
		for _, f := range res.Findings {
			if f.Judge.FollowUp && !slices.Contains(only, f.Check) {
				only = append(only, f.Check)
			}
		}
	}
	return strings.Join(only, ",")
}

// DNSOnlyFollowUp returns the follow-up for the DNS-only must-fail
// verdicts in results whose names the control resolved and reached; ok is
// false when there are none (or no control to ask). The policy file is
// edited as written, not re-encoded from its loaded form, so everything
// else in it reaches the probe as the user wrote it.
func DNSOnlyFollowUp(spec ProbeSpec, results []report.ProbeResult, c *Control) (FollowUp, bool, error) {
	if c == nil || c.Err != nil || c.Isolated != "" || spec.NoNetwork {
		return FollowUp{}, false, nil
	}
	addrs := map[string][]string{}
	for _, res := range results {
		for _, f := range res.Findings {
			if !DNSOnly(f) {
				continue
			}
			seen, ok := c.Seen[controlKey(f.Check, f.Subject)]
			if ok && seen.Status == report.Pass && seen.Class == report.ClassAnswered && seen.Attempt != nil && len(seen.Attempt.Resolved) > 0 {
				addrs[f.Subject] = seen.Attempt.Resolved
			}
		}
	}
	if len(addrs) == 0 {
		return FollowUp{}, false, nil
	}
	doc, err := narrowMustFail(spec, addrs)
	if err != nil {
		return FollowUp{}, false, err
	}
	p, err := policy.Load(doc)
	if err != nil {
		return FollowUp{}, false, fmt.Errorf("the DNS-only follow-up's policy: %w", err)
	}
	follow := spec
	follow.Policy, follow.PolicyBytes, follow.Only = p, doc, followUpOnly(results)
	return FollowUp{Spec: follow, Addresses: addrs}, true, nil
}

// narrowMustFail is the policy file with spec.egress.mustFail holding only
// the hosts some subject in addrs names, each with those addresses added
// to its own (a string entry becomes the object form). A host's own
// subject (HOST:PORT) names it; so does a subject of another check that
// begins with its name and a port ("HOST:443/udp") and is no host's own.
func narrowMustFail(spec ProbeSpec, addrs map[string][]string) ([]byte, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(spec.PolicyBytes, &doc); err != nil {
		return nil, fmt.Errorf("the DNS-only follow-up: read the policy: %w", err)
	}
	sp, _ := doc["spec"].(map[string]any)
	eg, _ := sp["egress"].(map[string]any)
	mf, _ := eg["mustFail"].(map[string]any)
	raw, _ := mf["hosts"].([]any)
	hosts := spec.Policy.Spec.Egress.MustFail.Hosts
	if mf == nil || len(raw) != len(hosts) {
		return nil, fmt.Errorf("the DNS-only follow-up: spec.egress.mustFail.hosts of the policy file does not match its loaded form")
	}
	own := map[string]bool{}
	for _, t := range hosts {
		if sub, ok := t.Subject(); ok {
			own[sub] = true
		}
	}
	var kept []any
	for i, t := range hosts {
		sub, ok := t.Subject()
		add := hostAddresses(t, sub, addrs, own)
		if !ok || len(add) == 0 {
			continue
		}
		entry := map[string]any{"target": t.Target}
		if obj, isObj := raw[i].(map[string]any); isObj {
			entry = maps.Clone(obj)
		}
		all := slices.Clone(t.Addresses)
		for _, a := range add {
			if !slices.Contains(all, a) {
				all = append(all, a)
			}
		}
		entry["addresses"] = all
		kept = append(kept, entry)
	}
	mf["hosts"] = kept
	delete(mf, "ips")
	delete(mf, "nodePorts")
	return json.Marshal(doc)
}

// hostAddresses are the addresses of addrs that must-fail host t takes:
// its own subject's first, then those of every subject that is no host's
// own and begins with t's name and a port, each address once.
func hostAddresses(t policy.Target, sub string, addrs map[string][]string, own map[string]bool) []string {
	host, _, _ := t.Dial()
	prefix := net.JoinHostPort(host, "")
	var add []string
	keep := func(list []string) {
		for _, a := range list {
			if !slices.Contains(add, a) {
				add = append(add, a)
			}
		}
	}
	keep(addrs[sub])
	for _, s := range slices.Sorted(maps.Keys(addrs)) {
		if !own[s] && strings.HasPrefix(s, prefix) && startsWithDigit(s[len(prefix):]) {
			keep(addrs[s])
		}
	}
	return add
}

func startsWithDigit(s string) bool { return s != "" && s[0] >= '0' && s[0] <= '9' }

// MergeFollowUp puts the follow-up's verdicts of the DNS-only subjects in
// place of the first round's, saying where the addresses came from. A
// subject the follow-up did not report (err: it could not run) keeps its
// first verdict, inconclusive, never a pass, and says why.
func MergeFollowUp(res *report.ProbeResult, follow report.ProbeResult, err error, fu FollowUp, vantage string) {
	byName := map[string]report.Finding{}
	for _, f := range follow.Findings {
		if _, ok := fu.Addresses[f.Subject]; ok && f.Judge.FollowUp && err == nil {
			byName[f.Name()] = f
		}
	}
	for i, f := range res.Findings {
		if _, asked := fu.Addresses[f.Subject]; !asked || !DNSOnly(f) {
			continue
		}
		addrs := strings.Join(fu.Addresses[f.Subject], ", ")
		g, ok := byName[f.Name()]
		if !ok {
			why := "it reported no verdict for it"
			if err != nil {
				why = err.Error()
			}
			res.Findings[i].Evidence = joinEvidence(f.Evidence, fmt.Sprintf("the addresses the control vantage %s resolved (%s) were to be dialled from the sandbox, but that round failed: %s", vantage, addrs, why))
			continue
		}
		note := fmt.Sprintf("the sandbox's resolver stopped the name (%s), so the addresses the control vantage %s resolved (%s) were dialled from the sandbox", f.Class, vantage, addrs)
		g.Evidence = joinEvidence(note, g.Evidence)
		res.Findings[i] = g
	}
}
