package drift

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	xunicode "golang.org/x/text/encoding/unicode"
	"golang.org/x/text/transform"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// kubectlRead is the reference reader: a file read as kubectl apply -f
// reads it (cli-runtime v0.37's FileVisitor, StreamVisitor, unstructured
// decoder with metadata validation and FlattenListVisitor), built from
// the API machinery's own parts. It returns every object kubectl would
// send, in order.
func kubectlRead(data []byte) ([]*unstructured.Unstructured, error) {
	in := transform.NewReader(bytes.NewReader(data), xunicode.BOMOverride(xunicode.UTF8.NewDecoder()))
	d := utilyaml.NewYAMLOrJSONDecoder(in, 4096)
	var out []*unstructured.Unstructured
	for {
		var ext runtime.RawExtension
		if err := d.Decode(&ext); err != nil {
			if err == io.EOF { //nolint:errorlint // as kubectl tests it
				return out, nil
			}
			return out, fmt.Errorf("error parsing: %w", err)
		}
		raw := bytes.TrimSpace(ext.Raw)
		if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
			continue
		}
		obj, _, err := unstructured.UnstructuredJSONScheme.Decode(raw, nil, nil)
		if err != nil {
			return out, err
		}
		if err := utiljson.Unmarshal(raw, &metadataOnly{}); err != nil {
			return out, err
		}
		objs := []runtime.Object{obj}
		if meta.IsListType(obj) {
			objs = nil
			todo := []runtime.Object{obj}
			for i := 0; i < len(todo); i++ {
				if !meta.IsListType(todo[i]) {
					objs = append(objs, todo[i])
					continue
				}
				items, err := meta.ExtractList(todo[i])
				if err != nil {
					return out, err
				}
				todo = append(todo, items...)
			}
		}
		for _, o := range objs {
			u, ok := o.(*unstructured.Unstructured)
			if !ok || u.GetKind() == "" {
				return out, errors.New("an item without kind")
			}
			out = append(out, u)
		}
	}
}

// oraclePolicy is the policy the differential fuzzers judge with: the
// reference one, whose sandbox namespace is "sandboxes".
var oraclePolicy = sync.OnceValue(func() *policy.Policy {
	p, _, err := policy.LoadFile(filepath.Join("..", "fixtures", "policy.yaml"))
	if err != nil {
		panic(err)
	}
	return p
})

// oracleNamespace is where objects without a namespace land (-n): the
// policy's sandbox namespace, so that every pod a fuzzer writes is judged.
const oracleNamespace = "sandboxes"

// judged is what a reading of a file came to: the findings (without their
// place: the reference reading has none), the notes and the counts.
type judged struct {
	findings []report.Finding
	notes    []string
	scanned  int
}

func judgedOf(col *Collector, fs []report.Finding) judged {
	out := judged{notes: col.Notes, scanned: col.Scanned}
	for _, f := range fs {
		f.File, f.Line = "", 0
		out.findings = append(out.findings, f)
	}
	return out
}

// referenceJudged judges the objects kubectlRead reads, each decoded into
// its typed API object as the API server decodes the JSON kubectl sends
// (sigs.k8s.io/json, case-sensitive: addObject). An error is a file the
// reference refuses.
func referenceJudged(data []byte) (judged, error) {
	objs, err := kubectlRead(data)
	if err != nil {
		return judged{}, err
	}
	m := &Manifests{Skipped: map[string]int{}, origins: origins{}, Namespace: oracleNamespace}
	for _, u := range objs {
		if err := m.addUnstructured(u, nil); err != nil {
			return judged{}, err
		}
	}
	return checkRead(m)
}

func checkRead(m *Manifests) (judged, error) {
	col, err := checkOracle(m)
	if err != nil {
		return judged{}, err
	}
	return judgedOf(col, col.Findings), nil
}

// checkOracle checks m's objects under the oracle policy.
func checkOracle(m *Manifests) (*Collector, error) {
	e, err := NewEngine(oraclePolicy())
	if err != nil {
		return nil, err
	}
	col := NewCollector()
	if err := CheckManifests(e, m, col); err != nil {
		return nil, err
	}
	return col, nil
}

// sameJudged fails t unless drift reads data — whole (DecodeManifests) and
// streamed (FileScan, drift -f) — into exactly the findings of the
// reference reading. Where the reference refuses the file drift may refuse
// it or read it (kubectl applies nothing it refused, and drift judging
// more is no false pass); refOK says which it was.
func sameJudged(t *testing.T, data []byte) (refOK bool) {
	t.Helper()
	want, refErr := referenceJudged(data)
	m := &Manifests{Namespace: oracleNamespace}
	err := m.DecodeManifests(bytes.NewReader(data), "f")
	var whole judged
	if err == nil {
		whole, err = checkRead(m)
	}
	if refErr != nil {
		return false
	}
	if coinToss(data) {
		// What kubectl sends is random: drift must say so, not guess.
		if err == nil {
			t.Fatalf("drift reads a file whose reading by kubectl is random:\n%q", data)
		}
		e, eerr := NewEngine(oraclePolicy())
		if eerr != nil {
			t.Fatal(eerr)
		}
		scan := &FileScan{Engine: e, Paths: []string{"-"}, Stdin: bytes.NewReader(data), Namespace: oracleNamespace, Workers: 1}
		if scan.Run(NewCollector()) == nil {
			t.Fatalf("drift -f reads a file whose reading by kubectl is random:\n%q", data)
		}
		return false
	}
	if err != nil {
		t.Fatalf("drift refuses what kubectl reads (%v):\n%q", err, data)
	}
	if !reflect.DeepEqual(whole, want) {
		t.Fatalf("drift judges differently from the reference reading on\n%q\n got %+v\nwant %+v", data, whole, want)
	}
	e, err := NewEngine(oraclePolicy())
	if err != nil {
		t.Fatal(err)
	}
	col := NewCollector()
	scan := &FileScan{Engine: e, Paths: []string{"-"}, Stdin: bytes.NewReader(data), Namespace: oracleNamespace, Workers: 1}
	if err := scan.Run(col); err != nil {
		t.Fatalf("drift -f refuses what kubectl reads (%v):\n%q", err, data)
	}
	if got := judgedOf(col, col.Findings); !reflect.DeepEqual(got, want) {
		t.Fatalf("drift -f judges differently from the reference reading on\n%q\n got %+v\nwant %+v", data, got, want)
	}
	return true
}

// kubectlPod is a sandbox pod in JSON that drifts (privileged), named name.
func kubectlPod(name string) string {
	return `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"` + name + `","namespace":"sandboxes","labels":{"sandbox":"true"}},` +
		`"spec":{"runtimeClassName":"kata","containers":[{"name":"a","image":"x@sha256:00","securityContext":{"privileged":true}}]}}`
}

const kubectlYAMLPod = "apiVersion: v1\nkind: Pod\nmetadata: {name: yam, namespace: sandboxes, labels: {sandbox: \"true\"}}\n" +
	"spec: {containers: [{name: a, image: x, securityContext: {privileged: true}}]}\n"

// kubectlCases are files kubectl reads that drift once read otherwise (issue
// 21, items 12 and 13), with the pods kubectl creates from each: seeds of
// every differential fuzzer.
var kubectlCases = []struct {
	name, data string
	pods       []string // the targets of the sandbox pods read
}{
	{"concatenated JSON", kubectlPod("a") + kubectlPod("b"), []string{"pod/sandboxes/a", "pod/sandboxes/b"}},
	{"JSON a line", kubectlPod("a") + "\n" + kubectlPod("b") + "\n", []string{"pod/sandboxes/a", "pod/sandboxes/b"}},
	{"JSON then YAML", kubectlPod("a") + "\n" + kubectlYAMLPod, []string{"pod/sandboxes/a", "pod/sandboxes/yam"}},
	{"JSON, separator, YAML", kubectlPod("a") + "\n---\n" + kubectlYAMLPod, []string{"pod/sandboxes/a", "pod/sandboxes/yam"}},
	{`JSON with \/`, kubectlPod(`a\/b`), []string{"pod/sandboxes/a/b"}},
	{"JSON with a surrogate pair", kubectlPod(`\ud83d\ude00`), []string{"pod/sandboxes/\U0001F600"}},
	{"JSON after a no-break space", "\u00a0" + kubectlPod("nbsp") + "\n", []string{"pod/sandboxes/nbsp"}},
	{"JSON after a byte order mark", "\ufeff" + kubectlPod(`a\/bom`), []string{"pod/sandboxes/a/bom"}},
	{"separator, directive, separator", "---\n%YAML 1.1\n---\n" + kubectlYAMLPod, []string{"pod/sandboxes/yam"}},
	// An items key makes a list of any kind: kubectl creates the items,
	// not the pod around them.
	{"pod with items", strings.TrimSuffix(kubectlPod("outer"), "}") + `,"items":[` + kubectlPod("inner") + `]}`, []string{"pod/sandboxes/inner"}},
	{"pod with items null", strings.TrimSuffix(kubectlPod("outer"), "}") + `,"items":null}`, nil},
	{"YAML pod with items", kubectlYAMLPod + "items:\n- {apiVersion: v1, kind: Pod, metadata: {name: i, namespace: sandboxes, labels: {sandbox: \"true\"}}, spec: {hostNetwork: true}}\n", []string{"pod/sandboxes/i"}},
	// kubectl drops a last line without an ending that fills its 4096-byte
	// line reader: what it holds is never sent.
	{"last line of 4096 bytes", strings.TrimSuffix(kubectlYAMLPod, "\n") + "\nmetadata: {labels: {sandbox: \"false\"}} #" + strings.Repeat("x", 4096-len("metadata: {labels: {sandbox: \"false\"}} #")), []string{"pod/sandboxes/yam"}},
	{"invalid UTF-8 in a comment", kubectlYAMLPod + "# caf\xe9\n", []string{"pod/sandboxes/yam"}},
}

// FuzzJudged: whatever the file, drift judges what the reference reading
// judges (sameJudged), whole and streamed. The readers' own equivalences
// are internal/manifest's fuzzers; this seed corpus holds theirs.
func FuzzJudged(f *testing.F) {
	for _, c := range kubectlCases {
		f.Add(c.data)
	}
	for _, c := range treeListCases {
		f.Add(c.data)
	}
	f.Fuzz(func(t *testing.T, data string) {
		if strings.Count(data, "\n") > 300 {
			return
		}
		sameJudged(t, []byte(data))
	})
}

// TestReadLikeKubectl: each file above is read as kubectl reads it, pod for
// pod, whole and streamed, with the findings of the reference reading.
func TestReadLikeKubectl(t *testing.T) {
	for _, c := range kubectlCases {
		t.Run(c.name, func(t *testing.T) {
			if !sameJudged(t, []byte(c.data)) {
				_, err := referenceJudged([]byte(c.data))
				t.Fatalf("the reference refuses it: %v", err)
			}
			want, _ := referenceJudged([]byte(c.data))
			var got []string
			for _, f := range want.findings {
				if strings.HasPrefix(f.Target, "pod/") && !slices.Contains(got, f.Target) {
					got = append(got, f.Target)
				}
			}
			if !slices.Equal(got, c.pods) {
				t.Errorf("pods judged %q, want %q", got, c.pods)
			}
		})
	}
}

// coinToss says whether kubectl's own reading of data is random: a YAML
// document of it holds a mapping whose keys collide once made JSON keys, so
// kubectl sends one value or the other from run to run. It counts mapping
// entries before (go-yaml v2, as kubectl reads) and after the conversion
// (sigs.k8s.io/yaml) — not drift's way of finding them, so the two check
// each other.
func coinToss(data []byte) bool {
	decoded, err := io.ReadAll(transform.NewReader(bytes.NewReader(data), xunicode.BOMOverride(xunicode.UTF8.NewDecoder())))
	if err != nil {
		return false
	}
	if utilyaml.IsJSONBuffer(decoded[:min(len(decoded), 4096)]) {
		if decoded = yamlAfterJSON(decoded); decoded == nil {
			return false
		}
	}
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(decoded)))
	for {
		doc, err := rd.Read()
		if err != nil {
			return false
		}
		if docCoinToss(doc) {
			return true
		}
	}
}

// yamlAfterJSON is what kubectl reads as YAML in a stream that starts as
// JSON (apimachinery's YAMLOrJSONDecoder): after at most one JSON value,
// whatever does not decode as JSON is YAML, from the end of that value
// past its spaces up to and including the first line end. nil when the
// stream is JSON to its end, or when kubectl refuses it (a second JSON
// value, then something else).
func yamlAfterJSON(b []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(b))
	values, end := 0, 0
	for {
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			if errors.Is(err, io.EOF) || values > 1 {
				return nil
			}
			break
		}
		values, end = values+1, int(dec.InputOffset())
	}
	rest := b[end:]
	for len(rest) > 0 {
		r, size := utf8.DecodeRune(rest)
		if !unicode.IsSpace(r) {
			break
		}
		rest = rest[size:]
		if r == '\n' {
			break
		}
	}
	return rest
}

func docCoinToss(doc []byte) bool {
	var v any
	if yamlv2.Unmarshal(doc, &v) != nil {
		return false
	}
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return false
	}
	var j any
	if json.Unmarshal(js, &j) != nil {
		return false
	}
	return entries(v) != entries(j)
}

// entries counts the mapping entries of a decoded document, at any depth.
func entries(v any) int {
	n := 0
	switch t := v.(type) {
	case map[any]any:
		for _, e := range t {
			n += 1 + entries(e)
		}
	case map[string]any:
		for _, e := range t {
			n += 1 + entries(e)
		}
	case []any:
		for _, e := range t {
			n += entries(e)
		}
	}
	return n
}
