package drift

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// Engine applies the rules to one object at a time. Build it with
// NewEngine, add every NetworkPolicy and Cilium policy first (the egress
// rules need the union), then stream pods, Sandbox objects and containers
// through it. An Engine is not safe for concurrent use, except checkPod
// (FileScan's workers), once every policy and namespace is added.
type Engine struct {
	p        *policy.Policy
	selector labels.Selector
	// sandboxNS are the declared sandbox namespaces.
	sandboxNS map[string]bool
	classes   map[string]bool
	caps      map[string]bool
	limits    []declaredLimit
	sizeLimit *resource.Quantity
	patterns  []glob // secret env name patterns
	egress    *egressModel
	pss       []pssCheck
	// podRules and dockerRules are the rows the policy asks for.
	podRules    []*podRule
	dockerRules []*dockerRule
	podChecks   sync.Pool // of *podCheck, for checkPod
	net         *netpolIndex
	cil         *ciliumIndex
	anp         *adminIndex
	// nsLabels are the labels of the namespaces known (live: all of them;
	// files: the Namespace objects they hold). Admin network policies and
	// Cilium select on them.
	nsLabels map[string]map[string]string
	// ciliumCluster is the Cilium cluster name pods carry as
	// io.cilium.k8s.policy.cluster ("default", Cilium's own default).
	ciliumCluster string
	// egressKnown says whether the network policies of the cluster are
	// known: a live cluster always, files only when they hold any.
	egressKnown bool
	// undet logs the policies whose namespace selectors could not be
	// judged (a namespace's labels unknown), for the run's notes.
	undet undeterminedLog
}

type declaredLimit struct {
	name corev1.ResourceName
	text string
	q    resource.Quantity
}

// NewEngine compiles a validated, defaulted policy into rule inputs.
func NewEngine(p *policy.Policy) (*Engine, error) {
	s := &p.Spec
	e := &Engine{
		p:         p,
		selector:  labels.SelectorFromSet(s.Selector.MatchLabels),
		sandboxNS: map[string]bool{},
		classes:   map[string]bool{},
		caps:      map[string]bool{},
		net:       newNetpolIndex(),
		cil:       newCiliumIndex(),
		anp:       &adminIndex{},
		nsLabels:  map[string]map[string]string{},
		// Cilium's own default when the cluster is given no name.
		ciliumCluster: "default",
	}
	for _, ns := range s.Namespaces {
		e.sandboxNS[ns] = true
	}
	for _, c := range s.Runtime.ClassNames {
		e.classes[c] = true
	}
	for _, c := range s.Capabilities {
		e.caps[policy.NormalizeCapability(c)] = true
	}
	for _, name := range sortedKeys(s.Resources.Limits) {
		q, err := resource.ParseQuantity(s.Resources.Limits[name])
		if err != nil {
			return nil, fmt.Errorf("policy %s: spec.resources.limits.%s: %w", p.Metadata.Name, name, err)
		}
		e.limits = append(e.limits, declaredLimit{name: corev1.ResourceName(name), text: s.Resources.Limits[name], q: q})
	}
	if s.Filesystem.SizeLimit != "" {
		q, err := resource.ParseQuantity(s.Filesystem.SizeLimit)
		if err != nil {
			return nil, fmt.Errorf("policy %s: spec.filesystem.sizeLimit: %w", p.Metadata.Name, err)
		}
		e.sizeLimit = &q
	}
	for _, pat := range s.Secrets.EnvNamePatterns {
		e.patterns = append(e.patterns, compileGlob(pat))
	}
	var err error
	if e.egress, err = newEgressModel(p); err != nil {
		return nil, err
	}
	if e.pss, err = restrictedChecks(); err != nil {
		return nil, err
	}
	e.podRules, e.dockerRules = applying(podRules, s), applying(dockerRules, s)
	return e, nil
}

// SetNamespace records a namespace and its labels.
func (e *Engine) SetNamespace(name string, nsLabels map[string]string) {
	l := make(map[string]string, len(nsLabels)+1)
	for k, v := range nsLabels {
		l[k] = v
	}
	// The API server sets it on every namespace; files may leave it out.
	l[namespaceNameLabel] = name
	e.nsLabels[name] = l
	e.anp.byNS = nil // selections by namespace labels are stale
}

// KnowsNamespace reports whether a namespace was recorded.
func (e *Engine) KnowsNamespace(name string) bool { _, ok := e.nsLabels[name]; return ok }

// namespaceLabels are a namespace's labels and whether they are known;
// for one not recorded, only the name label every namespace carries.
func (e *Engine) namespaceLabels(ns string) (map[string]string, bool) {
	if l, ok := e.nsLabels[ns]; ok {
		return l, true
	}
	return map[string]string{namespaceNameLabel: ns}, false
}

// SetCiliumCluster names the Cilium cluster (io.cilium.k8s.policy.cluster).
func (e *Engine) SetCiliumCluster(name string) {
	if name != "" {
		e.ciliumCluster = name
	}
}

// SetEgressKnown says whether the cluster's network policies were loaded;
// without them the egress rules are not applied to pods.
func (e *Engine) SetEgressKnown(known bool) { e.egressKnown = known }

// EgressKnown reports whether egress rules are applied.
func (e *Engine) EgressKnown() bool { return e.egressKnown }

// IsSandbox says whether a pod is one the policy governs: it carries the
// selector's labels, or it lives in a sandbox namespace (where a pod without
// the labels is itself drift).
func (e *Engine) IsSandbox(ns string, podLabels map[string]string) bool {
	return e.sandboxNS[ns] || e.selector.Matches(labels.Set(podLabels))
}

// CheckPod applies every pod rule and, when the cluster's network policies
// are known, the egress rules. It returns nil for a conformant pod.
func (e *Engine) CheckPod(pod *corev1.Pod) []report.Finding {
	return e.settle(e.checkPod(pod))
}

// checkPod is CheckPod for many goroutines at once: it only reads the
// engine, and leaves the findings reported once per run (onceSpan) to
// settle, which the caller runs in the pods' order, one at a time, so the
// first pod in file order carries them, as CheckPod would give them.
func (e *Engine) checkPod(pod *corev1.Pod) ([]report.Finding, []onceSpan) {
	c := e.getPodCheck()
	*c = podCheck{
		e:    e,
		kind: "pod",
		name: pod.Name,
		gen:  pod.GenerateName,
		ns:   pod.Namespace,
		view: newPodView(&pod.ObjectMeta, &pod.Spec, "spec", "metadata"),
	}
	c.run()
	if e.egressKnown {
		e.checkEgress(c, pod)
	}
	out, once := c.out, c.once
	e.putPodCheck(c)
	return out, once
}

// getPodCheck returns a podCheck to fill. The rules take it through a
// function value, so it lives on the heap: one is reused rather than one
// allocated per pod.
func (e *Engine) getPodCheck() *podCheck {
	if c, ok := e.podChecks.Get().(*podCheck); ok {
		return c
	}
	return new(podCheck)
}

// putPodCheck takes a podCheck back once its findings are out.
func (e *Engine) putPodCheck(c *podCheck) {
	*c = podCheck{} // hold on to no pod
	e.podChecks.Put(c)
}

// onceSpan marks findings out[start:end] that the run reports once, for
// the first object that has key.
type onceSpan struct {
	key        string
	start, end int
}

// settle drops the once-per-run findings whose key an earlier object
// already carried, and marks the others' keys as carried. Not safe for
// concurrent use.
func (e *Engine) settle(out []report.Finding, once []onceSpan) []report.Finding {
	if len(once) == 0 {
		return out
	}
	kept := make([]report.Finding, 0, len(out))
	at := 0
	for _, sp := range once {
		kept = append(kept, out[at:sp.start]...)
		at = sp.end
		if e.cil.missingSeen[sp.key] {
			continue
		}
		e.cil.missingSeen[sp.key] = true
		kept = append(kept, out[sp.start:sp.end]...)
	}
	kept = append(kept, out[at:]...)
	if len(kept) == 0 {
		return nil
	}
	return kept
}

func podName(name, generateName string) string {
	if name == "" && generateName != "" {
		return generateName + "*"
	}
	return name
}

// podCheck is one object going through the pod rules: a Pod, or the pod
// template of a Sandbox (then spec is "spec.podTemplate.spec").
type podCheck struct {
	e *Engine
	// kind ("pod" or "sandbox"), name and generateName make the target,
	// which is built only when something fails.
	kind, name, gen string
	target          string
	ns              string
	view            podView
	// rule is the pod rule being run (failAt).
	rule string
	out  []report.Finding
	// sites are where out's findings of the pod rules are (sortBySite),
	// in sitesBuf while they fit.
	sites    []site
	sitesBuf [16]site
	// failed holds the rules that failed for this object (for the PSS
	// de-duplication); allocated on the first failure only.
	failed map[string]bool
	where  string // provenance, computed on the first failure
	// notes are evidence for one rule's findings (a default the verdict
	// depends on), by rule ID.
	notes map[string]string
	// once are the findings of out reported once per run (settle).
	once []onceSpan
}

// ensureTarget builds the target name on first use.
func (c *podCheck) ensureTarget() string {
	if c.target == "" {
		c.target = c.kind + "/" + c.ns + "/" + podName(c.name, c.gen)
	}
	return c.target
}

// provenance says where the object comes from: its owner and node, so a
// finding leads to the controller or template that has to change.
func (c *podCheck) provenance() string {
	kind := c.kind
	if c.view.spec != "spec" {
		kind += " pod template"
	}
	s := kind + " " + c.ns + "/" + podName(c.name, c.gen)
	for _, o := range c.view.om.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			s += ", created by " + o.Kind + "/" + o.Name
		}
	}
	if c.view.ps.NodeName != "" {
		s += ", on node " + c.view.ps.NodeName
	}
	return s
}

func (c *podCheck) fail(rule, subject, expected, actual, fix, evidence string) {
	c.add(report.Fail, rule, subject, expected, actual, fix, evidence)
}

// add records a finding of the object: a failure, or a place a rule could
// not judge (inconclusive).
func (c *podCheck) add(status report.Status, rule, subject, expected, actual, fix, evidence string) {
	if c.failed == nil {
		c.failed = map[string]bool{}
		c.where = c.provenance()
	}
	c.ensureTarget()
	if status == report.Fail {
		c.failed[rule] = true
	}
	if evidence == "" {
		evidence = c.where
	} else {
		evidence = c.where + "; " + evidence
	}
	if n := c.notes[rule]; n != "" {
		evidence += "; " + n
	}
	c.out = append(c.out, report.Finding{
		Check: rule, Target: c.target, Namespace: c.ns, Subject: subject, Status: status,
		Expected: expected, Actual: actual, Fix: fix, Evidence: evidence,
	})
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// selectorText renders matchLabels as k=v,k=v in key order.
func selectorText(m map[string]string) string {
	var b strings.Builder
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + m[k])
	}
	return b.String()
}

func quoteList(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

func containsFold(xs []string, want string) bool {
	return slices.ContainsFunc(xs, func(x string) bool { return strings.EqualFold(x, want) })
}
