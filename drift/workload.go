package drift

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandprobe/sandprobe/report"
)

// Template is a pod template: what every pod a workload creates will run.
// Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs, agent
// Sandboxes and SandboxTemplates are all checked through one, so a
// privileged Deployment is drift before (and whether or not) it has pods.
type Template struct {
	Kind      string // "Deployment", as the API names it
	Namespace string
	Name      string
	UID       types.UID
	// Owner is the workload's controller (a Deployment for a ReplicaSet, a
	// CronJob for a Job): its pods are reported at the owner's template
	// when the two agree.
	Owner *metav1.OwnerReference
	// Meta holds the template's labels and annotations; Spec its PodSpec.
	Meta metav1.ObjectMeta
	Spec *corev1.PodSpec
	// SpecPath and MetaPath are the field paths of the template
	// ("spec.template.spec"), so a finding names the field to change.
	SpecPath, MetaPath string
	// Replicas is the desired number of pods; nil where the kind has none.
	Replicas *int32
	// Notes are evidence for the findings of one rule (by rule ID): a
	// default a controller may apply that the verdict depends on.
	Notes map[string]string
}

// Target is how findings name the template: "deployment/ns/name".
func (t *Template) Target() string {
	return strings.ToLower(t.Kind) + "/" + t.Namespace + "/" + t.Name
}

func controllerOf(refs []metav1.OwnerReference) *metav1.OwnerReference {
	for i := range refs {
		if refs[i].Controller != nil && *refs[i].Controller {
			return &refs[i]
		}
	}
	return nil
}

func newTemplate(kind string, m *metav1.ObjectMeta, tmpl *corev1.PodTemplateSpec, prefix string, replicas *int32) *Template {
	return &Template{
		Kind: kind, Namespace: m.Namespace, Name: m.Name, UID: m.UID, Owner: controllerOf(m.OwnerReferences),
		Meta: tmpl.ObjectMeta, Spec: &tmpl.Spec,
		SpecPath: prefix + ".spec", MetaPath: prefix + ".metadata", Replicas: replicas,
	}
}

// WorkloadTemplate returns the pod template of a typed workload object, or
// nil for an object that has none. The API's defaults that decide a
// verdict are applied (an unset replicas is 1).
func WorkloadTemplate(obj any) *Template {
	one := int32(1)
	orOne := func(r *int32) *int32 {
		if r == nil {
			return &one
		}
		return r
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return newTemplate("Deployment", &o.ObjectMeta, &o.Spec.Template, "spec.template", orOne(o.Spec.Replicas))
	case *appsv1.ReplicaSet:
		return newTemplate("ReplicaSet", &o.ObjectMeta, &o.Spec.Template, "spec.template", orOne(o.Spec.Replicas))
	case *appsv1.StatefulSet:
		return newTemplate("StatefulSet", &o.ObjectMeta, &o.Spec.Template, "spec.template", orOne(o.Spec.Replicas))
	case *appsv1.DaemonSet:
		return newTemplate("DaemonSet", &o.ObjectMeta, &o.Spec.Template, "spec.template", nil)
	case *batchv1.Job:
		return newTemplate("Job", &o.ObjectMeta, &o.Spec.Template, "spec.template", orOne(o.Spec.Parallelism))
	case *batchv1.CronJob:
		return newTemplate("CronJob", &o.ObjectMeta, &o.Spec.JobTemplate.Spec.Template, "spec.jobTemplate.spec.template", nil)
	}
	return nil
}

// CheckTemplate applies the pod rules to a template and, when the cluster's
// network policies are known, the egress rules its pods will be judged by.
// It reports whether the template is a sandbox under this policy at all.
func (e *Engine) CheckTemplate(t *Template) ([]report.Finding, bool) {
	if !e.IsSandbox(t.Namespace, t.Meta.Labels) {
		return nil, false
	}
	meta := t.Meta
	meta.Namespace = t.Namespace
	c := e.getPodCheck()
	defer e.putPodCheck(c)
	*c = podCheck{
		e:     e,
		kind:  strings.ToLower(t.Kind),
		name:  t.Name,
		ns:    t.Namespace,
		view:  newPodView(&meta, t.Spec, t.SpecPath, t.MetaPath),
		notes: t.Notes,
	}
	c.run()
	if e.egressKnown {
		// Its pods carry the template's labels and service account.
		pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Labels: t.Meta.Labels}}
		pod.Spec.HostNetwork = t.Spec.HostNetwork
		pod.Spec.ServiceAccountName = t.Spec.ServiceAccountName
		e.checkEgress(c, &pod)
	}
	return e.settle(c.out, c.once), true
}

// templateEntry is a checked template, waiting for its pods to be counted
// before its findings are reported.
type templateEntry struct {
	t        *Template
	findings []report.Finding
	// keys are the template's findings as a pod of it would carry them
	// (check and subject, the subject relative to the pod).
	keys   map[string]bool
	parent *templateEntry
	pods   int
}

// Templates folds pods into the templates they were created from: a pod
// whose findings its template already has is counted there, not reported
// again; what a pod has beyond its template (an older revision, a mutating
// webhook) is reported on the pod. Add every template first, then stream
// the pods through Pod, then Flush. Not safe for concurrent use.
type Templates struct {
	byUID map[types.UID]*templateEntry
	order []*templateEntry
	// names finds an owner without a UID (offline files rarely carry
	// UIDs): kind/namespace/name.
	names  map[string]*templateEntry
	linked bool
}

// NewTemplates returns an empty set.
func NewTemplates() *Templates {
	return &Templates{byUID: map[types.UID]*templateEntry{}, names: map[string]*templateEntry{}}
}

// Len is the number of sandbox templates held.
func (ts *Templates) Len() int { return len(ts.order) }

// Add checks a template and keeps it if it is a sandbox.
func (ts *Templates) Add(e *Engine, t *Template) {
	fs, ok := e.CheckTemplate(t)
	if !ok {
		return
	}
	// Keep only what reporting needs: the spec belongs to a list page that
	// must not stay in memory.
	kept := &Template{Kind: t.Kind, Namespace: t.Namespace, Name: t.Name, UID: t.UID, SpecPath: t.SpecPath, MetaPath: t.MetaPath}
	if t.Owner != nil {
		o := *t.Owner
		kept.Owner = &o
	}
	if t.Replicas != nil {
		r := *t.Replicas
		kept.Replicas = &r
	}
	t = kept
	en := &templateEntry{t: t, findings: fs}
	if len(fs) > 0 {
		en.keys = make(map[string]bool, len(fs))
		for i := range fs {
			en.keys[foldKey(&fs[i], t.SpecPath, t.MetaPath)] = true
		}
	}
	if t.UID != "" {
		ts.byUID[t.UID] = en
	}
	ts.names[t.Kind+"/"+t.Namespace+"/"+t.Name] = en
	ts.order = append(ts.order, en)
	ts.linked = false
}

// foldKey is a finding as a pod would carry it: its check and its subject
// with the template's field paths replaced by the pod's.
func foldKey(f *report.Finding, specPath, metaPath string) string {
	s := f.Subject
	switch {
	case strings.HasPrefix(s, specPath):
		s = "spec" + s[len(specPath):]
	case strings.HasPrefix(s, metaPath):
		s = "metadata" + s[len(metaPath):]
	}
	return f.Check + "\x00" + s
}

func (ts *Templates) lookup(ns string, ref *metav1.OwnerReference) *templateEntry {
	if ref == nil {
		return nil
	}
	if ref.UID != "" {
		if en := ts.byUID[ref.UID]; en != nil {
			return en
		}
	}
	return ts.names[ref.Kind+"/"+ns+"/"+ref.Name]
}

// link connects each template to its owner's (ReplicaSet → Deployment,
// Job → CronJob) once all are known.
func (ts *Templates) link() {
	if ts.linked {
		return
	}
	for _, en := range ts.order {
		en.parent = ts.lookup(en.t.Namespace, en.t.Owner)
		if en.parent == en {
			en.parent = nil
		}
	}
	ts.linked = true
}

// Pod folds a pod's findings into its template: it returns what is left to
// report on the pod itself (nil when the template explains everything).
func (ts *Templates) Pod(pod *corev1.Pod, fs []report.Finding) []report.Finding {
	ts.link()
	en := ts.lookup(pod.Namespace, controllerOf(pod.OwnerReferences))
	if en == nil {
		return fs
	}
	for a := en; a != nil; a = a.parent {
		a.pods++
	}
	if len(fs) == 0 {
		return nil
	}
	var extra []report.Finding
	for i := range fs {
		if !en.keys[foldKey(&fs[i], "spec", "metadata")] {
			extra = append(extra, fs[i])
		}
	}
	for i := range extra {
		extra[i].Evidence = appendEvidence(extra[i].Evidence, "beyond what its template "+en.t.Target()+" has: the pod differs from the template it was created from (an older revision, or changed at admission)")
	}
	return extra
}

// Flush reports every template into col, once, with its pods counted: a
// template owned by another is reported only for what its owner does not
// already have, and only while it has pods (an old ReplicaSet scaled to
// zero runs nothing).
func (ts *Templates) Flush(col *Collector) {
	ts.link()
	sort.SliceStable(ts.order, func(i, j int) bool { return ts.order[i].t.Target() < ts.order[j].t.Target() })
	for _, en := range ts.order {
		fs := en.findings
		if p := en.parent; p != nil {
			if en.pods == 0 {
				continue // an old revision that runs nothing: its owner is reported
			}
			var own []report.Finding
			for i := range fs {
				if !p.keys[foldKey(&fs[i], en.t.SpecPath, en.t.MetaPath)] {
					own = append(own, fs[i])
				}
			}
			fs = own
		}
		count := podsText(en)
		for i := range fs {
			fs[i].Evidence = appendEvidence(fs[i].Evidence, count)
		}
		col.Add(fs)
	}
	ts.order, ts.byUID, ts.names = nil, map[types.UID]*templateEntry{}, map[string]*templateEntry{}
}

func podsText(en *templateEntry) string {
	s := strconv.Itoa(en.pods) + " running pods created from it"
	switch en.pods {
	case 0:
		s = "no running pod created from it yet"
	case 1:
		s = "1 running pod created from it"
	}
	if r := en.t.Replicas; r != nil {
		s += fmt.Sprintf(" (%d desired)", *r)
	}
	if en.pods == 0 {
		return s + ": every pod it creates will carry this finding"
	}
	return s + ": each carries this finding, reported here once"
}

func appendEvidence(ev, more string) string {
	switch {
	case ev == "":
		return more
	case more == "":
		return ev
	}
	return ev + "; " + more
}
