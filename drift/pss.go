package drift

import (
	"fmt"

	psapi "k8s.io/pod-security-admission/api"
	psa "k8s.io/pod-security-admission/policy"
)

// pssCheck is one check of the Pod Security Standard "restricted" at the
// newest version, taken from the upstream implementation the admission
// controller itself runs, so "restricted" means exactly what the cluster
// would enforce.
type pssCheck struct {
	id string
	fn psa.CheckPodFn
	// covered are the policy rules that already report what this check
	// finds; when one of them failed for the object, the PSS finding would
	// only repeat it.
	covered []string
	fix     string
}

// pssCoverage maps each upstream check to the pod rules that report the same
// property, and says how to fix what only the standard catches.
var pssCoverage = map[string]struct {
	rules []string
	fix   string
}{
	"allowPrivilegeEscalation":   {[]string{PodPrivilegeEsc}, "set securityContext.allowPrivilegeEscalation: false on every container"},
	"appArmorProfile":            {[]string{PodAppArmor}, "do not set an Unconfined AppArmor profile"},
	"capabilities_restricted":    {[]string{PodCapDrop, PodCapAdd}, "drop ALL and add at most NET_BIND_SERVICE, even where the policy declares more"},
	"hostNamespaces":             {[]string{PodHostNetwork, PodHostPID, PodHostIPC}, "remove hostNetwork, hostPID and hostIPC"},
	"hostPathVolumes":            {[]string{PodHostPath}, "remove hostPath volumes"},
	"hostPorts":                  {[]string{PodHostPorts}, "remove hostPort from every container port"},
	"hostProbesAndHostLifecycle": {nil, "remove the host field from probes and lifecycle handlers"},
	"privileged":                 {[]string{PodPrivileged}, "remove securityContext.privileged"},
	"procMount":                  {[]string{PodProcMount}, "remove securityContext.procMount"},
	"procMount_restricted":       {[]string{PodProcMount}, "remove securityContext.procMount"},
	"restrictedVolumes":          {[]string{PodHostPath}, "use only configMap, csi, downwardAPI, emptyDir, ephemeral, image, persistentVolumeClaim, projected and secret volumes"},
	"runAsNonRoot":               {[]string{PodRunAsNonRoot}, "set securityContext.runAsNonRoot: true"},
	"runAsUser":                  {[]string{PodRunAsUser}, "do not run as uid 0"},
	"seLinuxOptions":             {[]string{PodSELinux}, "remove seLinuxOptions type/user/role"},
	"seccompProfile_restricted":  {[]string{PodSeccomp}, "set securityContext.seccompProfile.type: RuntimeDefault, even where the policy says Unconfined"},
	"sysctls":                    {[]string{PodSysctls}, "remove unsafe sysctls"},
	"windowsHostProcess":         {nil, "remove securityContext.windowsOptions.hostProcess"},
}

// restrictedChecks builds the restricted check list the way the admission
// controller does: the newest version of every check, minus the baseline
// checks a restricted one overrides.
func restrictedChecks() ([]pssCheck, error) {
	all := psa.DefaultChecks()
	overridden := map[psa.CheckID]bool{}
	for _, ch := range all {
		if ch.Level != psapi.LevelRestricted || len(ch.Versions) == 0 {
			continue
		}
		for _, id := range ch.Versions[len(ch.Versions)-1].OverrideCheckIDs {
			overridden[id] = true
		}
	}
	var out []pssCheck
	for _, ch := range all {
		if overridden[ch.ID] || len(ch.Versions) == 0 {
			continue
		}
		cov, ok := pssCoverage[string(ch.ID)]
		if !ok {
			// A check added upstream after this table was written still runs;
			// it just has no policy rule to defer to.
			cov.fix = "fix the field the Pod Security Standard names"
		}
		out = append(out, pssCheck{id: string(ch.ID), fn: ch.Versions[len(ch.Versions)-1].CheckPod, covered: cov.rules, fix: cov.fix})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pod security standard: no restricted checks found")
	}
	return out, nil
}

// PodPSSRestricted holds every sandbox to the Pod Security Standard
// "restricted", whatever the policy allows.
const PodPSSRestricted = "drift.pod.pss-restricted"

// standardRules run last: they report only what the rules before them did
// not already report for the object.
var standardRules = []podRule{
	{row{Rule{PodPSSRestricted, "the pod passes the Pod Security Standard \"restricted\", whatever the policy allows", medium,
		"fix the field the standard names"}, nil}, checkPSSRestricted},
}

// checkPSSRestricted runs the standard and reports what the policy rules
// did not already report for this object.
func checkPSSRestricted(c *podCheck, v *podView) {
	for _, ch := range c.e.pss {
		res := ch.fn(v.om, v.ps)
		if res.Allowed {
			continue
		}
		if c.anyFailed(ch.covered) {
			continue
		}
		actual := res.ForbiddenReason
		if res.ForbiddenDetail != "" {
			actual += " (" + res.ForbiddenDetail + ")"
		}
		c.failAt(place{siteOf(zoneStandard, 0, fStandard), ch.id}, "allowed by Pod Security Standard restricted", actual, ch.fix+" ("+v.spec+")",
			"the policy allows this, but a sandbox must still pass the restricted standard")
	}
}

func (c *podCheck) anyFailed(rules []string) bool {
	for _, r := range rules {
		if c.failed[r] {
			return true
		}
	}
	return false
}
