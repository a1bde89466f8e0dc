package drift

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/sandprobe/sandprobe/internal/manifest"
)

// Manifests are the objects read from files: multi-document YAML or JSON,
// with `List`s (and typed lists like PodList) unpacked. They are read the
// way the API server would store them: an object without a namespace lands
// in Namespace ("default" unless set, as `kubectl apply -n`), the items of a
// typed list take the list's item kind, and the defaults that decide a
// verdict are applied (a volume with no source is an emptyDir).
type Manifests struct {
	Pods            []*corev1.Pod
	NetworkPolicies []*networkingv1.NetworkPolicy
	Cilium          []*unstructured.Unstructured
	// Sandboxes are agent Sandbox and SandboxTemplate objects.
	Sandboxes []*unstructured.Unstructured
	// Claims and WarmPools are agent SandboxClaim and SandboxWarmPool
	// objects: a claim may adopt a warm sandbox of a pool (checkClaims).
	Claims, WarmPools []*unstructured.Unstructured
	// Workloads are the pod templates of Deployments, ReplicaSets,
	// StatefulSets, DaemonSets, Jobs and CronJobs.
	Workloads []*Template
	// AdminNetworkPolicies holds AdminNetworkPolicy,
	// BaselineAdminNetworkPolicy and ClusterNetworkPolicy objects.
	AdminNetworkPolicies []*unstructured.Unstructured
	// Namespaces give the labels admin network policies and Cilium select
	// on; a namespace not in the files carries only its name label.
	Namespaces []*corev1.Namespace
	// Skipped counts objects of kinds drift does not check, by kind.
	Skipped map[string]int
	// Namespace is where objects without metadata.namespace land; "" is "default".
	Namespace string
	// NamespaceLabels give the labels of namespaces (drift -f
	// --namespace-labels), over those of a Namespace object in the files:
	// admin network policies and Cilium select on them.
	NamespaceLabels map[string]map[string]string
	// origins say where each object was read (Locate).
	origins origins
	// onPod, when set, takes each pod instead of Pods (FileScan streams
	// them; their origins are FileScan's to keep).
	onPod func(*corev1.Pod, *origin)
	// podsLater (drift -f's first pass, with onPod) hands a pod item of
	// a List read from the block-YAML tree to onPod undecoded (nil): the
	// second pass decodes it, and reports it if it is bad.
	podsLater bool
	// lazyLines (drift -f's first pass) keeps no block-YAML tree on an
	// origin: Locate reads the document again when it needs a line
	// (liteTree).
	lazyLines bool
}

// typeMeta is enough of a document to know what it is.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Items is set when the object has an items key, null included: kubectl
	// then reads it as a list (unstructured.UnstructuredJSONScheme).
	Items json.RawMessage `json:"items"`
}

// DecodeManifests reads every document of r into m. source names the file
// in errors ("pods.yaml: document 3: …") and in the findings' File.
func (m *Manifests) DecodeManifests(r io.Reader, source string) error {
	if m.Skipped == nil {
		m.Skipped = map[string]int{}
	}
	if m.origins == nil {
		m.origins = origins{}
	}
	docs, err := manifest.Split(r)
	for i := range docs {
		if err := m.addDocument(&docs[i], source); err != nil {
			return fmt.Errorf("%s: document %d: %w", source, i+1, err)
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	return nil
}

// addDocument decodes one YAML or JSON document; an empty one (comments,
// a bare separator, null) holds nothing.
func (m *Manifests) addDocument(doc *manifest.Document, source string) error {
	raw := doc.Data
	if m.origins == nil {
		m.origins = origins{}
	}
	at := &origin{file: source, doc: doc}
	if doc.JSON {
		// A value of a JSON stream, read as JSON as kubectl reads it.
		return m.addRead(raw, at)
	}
	if blankDocument(raw) {
		return nil
	}
	if fastYAML {
		if done, err := m.addFast(raw, at); done {
			return err
		}
	}
	if err := manifest.SameJSONKey(raw); err != nil {
		return err
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return err
	}
	return m.addRead(js, at)
}

// addFast reads a document of the block-YAML subset through the
// block-YAML reader and says whether it did; the reader's tree is kept on
// the origin, where Locate finds lines. Its JSON is sigs.k8s.io/yaml's
// byte for byte and holds only string keys, none twice (the reader
// declines anything else), so a List its items' kinds leave to kubectl's
// rules (addTreeList), or an object that does not decode, goes to addRead
// as the slow path's JSON would, with the same result.
func (m *Manifests) addFast(raw []byte, at *origin) (bool, error) {
	lines, err := manifest.Parse(raw)
	if err != nil {
		return false, nil
	}
	at.lite = &liteTree{}
	if !m.lazyLines {
		at.lite.node = lines
	}
	if done, err := m.addTreeList(lines, at, len(raw)); done {
		return true, err
	}
	js := lines.JSON(len(raw))
	var tm typeMeta
	if strictish(js, &tm) == nil && tm.Items == nil && m.addObject(js, tm, at, lines) == nil {
		return true, nil
	}
	return true, m.addRead(js, at)
}

// addTreeList reads a List from the block-YAML tree, item by item, as
// addRead reads its JSON, and says whether it did. It takes only Lists
// whose every item names its own kind (a string) and apiVersion (a string,
// or none), holds no list and whose metadata decodes: then kubectl's
// unstructured round trip changes nothing (the tree's JSON already has
// its keys sorted, its numbers int64), so an item's JSON from the tree is
// the JSON addRead would give addObject, byte for byte, and a Pod item
// decodes straight from the tree (manifest.Decode, the plain Pod's path).
// Any other List (items that take the List's kind and apiVersion, kinds
// that are not strings) is addRead's. A bad item's error is the one
// addRead gives (the List read again its way).
func (m *Manifests) addTreeList(root *manifest.Node, at *origin, size int) (bool, error) {
	items, ok := root.Get("items").Items()
	if !ok {
		return false, nil
	}
	listKind, ok := root.Get("kind").Text()
	if !ok || listKind == "" || !optionalText(root.Get("apiVersion")) {
		return false, nil
	}
	if md := root.Get("metadata"); md != nil && utiljson.Unmarshal(md.JSON(0), &metav1.ObjectMeta{}) != nil {
		return false, nil
	}
	kinds := make([]typeMeta, len(items))
	for i, it := range items {
		kind, ok := it.Get("kind").Text()
		if !it.IsMapping() || it.Has("items") || !ok || kind == "" || !optionalText(it.Get("apiVersion")) {
			return false, nil
		}
		av, _ := it.Get("apiVersion").Text()
		kinds[i] = typeMeta{APIVersion: av, Kind: kind}
	}
	for i, it := range items {
		itemAt := &origin{file: at.file, doc: at.doc, lite: at.lite, items: append(slices.Clone(at.items), i)}
		if err := m.addTreeObject(it, kinds[i], itemAt); err != nil {
			// The error addRead gives, for the same item or an earlier
			// pod this pass left for later.
			scratch := &Manifests{Namespace: m.Namespace, NamespaceLabels: m.NamespaceLabels, Skipped: map[string]int{}, origins: origins{}, onPod: func(*corev1.Pod, *origin) {}}
			if slow := scratch.addRead(root.JSON(size), at); slow != nil {
				return true, slow
			}
			return true, fmt.Errorf("%s item %d: %w", listKind, i, err)
		}
	}
	return true, nil
}

// optionalText says whether n is absent or a string scalar.
func optionalText(n *manifest.Node) bool {
	_, ok := n.Text()
	return n == nil || ok
}

// addTreeObject is addObject for a List item read from the tree: a Pod
// straight from the tree when manifest.Decode can (it declines what the
// JSON path must decide), anything else from the item's JSON.
func (m *Manifests) addTreeObject(n *manifest.Node, tm typeMeta, at *origin) error {
	if tm.Kind == "Pod" && !strings.Contains(tm.APIVersion, "/") {
		if m.podsLater {
			m.onPod(nil, at)
			return nil
		}
		var p corev1.Pod
		if manifest.Decode(n, &p) == nil {
			m.takePod(&p, at)
			return nil
		}
	}
	return m.addObject(n.JSON(0), tm, at, n)
}

// blankDocument says whether a YAML document holds nothing but blank
// lines, comments and separators. It looks at each line in place: it
// runs on every document, and copying the lines that hold something out
// (to see whether any did) was a fifth of drift -f's first pass.
func blankDocument(b []byte) bool {
	if manifest.HasUnicodeBreak(b) {
		// A comment ends at NEL, LS or PS too: what looks like a comment
		// line may hold a key. go-yaml decides whether anything is there.
		return len(bytes.TrimSpace(b)) == 0
	}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		t := bytes.TrimSpace(line)
		if len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) {
			return false
		}
	}
	return true
}

// namespace is where an object that names none lands.
func (m *Manifests) namespace(ns string) string {
	switch {
	case ns != "":
		return ns
	case m.Namespace != "":
		return m.Namespace
	}
	return "default"
}

// addRead reads the JSON of one document as kubectl reads it before it
// sends anything (cli-runtime's unstructured decoder and its list
// flattening): an object with an items key is a list, whatever its kind;
// an item with neither kind nor apiVersion takes the list's ("Pod" and
// "v1" in a PodList); an item that is itself a list, or an object without
// a kind, is refused. Each object then goes to addObject as the JSON
// kubectl sends.
func (m *Manifests) addRead(js []byte, at *origin) error {
	js = bytes.TrimSpace(js)
	if len(js) == 0 || bytes.Equal(js, []byte("null")) {
		return nil
	}
	obj, _, err := unstructured.UnstructuredJSONScheme.Decode(js, nil, nil)
	if err == nil {
		// kubectl's metadataValidatingDecoder: metadata must decode.
		err = utiljson.Unmarshal(js, &metadataOnly{})
	}
	if err != nil {
		if runtime.IsMissingKind(err) {
			return errors.New("not a Kubernetes object: no kind")
		}
		return fmt.Errorf("not a Kubernetes object: %w", err)
	}
	list, ok := obj.(*unstructured.UnstructuredList)
	if !ok {
		return m.addUnstructured(obj.(*unstructured.Unstructured), at)
	}
	for i := range list.Items {
		item := &list.Items[i]
		var itemAt *origin
		if at != nil {
			itemAt = &origin{file: at.file, doc: at.doc, lite: at.lite, items: append(slices.Clone(at.items), i)}
		}
		err := error(nil)
		switch {
		case item.GetKind() == "":
			err = errors.New("not a Kubernetes object: no kind")
		case item.IsList():
			err = errors.New("a list inside a list")
		default:
			err = m.addUnstructured(item, itemAt)
		}
		if err != nil {
			return fmt.Errorf("%s item %d: %w", list.GetKind(), i, err)
		}
	}
	return nil
}

// metadataOnly is what kubectl's metadataValidatingDecoder decodes.
type metadataOnly struct {
	metav1.TypeMeta   `json:""`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

func (m *Manifests) addUnstructured(u *unstructured.Unstructured, at *origin) error {
	js, err := u.MarshalJSON()
	if err != nil {
		return err
	}
	return m.addObject(js, typeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()}, at, nil)
}

// addObject decodes one object, not a list, from its JSON; tm is its kind.
// tree, when the block-YAML reader read it, is the same object's tree: a
// workload decodes from it where manifest.Decode can.
func (m *Manifests) addObject(js []byte, tm typeMeta, at *origin, tree *manifest.Node) error {
	if tm.Kind == "" {
		return fmt.Errorf("not a Kubernetes object: no kind")
	}
	group, _, _ := strings.Cut(tm.APIVersion, "/")
	if !strings.Contains(tm.APIVersion, "/") {
		group = ""
	}
	switch {
	case tm.Kind == "Pod" && group == "":
		return m.addPod(js, at)
	case tm.Kind == "Namespace" && group == "":
		var ns corev1.Namespace
		if err := strictish(js, &ns); err != nil {
			return fmt.Errorf("namespace: %w", err)
		}
		m.Namespaces = append(m.Namespaces, &ns)
	case tm.Kind == "NetworkPolicy" && group == "networking.k8s.io":
		var np networkingv1.NetworkPolicy
		if err := strictish(js, &np); err != nil {
			return fmt.Errorf("networkpolicy: %w", err)
		}
		np.Namespace = m.namespace(np.Namespace)
		m.NetworkPolicies = append(m.NetworkPolicies, &np)
		m.origins.add("networkpolicy/"+np.Namespace+"/"+np.Name, at)
	case isUnstructuredKind(tm.Kind, group):
		return m.addUnstructuredKind(js, tm.Kind, at)
	default:
		return m.addWorkload(js, tree, tm.Kind, group, at)
	}
	return nil
}

// addPod decodes a pod and adds it (takePod).
func (m *Manifests) addPod(js []byte, at *origin) error {
	var p corev1.Pod
	if err := strictish(js, &p); err != nil {
		return fmt.Errorf("pod: %w", err)
	}
	m.takePod(&p, at)
	return nil
}

// takePod adds a decoded pod: to onPod when set, otherwise to Pods.
func (m *Manifests) takePod(p *corev1.Pod, at *origin) {
	p.Namespace = m.namespace(p.Namespace)
	defaultPodSpec(&p.Spec)
	if m.onPod != nil {
		m.onPod(p, at)
		return
	}
	m.Pods = append(m.Pods, p)
	m.origins.add("pod/"+p.Namespace+"/"+podName(p.Name, p.GenerateName), at)
}

// isUnstructuredKind says whether drift reads kind of group as an
// unstructured object: Cilium's policies, the agent Sandbox APIs, the
// admin network policies.
func isUnstructuredKind(kind, group string) bool {
	switch {
	case (kind == CiliumNetworkPolicyKind || kind == CiliumClusterwideNetworkPolicyKind) && group == "cilium.io":
	case (kind == SandboxKind && group == SandboxGroup) || (kind == SandboxTemplateKind && group == SandboxTemplateGroup):
	case (kind == SandboxClaimKind || kind == SandboxWarmPoolKind) && group == SandboxTemplateGroup:
	case (kind == AdminNetworkPolicyKind || kind == BaselineAdminNetworkPolicyKind || kind == ClusterNetworkPolicyKind) && group == PolicyAPIGroup:
	default:
		return false
	}
	return true
}

// addUnstructuredKind adds an object of one of isUnstructuredKind's kinds.
func (m *Manifests) addUnstructuredKind(js []byte, kind string, at *origin) error {
	u, err := unstructuredFrom(js)
	if err != nil {
		return err
	}
	switch kind {
	case CiliumNetworkPolicyKind, CiliumClusterwideNetworkPolicyKind:
		if kind == CiliumNetworkPolicyKind {
			u.SetNamespace(m.namespace(u.GetNamespace()))
		}
		m.Cilium = append(m.Cilium, u)
		m.origins.add(strings.ToLower(kind)+"/"+objName(u.GetNamespace(), u.GetName()), at)
	case SandboxKind, SandboxTemplateKind:
		u.SetNamespace(m.namespace(u.GetNamespace()))
		m.Sandboxes = append(m.Sandboxes, u)
		m.origins.add(strings.ToLower(kind)+"/"+u.GetNamespace()+"/"+u.GetName(), at)
	case SandboxClaimKind, SandboxWarmPoolKind:
		u.SetNamespace(m.namespace(u.GetNamespace()))
		if kind == SandboxClaimKind {
			m.Claims = append(m.Claims, u)
		} else {
			m.WarmPools = append(m.WarmPools, u)
		}
		m.origins.add(strings.ToLower(kind)+"/"+u.GetNamespace()+"/"+u.GetName(), at)
	default: // the admin network policies
		m.AdminNetworkPolicies = append(m.AdminNetworkPolicies, u)
		m.origins.add(strings.ToLower(kind)+"/"+u.GetName(), at)
	}
	return nil
}

// addWorkload adds a workload drift checks through its pod template; any
// other kind is counted as skipped.
func (m *Manifests) addWorkload(js []byte, tree *manifest.Node, kind, group string, at *origin) error {
	obj := newWorkload(kind, group)
	if obj == nil {
		m.Skipped[kind]++
		return nil
	}
	// Straight from the tree, as a plain Pod is (TestDecodeWorkloadEveryField
	// and FuzzDecodeNode hold manifest.Decode to strictish for workloads);
	// what it declines, or cannot decode, is the JSON's to decide.
	if tree == nil || manifest.Decode(tree, obj) != nil {
		obj = newWorkload(kind, group)
		if err := strictish(js, obj); err != nil {
			return fmt.Errorf("%s: %w", strings.ToLower(kind), err)
		}
	}
	t := WorkloadTemplate(obj)
	t.Namespace = m.namespace(t.Namespace)
	defaultPodSpec(t.Spec)
	m.Workloads = append(m.Workloads, t)
	m.origins.add(strings.ToLower(t.Kind)+"/"+t.Namespace+"/"+t.Name, at)
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// newWorkload returns an empty typed object for a workload kind drift
// checks through its pod template, or nil.
func newWorkload(kind, group string) any {
	switch group + "/" + kind {
	case "apps/Deployment":
		return &appsv1.Deployment{}
	case "apps/ReplicaSet":
		return &appsv1.ReplicaSet{}
	case "apps/StatefulSet":
		return &appsv1.StatefulSet{}
	case "apps/DaemonSet":
		return &appsv1.DaemonSet{}
	case "batch/Job":
		return &batchv1.Job{}
	case "batch/CronJob":
		return &batchv1.CronJob{}
	}
	return nil
}

// defaultPodSpec applies the API server's defaults that decide a verdict:
// a volume with no source is stored as an emptyDir (with no size limit).
func defaultPodSpec(ps *corev1.PodSpec) {
	for i := range ps.Volumes {
		if reflect.ValueOf(ps.Volumes[i].VolumeSource).IsZero() {
			ps.Volumes[i].EmptyDir = &corev1.EmptyDirVolumeSource{}
		}
	}
}

// strictish decodes case-sensitively, as the API server does, so a
// mis-capitalised field is not silently taken for the real one.
func strictish(js []byte, into any) error {
	return kjson.UnmarshalCaseSensitivePreserveInts(js, into)
}

func unstructuredFrom(js []byte) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		return nil, err
	}
	return u, nil
}

// SkippedText describes skipped kinds for a run note.
func (m *Manifests) SkippedText() string {
	var parts []string
	kinds := make([]string, 0, len(m.Skipped))
	for k := range m.Skipped {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%d %s", m.Skipped[k], k))
	}
	return strings.Join(parts, ", ")
}

// CheckManifests runs the rules over objects read from files. Egress rules
// apply only when the files hold network policies: a lone pod manifest says
// nothing about the cluster's policies. Workloads and Sandboxes are checked
// through their pod templates; a pod created from one of them (by its
// controller owner reference) is reported at the template.
func CheckManifests(e *Engine, m *Manifests, col *Collector) error {
	before := len(col.Findings)
	defer func() { m.Locate(col.Findings[before:]) }()
	ts, err := m.prepare(e, col, len(m.Pods) > 0)
	if err != nil {
		return err
	}
	for _, p := range m.Pods {
		checkFilePod(e, ts, col, p)
	}
	m.checkClaims(e, col)
	m.judgeEgressOnly(e, col)
	e.NoteUndetermined(col)
	m.finish(ts, col)
	return nil
}

// prepare indexes the policies and templates of m before any pod is
// checked; hasPods says whether the files hold pods (m.Pods may be empty
// when they are streamed: FileScan).
func (m *Manifests) prepare(e *Engine, col *Collector, hasPods bool) (*Templates, error) {
	for _, ns := range m.Namespaces {
		if _, given := m.NamespaceLabels[ns.Name]; !given {
			e.SetNamespace(ns.Name, ns.Labels)
		}
	}
	for _, ns := range sortedKeys(m.NamespaceLabels) {
		e.SetNamespace(ns, m.NamespaceLabels[ns])
	}
	for _, np := range m.NetworkPolicies {
		if err := e.AddNetworkPolicy(np); err != nil {
			return nil, err
		}
	}
	rendered, err := m.sandboxTemplatePolicies(e)
	if err != nil {
		return nil, err
	}
	for _, u := range m.Cilium {
		if err := e.AddCiliumPolicy(u); err != nil {
			return nil, err
		}
	}
	for _, u := range m.AdminNetworkPolicies {
		if err := e.AddAdminNetworkPolicy(u); err != nil {
			return nil, err
		}
	}
	e.NoteCiliumCluster(col)
	e.SetEgressKnown(len(m.NetworkPolicies)+rendered+len(m.Cilium)+len(m.AdminNetworkPolicies) > 0)
	if hasPods || len(m.Sandboxes)+len(m.Claims)+len(m.WarmPools) > 0 || len(m.Workloads) > 0 {
		col.Checked("pod")
		if e.EgressKnown() {
			col.Checked("netpol")
		} else {
			col.Note("the files hold no NetworkPolicy, Cilium or admin network policy: egress rules were not applied (pass the policies with -f to check them)")
		}
		if len(m.Cilium) > 0 {
			col.Checked("cilium")
		}
		if len(m.AdminNetworkPolicies) > 0 {
			col.Checked("anp")
		}
	}
	ts := NewTemplates()
	for _, t := range m.Workloads {
		ts.Add(e, t)
	}
	for _, u := range m.Sandboxes {
		t, err := SandboxTemplateOf(u)
		if err != nil {
			return nil, err
		}
		ts.Add(e, t)
	}
	return ts, nil
}

// sandboxTemplatePolicies adds the NetworkPolicy the agent-sandbox
// controller keeps for each SandboxTemplate of the files (unless the files
// hold that policy itself, as a cluster dump does) and says how many.
func (m *Manifests) sandboxTemplatePolicies(e *Engine) (int, error) {
	n := 0
	for _, u := range m.Sandboxes {
		added, err := e.AddSandboxTemplatePolicy(u)
		if err != nil {
			return 0, err
		}
		if added {
			// Its findings point at the template's document.
			m.origins.add("networkpolicy/"+u.GetNamespace()+"/"+u.GetName()+"-network-policy", m.origins[strings.ToLower(SandboxTemplateKind)+"/"+u.GetNamespace()+"/"+u.GetName()])
			n++
		}
	}
	return n, nil
}

func checkFilePod(e *Engine, ts *Templates, col *Collector, p *corev1.Pod) {
	if !e.IsSandbox(p.Namespace, p.Labels) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return // as live: a finished pod runs nothing
	}
	col.Add(ts.Pod(p, e.CheckPod(p)))
}

func (m *Manifests) finish(ts *Templates, col *Collector) {
	ts.Flush(col)
	col.flushShared()
	if len(m.Skipped) > 0 {
		col.Note("not checked: %s (drift checks Pods, workloads with pod templates, Sandboxes, SandboxTemplates, NetworkPolicies, Cilium and admin network policies)", m.SkippedText())
	}
}
