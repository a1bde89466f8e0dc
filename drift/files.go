package drift

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Manifests are the objects read from files: multi-document YAML or JSON,
// with `List`s (and typed lists like PodList) unpacked.
type Manifests struct {
	Pods            []*corev1.Pod
	NetworkPolicies []*networkingv1.NetworkPolicy
	Cilium          []*unstructured.Unstructured
	Sandboxes       []*unstructured.Unstructured
	// Skipped counts objects of kinds drift does not check, by kind.
	Skipped map[string]int
}

// typeMeta is enough of a document to know what it is.
type typeMeta struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Items      []json.RawMessage `json:"items"`
}

// DecodeManifests reads every document of r into m. source names the file
// in errors ("pods.yaml: document 3: …").
func (m *Manifests) DecodeManifests(r io.Reader, source string) error {
	if m.Skipped == nil {
		m.Skipped = map[string]int{}
	}
	rd := utilyaml.NewYAMLReader(bufio.NewReaderSize(r, 64<<10))
	for doc := 1; ; doc++ {
		raw, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: document %d: %w", source, doc, err)
		}
		if len(bytes.TrimSpace(stripComments(raw))) == 0 {
			continue
		}
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return fmt.Errorf("%s: document %d: %w", source, doc, err)
		}
		if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			continue
		}
		if err := m.add(js); err != nil {
			return fmt.Errorf("%s: document %d: %w", source, doc, err)
		}
	}
}

func stripComments(b []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		t := bytes.TrimSpace(line)
		if len(t) == 0 || t[0] == '#' || bytes.Equal(t, []byte("---")) {
			continue
		}
		out = append(out, line...)
	}
	return out
}

func (m *Manifests) add(js []byte) error {
	var tm typeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return fmt.Errorf("not a Kubernetes object: %w", err)
	}
	if tm.Kind == "" {
		return fmt.Errorf("not a Kubernetes object: no kind")
	}
	if strings.HasSuffix(tm.Kind, "List") {
		for i, item := range tm.Items {
			if err := m.add(item); err != nil {
				return fmt.Errorf("%s item %d: %w", tm.Kind, i, err)
			}
		}
		return nil
	}
	group, _, _ := strings.Cut(tm.APIVersion, "/")
	if !strings.Contains(tm.APIVersion, "/") {
		group = ""
	}
	switch {
	case tm.Kind == "Pod" && group == "":
		var p corev1.Pod
		if err := strictish(js, &p); err != nil {
			return fmt.Errorf("pod: %w", err)
		}
		m.Pods = append(m.Pods, &p)
	case tm.Kind == "NetworkPolicy" && group == "networking.k8s.io":
		var np networkingv1.NetworkPolicy
		if err := strictish(js, &np); err != nil {
			return fmt.Errorf("networkpolicy: %w", err)
		}
		m.NetworkPolicies = append(m.NetworkPolicies, &np)
	case (tm.Kind == CiliumNetworkPolicyKind || tm.Kind == CiliumClusterwideNetworkPolicyKind) && group == "cilium.io":
		u, err := unstructuredFrom(js)
		if err != nil {
			return err
		}
		m.Cilium = append(m.Cilium, u)
	case tm.Kind == SandboxKind && group == SandboxGroup:
		u, err := unstructuredFrom(js)
		if err != nil {
			return err
		}
		m.Sandboxes = append(m.Sandboxes, u)
	default:
		m.Skipped[tm.Kind]++
	}
	return nil
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
// nothing about the cluster's policies.
func CheckManifests(e *Engine, m *Manifests, col *Collector) error {
	for _, np := range m.NetworkPolicies {
		if err := e.AddNetworkPolicy(np); err != nil {
			return err
		}
	}
	for _, u := range m.Cilium {
		if err := e.AddCiliumPolicy(u); err != nil {
			return err
		}
	}
	e.SetEgressKnown(len(m.NetworkPolicies)+len(m.Cilium) > 0)
	if len(m.Pods) > 0 || len(m.Sandboxes) > 0 {
		col.Checked("pod")
		if e.EgressKnown() {
			col.Checked("netpol")
		} else {
			col.Note("the files hold no NetworkPolicy or Cilium policy: egress rules were not applied (pass the policies with -f to check them)")
		}
		if len(m.Cilium) > 0 {
			col.Checked("cilium")
		}
	}
	for _, p := range m.Pods {
		if !e.IsSandbox(p.Namespace, p.Labels) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue // as live: a finished pod runs nothing
		}
		col.Add(e.CheckPod(p))
	}
	for _, u := range m.Sandboxes {
		fs, ok, err := e.CheckSandbox(u)
		if err != nil {
			return err
		}
		if ok {
			col.Add(fs)
		}
	}
	if len(m.Skipped) > 0 {
		col.Note("not checked: %s (drift checks Pods, Sandboxes, NetworkPolicies and Cilium policies)", m.SkippedText())
	}
	return nil
}
