package drift

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sandprobe/sandprobe/report"
)

// SandboxClaims and SandboxWarmPools (extensions.agents.x-k8s.io): a claim
// gets a sandbox made from a template, adopting a warm one from a pool when
// it can. A v1alpha1 claim names its template (spec.sandboxTemplateRef)
// and may name a warm pool (spec.warmpool); the controller then hands it
// a warm sandbox of that pool, made from the pool's template, whatever the
// claim's own template says (v1alpha1 claims convert to v1beta1 with that
// pool as their warmPoolRef). A v1beta1 claim names only the pool: it gets
// the pool's template, which is judged as a template.
const (
	SandboxClaimKind    = "SandboxClaim"
	SandboxWarmPoolKind = "SandboxWarmPool"

	ClaimWarmRuntime = "drift.claim.warm-runtime"
)

var claimRules = []row{
	{Rule{ClaimWarmRuntime, "a SandboxClaim adopts only warm sandboxes that run under the runtime its own template declares", high,
		"name a warm pool made from the claim's own template (or one with the same runtimeClassName), or set spec.warmpool: default"}, nil},
}

// claimRef is the part of a claim or a pool that says where its sandboxes
// come from: spec.sandboxTemplateRef.name and (a v1alpha1 claim's)
// spec.warmpool.
type claimRef struct{ template, warmPool string }

func claimRefOf(u *unstructured.Unstructured) claimRef {
	var r claimRef
	r.template, _, _ = unstructured.NestedString(u.Object, "spec", "sandboxTemplateRef", "name")
	r.warmPool, _, _ = unstructured.NestedString(u.Object, "spec", "warmpool")
	return r
}

// templateRuntime is the runtimeClassName of a SandboxTemplate's pods ("" when
// unset: the node's default runtime).
func templateRuntime(u *unstructured.Unstructured) string {
	rc, _, _ := unstructured.NestedString(u.Object, "spec", "podTemplate", "spec", "runtimeClassName")
	return rc
}

func runtimeText(rc string) string {
	if rc == "" {
		return "the node's default runtime (runtimeClassName unset)"
	}
	return "runtimeClassName " + rc
}

// checkClaims judges each v1alpha1 claim that names a warm pool: the pool's
// template must run under the runtime of the claim's own template. A claim
// whose pool or templates are not in the files is not judged, and a note
// says so.
func (m *Manifests) checkClaims(e *Engine, col *Collector) {
	checkClaims(e, col, m.Sandboxes, m.WarmPools, m.Claims)
}

// checkClaims judges claims against the templates (among sandboxes) and
// pools given: checkClaims of Manifests, and of a live cluster.
func checkClaims(e *Engine, col *Collector, sandboxes, warmPools, claims []*unstructured.Unstructured) {
	templates := map[string]*unstructured.Unstructured{}
	for _, u := range sandboxes {
		if u.GetKind() == SandboxTemplateKind {
			templates[u.GetNamespace()+"/"+u.GetName()] = u
		}
	}
	pools := map[string]*unstructured.Unstructured{}
	for _, u := range warmPools {
		pools[u.GetNamespace()+"/"+u.GetName()] = u
	}
	for _, claim := range claims {
		ref := claimRefOf(claim)
		if ref.template == "" {
			// A v1beta1 claim (or one read at v1beta1): it names only its
			// pool and gets the pool's template, judged as a template.
			// Nothing here to judge, and no pass to give.
			continue
		}
		ns := claim.GetNamespace()
		own := templates[ns+"/"+ref.template]
		var podLabels map[string]string
		if own != nil {
			podLabels, _, _ = unstructured.NestedStringMap(own.Object, "spec", "podTemplate", "metadata", "labels")
		}
		if !e.IsSandbox(ns, podLabels) {
			continue // its sandboxes are not this policy's
		}
		pool := ref.warmPool
		target := "sandboxclaim/" + ns + "/" + claim.GetName()
		if pool == "" || pool == "none" || pool == "default" {
			// No pool named: the controller adopts only from pools of the
			// claim's own template (or starts one cold).
			col.Checked("claim")
			col.Add(nil)
			continue
		}
		p := pools[ns+"/"+pool]
		var poolTemplate *unstructured.Unstructured
		if p != nil {
			poolTemplate = templates[ns+"/"+claimRefOf(p).template]
		}
		if own == nil || poolTemplate == nil {
			col.Note("%s names warm pool %s, but the pool or the templates it and the claim name were not found: which runtime it may adopt was not judged", target, pool)
			continue
		}
		col.Checked("claim")
		want, got := templateRuntime(own), templateRuntime(poolTemplate)
		if want == got {
			col.Add(nil)
			continue
		}
		col.Add([]report.Finding{{
			Check: ClaimWarmRuntime, Target: target, Namespace: ns, Subject: "spec.warmpool", Status: report.Fail,
			Expected: fmt.Sprintf("warm sandboxes under %s, as its template %s declares", runtimeText(want), own.GetName()),
			Actual:   fmt.Sprintf("may adopt a warm sandbox of pool %s, made from template %s under %s", pool, poolTemplate.GetName(), runtimeText(got)),
			Fix:      fmt.Sprintf("set spec.warmpool of sandboxclaim %s/%s to a pool made from template %s (or default), or give template %s runtimeClassName %s", ns, claim.GetName(), own.GetName(), poolTemplate.GetName(), orDefault(want, "unset")),
			Evidence: "the controller hands a claim that names a warm pool a sandbox of that pool, made from the pool's template; the claim's own sandboxTemplateRef is not consulted for a warm start",
		}})
	}
}

// SandboxClaimGVR is the claim API's resource for one served version.
func SandboxClaimGVR(version string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: SandboxTemplateGroup, Version: version, Resource: "sandboxclaims"}
}

// SandboxWarmPoolGVR is the warm pool API's resource for one served version.
func SandboxWarmPoolGVR(version string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: SandboxTemplateGroup, Version: version, Resource: "sandboxwarmpools"}
}
