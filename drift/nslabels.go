package drift

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/sandprobe/sandprobe/report"
)

// Admin network policies and Cilium cluster-wide policies often select
// sandbox namespaces by label ("every namespace of team agents"). Files
// may hold such a policy without the Namespace object: the namespace's
// labels are then unknown, and whether the policy applies cannot be told.
// Those policies are left out of the verdict, the verdicts they could
// change are inconclusive, what they would open if they apply is reported
// as inconclusive, and the run notes which selectors could not be judged
// (drift -f --namespace-labels NS=k=v,... settles them).

// undetermined are the policies that may select a pod or not.
type undetermined struct {
	admin, baseline []*adminPolicy
	cilium          []*compiledCiliumRule
	// adminEnded: the judged admin tier ended (a Deny or Pass of
	// everything) at adminEnd: policies after it are never reached.
	adminEnd   int32
	adminEnded bool
}

func (u *undetermined) empty() bool {
	return len(u.admin)+len(u.baseline)+len(u.cilium) == 0
}

// adminReach is what one admin policy does to traffic that reaches it:
// the Allow rules with findings before its own end, and how it ends.
func adminReach(ap *adminPolicy) (allows []*adminRule, end adminAction) {
	for i := range ap.rules {
		r := &ap.rules[i]
		switch {
		case r.action == actionAllow && len(r.findings) > 0:
			allows = append(allows, r)
		case r.coversAll && (r.action == actionDeny || r.action == actionPass):
			return allows, r.action
		}
	}
	return allows, ""
}

// judgeUndetermined turns the pod's egress verdict, reached without the
// undetermined policies, into what is known: the findings of the admin
// tiers and NetworkPolicies (c.out[first:tiers]) are inconclusive when an
// undetermined policy could end the evaluation before them; "no egress
// policy" is inconclusive when one could restrict the pod; and what an
// undetermined policy would open is reported, inconclusive.
func (e *Engine) judgeUndetermined(c *podCheck, ns string, u undetermined, first, tiers int) {
	var ids []string
	var opens []ruleFinding
	shadow, restrict := false, false
	for _, ap := range u.admin {
		if u.adminEnded && ap.priority > u.adminEnd {
			continue // behind a judged Deny or Pass of everything
		}
		ids = append(ids, ap.id)
		allows, end := adminReach(ap)
		for _, r := range allows {
			opens = append(opens, r.findings...)
		}
		shadow = shadow || end != ""
		restrict = restrict || end == actionDeny
	}
	for _, ap := range u.baseline {
		ids = append(ids, ap.id)
		allows, end := adminReach(ap)
		for _, r := range allows {
			opens = append(opens, r.findings...)
		}
		shadow = shadow || end == actionDeny
		restrict = restrict || end == actionDeny
	}
	for _, r := range u.cilium {
		ids = append(ids, r.id)
		opens = append(opens, r.findings...)
		restrict = restrict || r.egress
	}
	if len(ids) == 0 {
		return
	}
	sort.Strings(ids)
	ids = compactStrings(ids)
	why := fmt.Sprintf("the labels of namespace %s are unknown (its Namespace object is not in the files, and --namespace-labels does not give them): %s select namespaces by labels it may or may not carry, so whether they apply to this pod could not be judged",
		ns, strings.Join(ids, ", "))
	inconclusive := func(f *report.Finding) {
		f.Status = report.Inconclusive
		f.Evidence = appendEvidence(f.Evidence, why)
		f.Fix = appendFix(f.Fix, ns)
	}
	if shadow {
		for i := first; i < tiers; i++ {
			inconclusive(&c.out[i])
		}
	}
	if restrict {
		for i := tiers; i < len(c.out); i++ {
			if c.out[i].Check == NetpolEgressUnrestricted {
				inconclusive(&c.out[i])
			}
		}
	}
	for _, rf := range opens {
		f := rf.on(c.ensureTarget(), c.ns)
		f.Actual = "if it selects namespace " + ns + ": " + f.Actual
		inconclusive(&f)
		c.out = append(c.out, f)
	}
	e.undet.record(ns, ids)
}

func appendFix(fix, ns string) string {
	more := fmt.Sprintf("give the labels of namespace %s (its Namespace object with -f, or --namespace-labels %s=KEY=VALUE,…) so drift can tell whether the policy applies", ns, ns)
	if fix == "" {
		return more
	}
	return fix + "; or " + more
}

func compactStrings(xs []string) []string {
	out := xs[:0]
	for i, x := range xs {
		if i == 0 || x != xs[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// undeterminedLog remembers, for the run's notes, which policies could not
// be judged in which namespace. Pods are checked in parallel (FileScan).
type undeterminedLog struct {
	mu   sync.Mutex
	byNS map[string]map[string]bool
}

func (l *undeterminedLog) record(ns string, ids []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byNS == nil {
		l.byNS = map[string]map[string]bool{}
	}
	if l.byNS[ns] == nil {
		l.byNS[ns] = map[string]bool{}
	}
	for _, id := range ids {
		l.byNS[ns][id] = true
	}
}

// NoteUndetermined says, once per namespace, which policies' namespace
// selectors could not be judged because the namespace's labels are unknown.
func (e *Engine) NoteUndetermined(col *Collector) {
	e.undet.mu.Lock()
	defer e.undet.mu.Unlock()
	for _, ns := range sortedKeys(e.undet.byNS) {
		col.Note("namespace %s: its labels are unknown (no Namespace object in the files, no --namespace-labels), so the namespace selectors of %s could not be judged: the egress verdicts they could change are inconclusive (pass its Namespace with -f, or --namespace-labels %s=KEY=VALUE,…)",
			ns, strings.Join(sortedKeys(e.undet.byNS[ns]), ", "), ns)
	}
}
