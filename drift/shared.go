package drift

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sandprobe/sandprobe/report"
)

// A finding about an egress policy (an allow-all rule, an undeclared CIDR)
// is the same for every sandbox the policy selects: the engine stamps it on
// each pod it judges, and the collector folds the copies into one finding
// per policy object and verdict, whose Affects lists the sandboxes. A
// namespace of 100 sandboxes under one wide policy is one line and one
// metric, not one per pod.

// sharedFinding is one policy finding being folded.
type sharedFinding struct {
	f report.Finding
	// affected counts the sandboxes beyond those listed in f.Affects.
	affected int
	// namespaces are those of the sandboxes; one keeps the finding's.
	mixed bool
}

// policyObject is the egress policy a finding is about
// ("networkpolicy/NS/NAME"), if it is about one rather than about the
// sandbox it was found on.
func policyObject(f *report.Finding) (string, bool) {
	key, _ := findingObject(f)
	kind, _, ok := strings.Cut(key, "/")
	return key, ok && key != f.Target && policyKinds[kind]
}

// sharedKey identifies a policy finding: the object, and everything the
// finding says about it. Copies that differ (a shadowed rule is
// inconclusive for one pod and a fail for another) stay apart.
func sharedKey(obj string, f *report.Finding) string {
	return strings.Join([]string{obj, f.Check, f.Subject, string(f.Status), f.Expected, f.Actual, f.Fix, f.Evidence, f.File, strconv.Itoa(f.Line)}, "\x00")
}

// foldShared folds the policy findings of one sandbox's and returns the
// others (fs itself when there are none, the common case).
func (c *Collector) foldShared(fs []report.Finding) []report.Finding {
	var own []report.Finding
	copied := false
	for i := range fs {
		obj, ok := policyObject(&fs[i])
		switch {
		case ok:
			if !copied {
				own, copied = append(make([]report.Finding, 0, len(fs)), fs[:i]...), true
			}
			c.fold(obj, fs[i])
		case copied:
			own = append(own, fs[i])
		}
	}
	if !copied {
		return fs
	}
	return own
}

// fold takes a policy finding for one sandbox into the shared one.
func (c *Collector) fold(obj string, f report.Finding) {
	k := sharedKey(obj, &f)
	s := c.shared[k]
	if s == nil {
		if c.shared == nil {
			c.shared = map[string]*sharedFinding{}
		}
		s = &sharedFinding{f: f}
		s.f.Target, s.f.Affects = obj, nil
		c.shared[k] = s
		c.sharedOrder = append(c.sharedOrder, k)
	}
	if f.Namespace != s.f.Namespace {
		s.mixed = true
	}
	if len(s.f.Affects) < report.MaxAffects {
		s.f.Affects = append(s.f.Affects, f.Target)
	} else {
		s.affected++
	}
}

// flushShared emits the folded policy findings, in the order first seen,
// each once. A scan calls it when its sandboxes are all judged.
func (c *Collector) flushShared() {
	out := make([]report.Finding, 0, len(c.sharedOrder))
	for _, k := range c.sharedOrder {
		s := c.shared[k]
		n := len(s.f.Affects) + s.affected
		if s.mixed {
			s.f.Namespace = ""
		}
		more := ""
		if s.affected > 0 {
			more = fmt.Sprintf(", the first %d listed", len(s.f.Affects))
		}
		s.f.Evidence = appendEvidence(s.f.Evidence, fmt.Sprintf("it applies to %d %s%s", n, plural(n, "sandbox", "sandboxes"), more))
		out = append(out, s.f)
	}
	c.shared, c.sharedOrder = nil, nil
	c.emit(out...)
}
