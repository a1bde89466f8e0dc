package drift

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sandprobe/sandprobe/internal/manifest"
	"github.com/sandprobe/sandprobe/report"
)

// listPod is a sandbox pod as a List item, indented under items, named
// name, with extra lines added to its container.
func listPod(name, extra string) string {
	return "  - apiVersion: v1\n    kind: Pod\n    metadata:\n      name: " + name + "\n      namespace: sandboxes\n      labels: {sandbox: \"true\"}\n" +
		"    spec:\n      runtimeClassName: kata\n      containers:\n        - name: a\n          image: x@sha256:00\n          securityContext: {privileged: true}\n" + extra
}

// treeListCases are Lists as people and kubectl write them: each must be
// read from the block-YAML tree (addTreeList) exactly as addRead reads its
// JSON, findings, lines and errors alike.
var treeListCases = []struct{ name, data string }{
	{"kubectl get -o yaml", "apiVersion: v1\nkind: List\nmetadata:\n  resourceVersion: \"\"\nitems:\n" + listPod("a", "") + listPod("b", "")},
	{"a pod and its policy", "apiVersion: v1\nkind: List\nitems:\n" + listPod("a", "") +
		"  - apiVersion: networking.k8s.io/v1\n    kind: NetworkPolicy\n    metadata: {name: deny, namespace: sandboxes}\n    spec: {podSelector: {}, policyTypes: [Egress]}\n"},
	{"a Deployment in a List", "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: apps/v1\n    kind: Deployment\n    metadata: {name: d, namespace: sandboxes}\n" +
		"    spec:\n      selector: {matchLabels: {app: d}}\n      template:\n        metadata: {labels: {app: d, sandbox: \"true\"}}\n        spec: {containers: [{name: a, image: x, securityContext: {privileged: true}}]}\n"},
	{"no items", "apiVersion: v1\nkind: List\nitems: []\n"},
	// A PodList from the API: items without kind take the list's.
	{"PodList items without kind", "apiVersion: v1\nkind: PodList\nitems:\n  - metadata: {name: a, namespace: sandboxes, labels: {sandbox: \"true\"}}\n    spec: {containers: [{name: a, image: x, securityContext: {privileged: true}}]}\n"},
	{"item with kind, no apiVersion", "apiVersion: v1\nkind: List\nitems:\n  - kind: Pod\n    metadata: {name: a, namespace: sandboxes, labels: {sandbox: \"true\"}}\n    spec: {containers: [{name: a, image: x}]}\n"},
	// The errors kubectl would stop at, each the same.
	{"a port written as a string", "apiVersion: v1\nkind: List\nitems:\n" + listPod("a", "          ports: [{containerPort: \"80\"}]\n")},
	{"a bad pod, then a bad policy", "apiVersion: v1\nkind: List\nitems:\n" + listPod("a", "          ports: [{containerPort: \"80\"}]\n") +
		"  - apiVersion: networking.k8s.io/v1\n    kind: NetworkPolicy\n    metadata: {name: deny, namespace: sandboxes}\n    spec: {podSelector: []}\n"},
	{"bad list metadata", "apiVersion: v1\nkind: List\nmetadata: {labels: [a]}\nitems:\n" + listPod("a", "")},
	{"a list inside a list", "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: List\n    items: []\n"},
	{"an item without kind", "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    metadata: {name: a}\n"},
	{"a list without kind", "apiVersion: v1\nitems:\n" + listPod("a", "")},
	{"a mis-capitalised field", "apiVersion: v1\nkind: List\nitems:\n" + listPod("a", "          SecurityContext: {privileged: false}\n")},
}

// TestTreeListReadsLikeAddRead: every List above, read by the block-YAML
// reader (whole and by drift -f's two passes), gives what addRead gives
// from sigs.k8s.io/yaml's JSON of it: the same error, or the same
// findings on the same lines.
func TestTreeListReadsLikeAddRead(t *testing.T) {
	if !fastYAML {
		t.Skip("the reference build reads every List through addRead")
	}
	for _, c := range treeListCases {
		t.Run(c.name, func(t *testing.T) {
			data := []byte(c.data)
			if _, err := manifest.Parse(data); err != nil {
				t.Fatalf("the case is not block YAML the reader takes: %v", err)
			}
			fast := &Manifests{Namespace: oracleNamespace}
			fastErr := fast.DecodeManifests(bytes.NewReader(data), "f")
			slow := &Manifests{Namespace: oracleNamespace, Skipped: map[string]int{}, origins: origins{}}
			js, err := yaml.YAMLToJSON(data)
			if err != nil {
				t.Fatal(err)
			}
			slowErr := slow.addRead(js, &origin{file: "f", doc: &manifest.Document{Data: data, Line: 1}})
			if (fastErr == nil) != (slowErr == nil) || (slowErr != nil && !strings.HasSuffix(fastErr.Error(), slowErr.Error())) {
				t.Fatalf("read from the tree: %v\nread by addRead: %v", fastErr, slowErr)
			}
			// drift -f: pass 1 counts the List's pods, pass 2 decodes them.
			e, err := NewEngine(oraclePolicy())
			if err != nil {
				t.Fatal(err)
			}
			col := NewCollector()
			scanErr := (&FileScan{Engine: e, Paths: []string{"-"}, Stdin: bytes.NewReader(data), Namespace: oracleNamespace, Workers: 1}).Run(col)
			if (scanErr == nil) != (slowErr == nil) || (slowErr != nil && !strings.HasSuffix(scanErr.Error(), slowErr.Error())) {
				t.Fatalf("drift -f: %v\nread by addRead: %v", scanErr, slowErr)
			}
			if slowErr != nil {
				t.Logf("refused alike: %v", slowErr)
				return
			}
			got, want := located(t, fast), located(t, slow)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("findings differ\n got %v\nwant %v", got, want)
			}
			if scanned := located(t, nil, col.Findings...); !reflect.DeepEqual(scanned, want) {
				t.Fatalf("drift -f's findings differ\n got %v\nwant %v", scanned, want)
			}
			if len(want) == 0 && c.name != "no items" {
				t.Fatal("no finding: the case proves nothing")
			}
		})
	}
}

// located is each finding's check, target and line: of m's objects
// checked, or of fs when m is nil.
func located(t *testing.T, m *Manifests, fs ...report.Finding) []string {
	t.Helper()
	if m != nil {
		col, err := checkOracle(m)
		if err != nil {
			t.Fatal(err)
		}
		fs = col.Findings
	}
	var out []string
	for _, f := range fs {
		out = append(out, f.Check+" "+f.Target+" "+string(f.Status)+" line "+strconv.Itoa(f.Line))
	}
	return out
}

// TestBlankDocument: a document of blank lines, comments and separators
// holds nothing; one line with anything else is something, and so is any
// document with a line break YAML knows beyond \n (go-yaml decides).
func TestBlankDocument(t *testing.T) {
	for doc, want := range map[string]bool{
		"":                           true,
		"\n\n":                       true,
		"# a comment\n  # another\n": true,
		"---\n# c\r\n\t\n":           true,
		"# c\nkind: Pod\n":           false,
		"  x":                        false,
		"--- # c\n":                  false, // a separator with a comment is a line go-yaml reads
		"# c\u2028kind: Pod\n":       false,
		"\u2028":                     true,
	} {
		if got := blankDocument([]byte(doc)); got != want {
			t.Errorf("blankDocument(%q) = %v, want %v", doc, got, want)
		}
	}
}
