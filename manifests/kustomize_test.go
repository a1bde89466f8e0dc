package manifests

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
)

// A kustomization and the policy it installs: the base with the reference
// policy, and make e2e's overlay with the lab's.
var kustomizations = []struct {
	dir, policy, admission string
	// rbac is the file holding the rendered sandbox-namespace RBAC (the
	// base's component); "" when the kustomization takes the base's.
	rbac string
}{
	{dir: ".", policy: "policy.yaml", admission: "admission.yaml", rbac: "components/sandbox-namespaces/rbac.yaml"},
	{dir: "../hack/e2e/overlay", policy: "../hack/e2e/overlay/policy.yaml", admission: "../hack/e2e/overlay/admission.yaml"},
}

// renderAdmission runs `sandprobe render --format admission`.
func renderAdmission(t *testing.T, policyFile string) []byte {
	t.Helper()
	return renderFormat(t, "admission", policyFile)
}

// documents splits a YAML stream into objects keyed "Kind namespace/name".
func documents(t *testing.T, stream []byte) (map[string]map[string]any, []string) {
	t.Helper()
	objs := map[string]map[string]any{}
	var order []string
	for _, doc := range strings.Split("\n"+string(stream), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("parse YAML document: %v\n%s", err, doc)
		}
		if m == nil {
			continue
		}
		md, _ := m["metadata"].(map[string]any)
		key := fmt.Sprintf("%v %v/%v", m["kind"], md["namespace"], md["name"])
		objs[key] = m
		order = append(order, key)
	}
	return objs, order
}

// contains reports where got lacks or differs from something in want.
func contains(got, want any, path string) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want a map, got %T", path, got)}
		}
		var diffs []string
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				diffs = append(diffs, fmt.Sprintf("%s.%s: missing", path, k))
				continue
			}
			diffs = append(diffs, contains(gv, wv, path+"."+k)...)
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: want %v, got %v", path, want, got)}
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, contains(g[i], w[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
		return diffs
	}
	if !reflect.DeepEqual(got, want) {
		return []string{fmt.Sprintf("%s: want %v, got %v", path, want, got)}
	}
	return nil
}

// TestKustomizeHoldsRender: what `sandprobe render --format admission`
// makes of a kustomization's policy (the policy ConfigMap, the admission
// policies for pods and for workload templates, and their bindings) is in what the kustomization builds, field for
// field. With -update, admission.yaml is rewritten from render first.
func TestKustomizeHoldsRender(t *testing.T) {
	for _, k := range kustomizations {
		t.Run(k.dir, func(t *testing.T) {
			rendered := renderAdmission(t, k.policy)
			if *update {
				writeAdmissionFile(t, k.admission, rendered)
			}
			want, order := documents(t, rendered)
			got, _ := documents(t, kustomize(t, k.dir))
			if len(want) != 5 {
				t.Fatalf("render made %d objects, want the ConfigMap, the pods' and the templates' policies and their bindings: %v", len(want), order)
			}
			holds(t, k.dir, got, want, order)
		})
	}
}

// TestKustomizeHoldsRBAC: the runner's rights in the sandbox namespaces
// that `sandprobe render --format rbac` makes of a kustomization's policy
// are in what the kustomization builds, field for field, and it grants
// them in no other namespace. With -update, the base's component is
// rewritten from render first.
func TestKustomizeHoldsRBAC(t *testing.T) {
	for _, k := range kustomizations {
		t.Run(k.dir, func(t *testing.T) {
			rendered := renderFormat(t, "rbac", k.policy)
			if *update && k.rbac != "" {
				writeRendered(t, k.rbac, rendered)
			}
			p, _, err := policy.LoadFile(k.policy)
			if err != nil {
				t.Fatal(err)
			}
			want, order := documents(t, rendered)
			dir := k.dir
			if k.rbac != "" {
				// The base's rights there are a component (the namespaces
				// may not exist on a vanilla cluster).
				if dir, err = overlayDir(t.TempDir(), "sandbox-namespaces"); err != nil {
					t.Fatal(err)
				}
			}
			got, gotOrder := documents(t, kustomize(t, dir))
			if len(want) != 2*len(p.Spec.Namespaces) {
				t.Fatalf("render made %v for namespaces %v, want a Role and a RoleBinding each", order, p.Spec.Namespaces)
			}
			holds(t, k.dir, got, want, order)
			for _, key := range gotOrder {
				if strings.HasSuffix(key, "/sandprobe-probe") {
					if _, ok := want[key]; !ok {
						t.Errorf("%s: built by kubectl kustomize %s, but the policy's namespaces are %v", key, k.dir, p.Spec.Namespaces)
					}
				}
			}
		})
	}
}

// holds reports every rendered object (want, in order) that the built ones
// (got) lack or hold differently.
func holds(t *testing.T, dir string, got, want map[string]map[string]any, order []string) {
	t.Helper()
	for _, key := range order {
		g, ok := got[key]
		if !ok {
			t.Errorf("%s: rendered, but not in kubectl kustomize %s (go test ./manifests -update)", key, dir)
			continue
		}
		for _, d := range contains(g, want[key], key) {
			t.Errorf("%s (go test ./manifests -update)", d)
		}
	}
}

// renderFormat runs `sandprobe render --format FORMAT`.
func renderFormat(t *testing.T, format, policyFile string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(testenv.Binary(t), "render", "--format", format, "--policy", policyFile)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sandprobe render --format %s --policy %s: %v\n%s", format, policyFile, err, stderr.String())
	}
	return out
}

// writeRendered keeps the file's leading comment and replaces the rest with
// what render printed.
func writeRendered(t *testing.T, path string, rendered []byte) {
	t.Helper()
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	header, _, _ := strings.Cut(string(old), "---\n")
	if err := os.WriteFile(path, append([]byte(header), rendered...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeAdmissionFile keeps the file's leading comment and replaces its
// objects with the rendered admission policy and binding (the ConfigMap
// comes from kustomize's configMapGenerator).
func writeAdmissionFile(t *testing.T, path string, rendered []byte) {
	t.Helper()
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	header, _, _ := strings.Cut(string(old), "---\n")
	var b strings.Builder
	b.WriteString(header)
	for _, doc := range strings.Split(string(rendered), "---\n") {
		if strings.TrimSpace(doc) == "" || strings.Contains(doc, "\nkind: ConfigMap\n") {
			continue
		}
		b.WriteString("---\n" + doc)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBasePolicyIsTheReference: the base installs fixtures/policy.yaml
// (kustomize may not read outside manifests/, so it is a copy).
func TestBasePolicyIsTheReference(t *testing.T) {
	base, err := os.ReadFile("policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := os.ReadFile("../fixtures/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(base, ref) {
		t.Errorf("manifests/policy.yaml differs from fixtures/policy.yaml: cp fixtures/policy.yaml manifests/")
	}
}

// TestE2EPolicyIsTheLabPolicy: make e2e probes the lab with the lab
// policy's allow-list, proxy, resolver, metadata stand-in, must-fail hosts,
// selector and sandbox constraints. Only what the test cluster differs in
// may differ: the runtime class, a tool in the image, where the CA is, and
// the must-fail addresses: the lab's IPv4 addresses only (the pod network
// has no IPv6, and a control vantage can prove a deny only towards a live
// listener), each pinned to whatever the NetworkPolicy engine does.
func TestE2EPolicyIsTheLabPolicy(t *testing.T) {
	lab, _, err := policy.LoadFile("../fixtures/lab-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e2e, _, err := policy.LoadFile("../hack/e2e/overlay/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := e2e.Spec.Runtime.ClassNames; len(got) == 0 {
		t.Errorf("the e2e policy names no runtime class: the probe pod would run under runc")
	}
	le, ee := lab.Spec.Egress, e2e.Spec.Egress
	le.CAFile, ee.CAFile = "", ""
	labIPv4 := map[string]bool{}
	for _, tg := range le.MustFail.IPs {
		if ip := net.ParseIP(tg.Target); ip != nil && ip.To4() != nil {
			labIPv4[tg.Target] = true
		}
	}
	for i, tg := range ee.MustFail.IPs {
		if !labIPv4[tg.Target] {
			t.Errorf("spec.egress.mustFail.ips[%d] of the e2e policy (%s) is not one of the lab policy's IPv4 addresses", i, tg.Target)
		}
	}
	le.MustFail.IPs, ee.MustFail.IPs = nil, nil
	le.MustFail.Hosts, ee.MustFail.Hosts = unpinned(le.MustFail.Hosts), unpinned(ee.MustFail.Hosts)
	// The same IPv4-only rule for the hosts' declared addresses and the
	// metadata stand-ins.
	le.Metadata.Addresses, ee.Metadata.Addresses = ipv4Only(le.Metadata.Addresses), ipv4Only(ee.Metadata.Addresses)
	for _, c := range []struct {
		what     string
		lab, e2e any
	}{
		{"egress", le, ee},
		{"selector", lab.Spec.Selector, e2e.Spec.Selector},
		{"identity", lab.Spec.Identity, e2e.Spec.Identity},
		{"filesystem", lab.Spec.Filesystem, e2e.Spec.Filesystem},
		{"capabilities", lab.Spec.Capabilities, e2e.Spec.Capabilities},
		{"seccomp", lab.Spec.Seccomp, e2e.Spec.Seccomp},
		{"serviceAccountToken", lab.Spec.ServiceAccount, e2e.Spec.ServiceAccount},
		{"secrets", lab.Spec.Secrets, e2e.Spec.Secrets},
	} {
		if !reflect.DeepEqual(c.lab, c.e2e) {
			t.Errorf("spec.%s differs between fixtures/lab-policy.yaml and hack/e2e/overlay/policy.yaml:\nlab: %+v\ne2e: %+v", c.what, c.lab, c.e2e)
		}
	}
}

// unpinned drops the expected failure class: the lab and the cluster's
// engine stop the same destinations in different ways. It keeps only the
// IPv4 addresses a host declares (the pod network has no IPv6).
func unpinned(targets []policy.Target) []policy.Target {
	out := make([]policy.Target, len(targets))
	for i, t := range targets {
		t.Expect = ""
		t.Addresses = ipv4Only(t.Addresses)
		out[i] = t
	}
	return out
}

func ipv4Only(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if ip := net.ParseIP(a); ip != nil && ip.To4() != nil {
			out = append(out, a)
		}
	}
	return out
}
