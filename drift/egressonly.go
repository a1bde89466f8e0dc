package drift

import (
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandprobe/sandprobe/report"
)

// EgressOnlyKind is the target kind of the representative sandbox that
// egress objects are judged against when the files hold no workload
// ("selector/NS/LABELS").
const EgressOnlyKind = "selector"

// egressOnlyNotJudged is why drift.netpol.egress-unrestricted is not judged
// for files without workloads: the cluster may hold the policies that
// restrict the sandboxes, and the files are only a change to some of them.
const egressOnlyNotJudged = "not judged: the files hold egress policies but no workload, and the cluster may hold the policies that restrict the sandboxes"

// judgeEgressOnly judges the egress objects of files that hold no workload
// — a pull request that only widens a NetworkPolicy, a Cilium or an admin
// network policy — against the policy's selector: in each sandbox
// namespace (spec.namespaces, else the namespaces the objects live in, else
// the default one) a representative sandbox, a pod with the selector's
// labels, goes through the egress rules alone, as every sandbox there
// would. An object that selects no sandbox is named in a note and judged
// by nothing. It reports how many representative sandboxes the objects
// select.
func (m *Manifests) judgeEgressOnly(e *Engine, col *Collector) int {
	if len(m.Pods) > 0 || len(m.Workloads) > 0 || len(m.Sandboxes) > 0 || len(m.Claims) > 0 || len(m.WarmPools) > 0 || !e.EgressKnown() {
		return 0
	}
	col.Checked("netpol")
	if len(m.Cilium) > 0 {
		col.Checked("cilium")
	}
	if len(m.AdminNetworkPolicies) > 0 {
		col.Checked("anp")
	}
	col.notJudged(NetpolEgressUnrestricted, egressOnlyNotJudged)
	judged := 0
	var where []string
	for _, ns := range m.egressOnlyNamespaces(e) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: selectorText(e.p.Spec.Selector.MatchLabels), Namespace: ns, Labels: e.p.Spec.Selector.MatchLabels,
		}}
		c := &podCheck{e: e, kind: EgressOnlyKind, name: pod.Name, ns: ns, view: newPodView(&pod.ObjectMeta, &pod.Spec, "spec", "metadata")}
		e.checkEgress(c, pod)
		selected := true
		c.out = slices.DeleteFunc(c.out, func(f report.Finding) bool {
			if f.Check == NetpolEgressUnrestricted {
				selected = false // nothing in the files restricts it: not theirs to judge
				return true
			}
			return false
		})
		if !selected && len(c.out) == 0 {
			col.Note("egress policies in the files select no sandbox in namespace %s (labels %s): nothing there was judged", ns, selectorText(e.p.Spec.Selector.MatchLabels))
			continue
		}
		judged++
		where = append(where, ns)
		col.Add(e.settle(c.out, c.once))
	}
	if judged > 0 {
		col.Note("the files hold no workload: their egress policies were judged for a sandbox with the selector's labels (%s) in namespace %s", selectorText(e.p.Spec.Selector.MatchLabels), strings.Join(where, ", "))
	}
	return judged
}

// egressOnlyNamespaces are the namespaces a representative sandbox stands
// in: the policy's, else those of the namespaced egress objects, else the
// one objects without a namespace land in.
func (m *Manifests) egressOnlyNamespaces(e *Engine) []string {
	if len(e.p.Spec.Namespaces) > 0 {
		return e.p.Spec.Namespaces
	}
	seen := map[string]bool{}
	for _, np := range m.NetworkPolicies {
		seen[np.Namespace] = true
	}
	for _, u := range m.Cilium {
		if ns := u.GetNamespace(); ns != "" {
			seen[ns] = true
		}
	}
	if len(seen) == 0 {
		ns := m.Namespace
		if ns == "" {
			ns = "default"
		}
		seen[ns] = true
	}
	out := make([]string, 0, len(seen))
	for ns := range seen {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}
