package drift

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandprobe/sandprobe/policy"
)

// Where a sandbox runs: selected by the sandbox policies, under an
// isolation runtime, without the API's credentials.
const (
	PodSelectorLabels = "drift.pod.selector-labels"
	PodRuntimeClass   = "drift.pod.runtime-class"
	PodSAToken        = "drift.pod.sa-token"
)

var placementRules = []podRule{
	{row{Rule{PodSelectorLabels, "every pod in a sandbox namespace carries the selector's labels, so the sandbox NetworkPolicies select it", high,
		"add the selector's labels to the pod template, or move the workload out of the sandbox namespace"},
		func(s *policy.Spec) bool { return len(s.Namespaces) > 0 }}, checkSelectorLabels},
	{row{Rule{PodRuntimeClass, "the pod runs under one of the declared isolation runtimes", high,
		"set spec.runtimeClassName to a declared class"},
		func(s *policy.Spec) bool { return len(s.Runtime.ClassNames) > 0 }}, checkRuntimeClass},
	{row{Rule{PodSAToken, "no service-account token reaches the sandbox: automount is off and no projected token volume exists", high,
		"set spec.automountServiceAccountToken: false and remove serviceAccountToken projections"},
		func(s *policy.Spec) bool { return s.ServiceAccount == policy.TokenAbsent }}, checkSAToken},
}

func checkSelectorLabels(c *podCheck, v *podView) {
	e, want := c.e, c.e.p.Spec.Selector.MatchLabels
	if !e.sandboxNS[c.ns] || e.selector.Matches(labels.Set(v.om.Labels)) {
		return
	}
	c.failAt(v.atMeta(fLabels, ".labels"), selectorText(want), missingLabels(want, v.om.Labels),
		fmt.Sprintf("add labels %s to %s.labels (or move the workload out of namespace %s)", selectorText(want), v.meta, c.ns),
		fmt.Sprintf("the pod runs in sandbox namespace %s without the selector's labels: no NetworkPolicy or Cilium policy written for sandboxes selects it", c.ns))
}

func checkRuntimeClass(c *podCheck, v *podView) {
	rc := v.ps.RuntimeClassName
	if rc != nil && c.e.classes[*rc] {
		return
	}
	actual := "unset (the node's default runtime: no isolation)"
	if rc != nil {
		actual = *rc
	}
	classes := c.e.p.Spec.Runtime.ClassNames
	at := v.at(fRuntimeClass, ".runtimeClassName")
	c.failAt(at, "one of "+strings.Join(classes, ", "), actual, "set "+at.path+": "+classes[0], "")
}

func checkSAToken(c *podCheck, v *podView) {
	if am := v.ps.AutomountServiceAccountToken; am == nil || *am {
		actual := "unset (the token is mounted unless the ServiceAccount disables it)"
		if am != nil {
			actual = "true"
		}
		at := v.at(fAutomountToken, ".automountServiceAccountToken")
		c.failAt(at, "false", actual, "set "+at.path+": false", "serviceAccountName: "+orDefault(v.ps.ServiceAccountName, "default"))
	}
	for i := range v.ps.Volumes {
		vol := &v.ps.Volumes[i]
		if vol.Projected == nil {
			continue
		}
		for _, src := range vol.Projected.Sources {
			if src.ServiceAccountToken != nil {
				c.failAt(v.at(fProjectedToken, ".volumes["+vol.Name+"].projected"), "no service-account token projection",
					"projects a service-account token to "+src.ServiceAccountToken.Path,
					"remove the serviceAccountToken source from "+v.spec+".volumes["+vol.Name+"]", "")
			}
		}
	}
}

func missingLabels(want, have map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(want) {
		v, ok := have[k]
		switch {
		case !ok:
			parts = append(parts, k+" missing")
		case v != want[k]:
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, ", ")
}
