package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// Parity: a probe's egress verdicts speak for the sandboxes only if the
// probe is governed like them. Before they count, the runner compares each
// probe pod, from outside, with the live sandbox pods of its namespace: the
// egress policies (NetworkPolicies, Cilium policies) selecting it must be
// exactly those selecting them, and it must run under their runtime class
// and in their node pool. A mismatch is a failing parity finding naming the
// policy, class or pool, and turns that pod's egress verdicts inconclusive.
// drift's policy index decides what selects what, so parity and drift never
// disagree.
const (
	CheckParityPolicies     = "parity.policies"
	CheckParityRuntimeClass = "parity.runtime-class"
	CheckParityNodePool     = "parity.node-pool"
)

// Checks lists the kube runner's own findings about its probes: parity
// with the live sandboxes and the control vantage. A parity failure makes
// the probe's egress verdicts unproven (medium: it hides, it does not open).
func Checks() []runner.Check {
	return []runner.Check{
		{ID: CheckParityPolicies, Proves: "exactly the egress policies (NetworkPolicies, Cilium and admin policies) that select the live sandboxes of the namespace select the probe pod", Severity: report.Medium},
		{ID: CheckParityRuntimeClass, Proves: "the probe runs under the runtime class of the live sandboxes", Severity: report.Medium},
		{ID: CheckParityNodePool, Proves: "the probe runs in the node pool of the live sandboxes", Severity: report.Medium},
		{ID: CheckStrays, Proves: "every live sandbox whose policy-relevant labels differ from the selector's got a probe of its own (a stray), up to --max-strays", Severity: report.Medium},
		{ID: CheckControl, Proves: "the control vantage, outside every sandbox policy, ran and said what each must-fail destination answers, so the sandboxes' denies can be proven", Severity: report.Medium},
	}
}

// poolLabels are the node labels that name a node pool on the common
// platforms; the policy's own placement.nodeSelector keys count too.
var poolLabels = []string{
	"cloud.google.com/gke-nodepool",
	"eks.amazonaws.com/nodegroup",
	"karpenter.sh/nodepool",
	"kubernetes.azure.com/agentpool",
	"agentpool",
	"node.kubernetes.io/pool",
	"node-pool",
	"nodepool",
}

// livePod is a running pod of a sandbox namespace, as parity sees it.
type livePod struct {
	name, serviceAccount, runtimeClass, node string
	labels                                   map[string]string
	// policies are the egress policies selecting it (drift.EgressPolicies).
	policies []string
}

// survey is what governs the pods of the probe namespaces, read once per
// run before any probe pod exists.
type survey struct {
	engine *drift.Engine
	// err, when set, is why the policies or pods could not be read: parity
	// cannot be proven and every egress verdict is inconclusive.
	err   error
	notes []string
	byNS  map[string]*nsSurvey
}

type nsSurvey struct {
	sandboxes, strays []livePod
	// declared are the policies selecting a pod with exactly the selector's
	// labels: what parity compares with when no sandbox runs.
	declared []string
}

// survey reads the egress policies of the namespaces and their live pods.
func (b *Backend) survey(ctx context.Context, p *policy.Policy, namespaces []string) *survey {
	s := &survey{byNS: map[string]*nsSurvey{}}
	if b.Policies == nil {
		s.err = fmt.Errorf("the runner was given no client for NetworkPolicies and Cilium policies")
		return s
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	engine, err := drift.NewEngine(p)
	if err != nil {
		s.err = err
		return s
	}
	col := drift.NewCollector()
	scan := &drift.KubeScan{API: b.Policies, Engine: engine, Logger: b.Logger}
	if _, err := scan.LoadPolicies(ctx, namespaces, col); err != nil {
		s.err = fmt.Errorf("read the egress policies: %w", err)
		return s
	}
	s.engine, s.notes = engine, col.Notes
	sel := labels.SelectorFromSet(p.Spec.Selector.MatchLabels)
	for _, ns := range namespaces {
		nss := &nsSurvey{declared: engine.EgressPolicies(ns, p.Spec.Selector.MatchLabels, "default")}
		opts := metav1.ListOptions{FieldSelector: "status.phase!=Succeeded,status.phase!=Failed", Limit: 500}
		for {
			list, err := b.API.ListPods(ctx, ns, opts)
			if err != nil {
				s.err = fmt.Errorf("list the pods of namespace %s: %w", ns, err)
				return s
			}
			for i := range list.Items {
				pod := &list.Items[i]
				// sandprobe's own pods, pods on their way out, and pods on
				// the host network (no NetworkPolicy applies there; drift
				// reports them) are not what the probe stands in for.
				if _, ours := pod.Labels[LabelRun]; ours || pod.DeletionTimestamp != nil || pod.Spec.HostNetwork {
					continue
				}
				lp := livePod{name: pod.Name, serviceAccount: cmp.Or(pod.Spec.ServiceAccountName, "default"), node: pod.Spec.NodeName, labels: pod.Labels}
				if pod.Spec.RuntimeClassName != nil {
					lp.runtimeClass = *pod.Spec.RuntimeClassName
				}
				lp.policies = engine.EgressPolicies(ns, pod.Labels, lp.serviceAccount)
				if sel.Matches(labels.Set(pod.Labels)) {
					nss.sandboxes = append(nss.sandboxes, lp)
				} else {
					nss.strays = append(nss.strays, lp)
				}
			}
			if list.Continue == "" {
				break
			}
			opts.Continue = list.Continue
		}
		s.byNS[ns] = nss
	}
	return s
}

// runtimeClassFor picks the runtime class of the probe in ns when none was
// asked for: the declared class most live sandboxes there run under (the
// first declared one on a tie, or when none runs), so the probe stands
// where most of them stand.
func (s *survey) runtimeClassFor(ns string, declared []string) string {
	if len(declared) == 0 {
		return ""
	}
	best, bestN := declared[0], 0
	if nss := s.byNS[ns]; nss != nil {
		for _, c := range declared {
			n := 0
			for _, sb := range nss.sandboxes {
				if sb.runtimeClass == c {
					n++
				}
			}
			if n > bestN {
				best, bestN = c, n
			}
		}
	}
	return best
}

// nodeCache fetches each node once per run (the kernel cross-check and
// the node-pool parity read the same ones). The read of a probe's node
// starts as soon as the pod is bound (attempt.prefetchNode), while the
// probe runs, so the result does not wait on it.
type nodeCache struct {
	api   API
	mu    sync.Mutex
	nodes map[string]*nodeEntry
}

type nodeEntry struct {
	mu   sync.Mutex
	done bool // an answer: the node, or the API server's refusal
	node *corev1.Node
	err  error
}

func newNodeCache(api API) *nodeCache { return &nodeCache{api: api, nodes: map[string]*nodeEntry{}} }

func (c *nodeCache) get(ctx context.Context, name string) (*corev1.Node, error) {
	c.mu.Lock()
	e := c.nodes[name]
	if e == nil {
		e = &nodeEntry{}
		c.nodes[name] = e
	}
	c.mu.Unlock()
	// Callers wait for one another; an answer is kept, a read that got
	// none (the connection died, the context ended) is tried again by the
	// next caller. A connection that died under the request (seen under
	// kube-router's resyncs: "http2: client connection lost", then "dial
	// tcp: i/o timeout") hangs it until its deadline; bounded attempts
	// leave time for another on a fresh connection.
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return e.node, e.err
	}
	for range 3 {
		actx, cancel := context.WithTimeout(ctx, 8*time.Second)
		e.node, e.err = c.api.GetNode(actx, name)
		cancel()
		var status apierrors.APIStatus
		if e.err == nil || errors.As(e.err, &status) {
			e.done = true
			return e.node, e.err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return e.node, e.err
}

// parity judges one collected probe pod against what it stands in for
// (the live sandboxes of its namespace, or for a stray probe, that pod),
// appends the parity findings and, when the probe is not governed like
// them, turns its egress verdicts inconclusive.
func (a *attempt) parity(ctx context.Context, pod *corev1.Pod, res *report.ProbeResult) {
	s := a.r.survey
	if s == nil {
		return
	}
	var fs []report.Finding
	if s.err != nil {
		fs = []report.Finding{{Check: CheckParityPolicies, Status: report.Error,
			Expected: "the egress policies selecting the probe equal those selecting the sandboxes",
			Actual:   "could not compare: " + oneLine(s.err),
			Fix:      "grant the runner's service account list on networkpolicies (and cilium.io policies) and pods in the sandbox namespaces (manifests/rbac.yaml, sandprobe-reader)"}}
	} else {
		nss := s.byNS[a.ns]
		probe := s.engine.EgressPolicies(a.ns, pod.Labels, cmp.Or(pod.Spec.ServiceAccountName, "default"))
		var class string
		if pod.Spec.RuntimeClassName != nil {
			class = *pod.Spec.RuntimeClassName
		}
		if a.stray != nil {
			fs = a.strayParity(probe)
		} else {
			fs = append(fs, policyParity(a.ns, probe, nss))
			fs = append(fs, runtimeParity(class, nss.sandboxes, a.b.RuntimeClass != ""))
			fs = append(fs, a.nodeParity(ctx, pod.Spec.NodeName, nss.sandboxes))
		}
	}
	broken := ""
	for _, f := range fs {
		if f.Status == report.Fail || f.Status == report.Error {
			broken = cmp.Or(broken, f.Check)
		}
	}
	if broken != "" {
		for i, f := range res.Findings {
			if report.Area(f.Check) != "egress" || (f.Status != report.Pass && f.Status != report.Fail) {
				continue
			}
			res.Findings[i].Status = report.Inconclusive
			res.Findings[i].Actual = f.Actual + " — inconclusive: the probe is not governed like the sandboxes (" + broken + ")"
		}
	}
	for i := range fs {
		if fs[i].Evidence == "" {
			fs[i].Evidence = fs[i].Actual // JUnit and the text report show a pass's evidence
		}
	}
	res.Findings = append(res.Findings, fs...)
}

// policyParity compares the egress policies selecting the probe with
// those selecting each live sandbox: one failing finding per policy that
// selects one side and not the other, naming it and the sandboxes.
func policyParity(ns string, probe []string, nss *nsSurvey) report.Finding {
	f := report.Finding{Check: CheckParityPolicies, Expected: "exactly the egress policies that select the live sandboxes of namespace " + ns + " select the probe"}
	if len(nss.sandboxes) == 0 {
		if slices.Equal(probe, nss.declared) {
			f.Status = report.Skip
			f.Actual = fmt.Sprintf("parity unproven: no sandbox runs in namespace %s to compare with; the probe is governed like a pod with exactly the declared labels (%s)", ns, policiesText(probe))
			return f
		}
		return policyMismatch(f, probe, nss.declared, "a pod with exactly the declared labels", nil)
	}
	var differing []livePod
	for _, sb := range nss.sandboxes {
		if !slices.Equal(sb.policies, probe) {
			differing = append(differing, sb)
		}
	}
	if len(differing) == 0 {
		f.Status = report.Pass
		f.Actual = fmt.Sprintf("the same egress policies select the probe and all %d live sandboxes: %s", len(nss.sandboxes), policiesText(probe))
		f.Evidence = fmt.Sprintf("the probe and sandboxes %s are selected by %s", podsText(nss.sandboxes), policiesText(probe))
		return f
	}
	return policyMismatch(f, probe, differing[0].policies, "sandbox "+differing[0].name, differing)
}

// policyMismatch names every policy on one side only.
func policyMismatch(f report.Finding, probe, other []string, whom string, differing []livePod) report.Finding {
	var onlyOther, onlyProbe []string
	for _, id := range other {
		if !slices.Contains(probe, id) {
			onlyOther = append(onlyOther, id)
		}
	}
	for _, id := range probe {
		if !slices.Contains(other, id) {
			onlyProbe = append(onlyProbe, id)
		}
	}
	var parts []string
	if len(onlyOther) > 0 {
		parts = append(parts, fmt.Sprintf("%s %s %s but not the probe", strings.Join(onlyOther, ", "), selects(onlyOther), whom))
	}
	if len(onlyProbe) > 0 {
		parts = append(parts, fmt.Sprintf("%s %s the probe but not %s", strings.Join(onlyProbe, ", "), selects(onlyProbe), whom))
	}
	f.Status = report.Fail
	f.Subject = strings.Join(append(onlyOther, onlyProbe...), ",")
	f.Actual = strings.Join(parts, "; ")
	f.Evidence = fmt.Sprintf("the probe: %s; %s: %s", policiesText(probe), whom, policiesText(other))
	if len(differing) > 1 {
		f.Evidence += fmt.Sprintf("; %d sandboxes differ from the probe: %s", len(differing), podsText(differing))
	}
	f.Fix = "make the sandboxes' egress policies select by the labels of spec.selector.matchLabels only (or add the label they key on to it, so the probe carries it too); a policy that singles out the probe lets it pass or fail for another reason than the sandboxes"
	return f
}

// runtimeParity: the probe runs under a runtime class the live sandboxes
// use. Sandboxes under other declared classes are named, not failed: the
// probe can stand under one class per run (--runtime-class picks it).
func runtimeParity(class string, sandboxes []livePod, chosen bool) report.Finding {
	f := report.Finding{Check: CheckParityRuntimeClass, Expected: "the probe runs under the runtime class of the live sandboxes"}
	if len(sandboxes) == 0 {
		f.Status, f.Actual = report.Skip, "parity unproven: no live sandbox to compare with"
		return f
	}
	byClass := map[string][]string{}
	for _, sb := range sandboxes {
		byClass[sb.runtimeClass] = append(byClass[sb.runtimeClass], sb.name)
	}
	if len(byClass[class]) == 0 {
		f.Status = report.Fail
		f.Actual = fmt.Sprintf("the probe runs under %s, no live sandbox does: %s", classText(class), classesText(byClass))
		f.Fix = "run the probe under the sandboxes' runtime class (--runtime-class), or move the sandboxes to a declared one"
		return f
	}
	f.Status = report.Pass
	f.Actual = fmt.Sprintf("the probe runs under %s, as %d of %d live sandboxes do", classText(class), len(byClass[class]), len(sandboxes))
	if len(byClass) > 1 {
		delete(byClass, class)
		f.Actual += "; not represented: " + classesText(byClass)
		if !chosen {
			f.Actual += " (a run with --runtime-class probes them)"
		}
	}
	return f
}

// nodeParity: the probe ran on a node of the sandboxes' pool: ideally one
// that hosts a sandbox, else one whose pool labels match a sandbox node's.
func (a *attempt) nodeParity(ctx context.Context, node string, sandboxes []livePod) report.Finding {
	f := report.Finding{Check: CheckParityNodePool, Expected: "the probe runs in the node pool of the live sandboxes"}
	if len(sandboxes) == 0 {
		f.Status, f.Actual = report.Skip, "parity unproven: no live sandbox to compare with"
		return f
	}
	var sbNodes []string
	for _, sb := range sandboxes {
		if sb.node == node {
			f.Status = report.Pass
			f.Actual = fmt.Sprintf("the probe ran on node %s, where sandbox %s runs", node, sb.name)
			return f
		}
		if sb.node != "" && !slices.Contains(sbNodes, sb.node) {
			sbNodes = append(sbNodes, sb.node)
		}
	}
	slices.Sort(sbNodes)
	keys := append(slices.Clone(poolLabels), slices.Sorted(maps.Keys(a.r.spec.Policy.Spec.Placement.NodeSelector))...)
	mine, err := a.r.nodes.get(ctx, node)
	if err != nil {
		f.Status, f.Actual = report.Error, fmt.Sprintf("cannot read node %s: %s", node, oneLine(err))
		f.Fix = "grant the runner's service account get on nodes"
		return f
	}
	myPool := poolOf(mine, keys)
	var pools []string
	for _, n := range sbNodes {
		other, err := a.r.nodes.get(ctx, n)
		if err != nil {
			continue
		}
		p := poolOf(other, keys)
		if p != "" && p == myPool {
			f.Status = report.Pass
			f.Actual = fmt.Sprintf("the probe ran on node %s, in the pool of sandbox node %s (%s)", node, n, p)
			return f
		}
		if !slices.Contains(pools, p) {
			pools = append(pools, p)
		}
	}
	if myPool == "" && !slices.ContainsFunc(pools, func(p string) bool { return p != "" }) {
		f.Status = report.Skip
		f.Actual = fmt.Sprintf("parity unproven: node %s hosts no sandbox (they run on %s) and no node-pool label tells the pools apart", node, strings.Join(sbNodes, ", "))
		return f
	}
	f.Status = report.Fail
	f.Actual = fmt.Sprintf("the probe ran on node %s (pool %s); the sandboxes run on %s (pools %s)", node, orNone(myPool), strings.Join(sbNodes, ", "), strings.Join(pools, "; "))
	f.Fix = "place the probe like the sandboxes: spec.placement must select the sandboxes' node pool (or run with --per-node)"
	return f
}

// poolOf is the node's pool: the values of the pool labels it carries.
func poolOf(n *corev1.Node, keys []string) string {
	var parts []string
	for _, k := range keys {
		if v, ok := n.Labels[k]; ok {
			parts = append(parts, k+"="+v)
		}
	}
	slices.Sort(parts)
	return strings.Join(slices.Compact(parts), ",")
}

func selects(ids []string) string {
	if len(ids) == 1 {
		return "selects"
	}
	return "select"
}

func policiesText(ids []string) string {
	if len(ids) == 0 {
		return "no egress policy"
	}
	return strings.Join(ids, ", ")
}

func podsText(pods []livePod) string {
	const shown = 5
	var names []string
	for i, p := range pods {
		if i == shown {
			names = append(names, fmt.Sprintf("and %d more", len(pods)-shown))
			break
		}
		names = append(names, p.name)
	}
	return strings.Join(names, ", ")
}

func classText(c string) string {
	if c == "" {
		return "no runtime class (the node's default)"
	}
	return "runtime class " + c
}

func classesText(byClass map[string][]string) string {
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(byClass)) {
		parts = append(parts, fmt.Sprintf("%s (%d: %s)", classText(c), len(byClass[c]), strings.Join(byClass[c][:min(3, len(byClass[c]))], ", ")))
	}
	return strings.Join(parts, "; ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
