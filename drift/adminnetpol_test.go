package drift_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/render"
)

// TestANPTieJudgedAtWorst: two AdminNetworkPolicies at one priority, a
// Deny of everything and an Allow of the world. The API leaves their order
// undefined, so the verdict must not depend on which name sorts first: the
// Allow is a reopen either way, and the finding names both objects. At
// distinct priorities with the Deny first (a healthy setup) nothing opens.
func TestANPTieJudgedAtWorst(t *testing.T) {
	p := loadPolicy(t, "policy.yaml")
	world := []any{networks("0.0.0.0/0", "::/0")}
	const ns = "tie"
	for _, c := range []struct {
		name                string
		deny, allow         string
		denyPrio, allowPrio int64
		want                bool
	}{
		{"deny sorts first", "a-deny", "b-allow", 10, 10, true},
		{"allow sorts first", "b-deny", "a-allow", 10, 10, true},
		{"deny at a higher priority", "b-deny", "a-allow", 5, 10, false},
		{"allow at a higher priority", "a-deny", "b-allow", 10, 5, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := append(declaredNamespaces(p), namespaceObject(ns, nil), render.NetworkPolicy(p, ns),
				admin(drift.AdminNetworkPolicyKind, c.deny, map[string]any{
					"priority": c.denyPrio, "subject": nsSubject(ns), "egress": []any{egressRule("Deny", world)}}),
				admin(drift.AdminNetworkPolicyKind, c.allow, map[string]any{
					"priority": c.allowPrio, "subject": nsSubject(ns), "egress": []any{egressRule("Allow", world)}}),
				hardenedPod(p, ns, "agent"))
			_, col := checkYAML(t, p, toYAML(t, objs))
			var world []string
			for _, f := range col.Findings {
				if f.Check == drift.ANPWorld && slices.Contains(targetsOf(f), "pod/"+ns+"/agent") {
					world = append(world, f.Subject+" | "+f.Evidence)
				}
			}
			if !c.want {
				if len(world) > 0 {
					t.Fatalf("false alarm: %v", world)
				}
				return
			}
			if len(world) == 0 {
				t.Fatalf("no %s: %s", drift.ANPWorld, findingsFor(col.Findings, "pod/"+ns+"/agent"))
			}
			for _, w := range world {
				if !strings.Contains(w, "adminnetworkpolicy/"+c.allow) {
					t.Errorf("the finding does not name the Allow: %s", w)
				}
				if c.denyPrio == c.allowPrio && (!strings.Contains(w, "adminnetworkpolicy/"+c.deny) || !strings.Contains(w, "priority 10")) {
					t.Errorf("the tie is not named (both objects, the priority): %s", w)
				}
			}
		})
	}
}
