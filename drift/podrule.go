package drift

import (
	"slices"

	"github.com/sandprobe/sandprobe/report"
)

// podRule is a drift rule over pods, workload pod templates and Sandbox
// pod templates: its catalogue entry and its check. The rows live in
// podrules_*.go by theme; podRules lists them in catalogue order.
//
// To add one: give it an ID constant and a row in the file of its theme
// (or a new file, listed in podRules), with applies when the policy can
// leave it out, and a check that reads the pod through the view — a
// container's fields with v.containers(), the fields a pod sets for its
// containers with decisions — and reports each failure with c.failAt at
// the place (site and YAML path) that decides it. A test in cases_test.go
// breaks it; TestEveryRuleHasALazyObject holds that line.
type podRule struct {
	row
	check func(c *podCheck, v *podView)
}

// podRules is every pod rule, in catalogue order.
var podRules = slices.Concat(placementRules, identityRules, privilegeRules, hostRules, kernelRules, supplyRules, phaseRules, standardRules)

// run applies the pod rules the policy asks for, then lists the findings
// in the pod's order (sortBySite). The pass path builds no string: paths
// and messages are built for findings only.
func (c *podCheck) run() {
	for _, r := range c.e.podRules {
		c.rule = r.ID
		r.check(c, &c.view)
	}
	sortBySite(c.out, c.sites)
}

// failAt records a failure of the rule being run, at a place of the pod.
func (c *podCheck) failAt(at place, expected, actual, fix, evidence string) {
	if c.sites == nil {
		c.sites = c.sitesBuf[:0]
	}
	c.sites = append(c.sites, at.site)
	c.fail(c.rule, at.path, expected, actual, fix, evidence)
}

// undecidedAt records that the rule being run could not judge a place of
// the pod: an inconclusive finding, never a pass (and the run's summary
// holds no pass for the rule).
func (c *podCheck) undecidedAt(at place, expected, actual, fix, evidence string) {
	if c.sites == nil {
		c.sites = c.sitesBuf[:0]
	}
	c.sites = append(c.sites, at.site)
	c.add(report.Inconclusive, c.rule, at.path, expected, actual, fix, evidence)
}
