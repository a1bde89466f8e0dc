package manifest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// strictish is drift's typed decoding of an object's JSON: case-sensitive,
// as the API server decodes.
func strictish(js []byte, into any) error {
	return kjson.UnmarshalCaseSensitivePreserveInts(js, into)
}

// sameAsStrictish fails t unless decoding doc straight from its tree into
// a Pod either declines or gives exactly the Pod that sigs.k8s.io/yaml's
// JSON decoded with strictish gives (the reading drift -f had before, and
// the API server's). It reports whether the fast path decoded doc.
func sameAsStrictish(t *testing.T, doc []byte) bool {
	t.Helper()
	return sameAs[corev1.Pod](t, doc)
}

// sameAs is sameAsStrictish for an object of type T: drift decodes Pods
// and the workloads (Deployments, CronJobs, …) from the tree.
func sameAs[T any](t *testing.T, doc []byte) bool {
	t.Helper()
	tree, err := Parse(doc)
	if err != nil {
		return false
	}
	var fast T
	fastErr := Decode(tree, &fast)
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatalf("the block-YAML reader took what sigs.k8s.io/yaml refuses (%v):\n%s", err, doc)
	}
	var slow T
	slowErr := strictish(js, &slow)
	switch {
	case fastErr == nil && slowErr != nil:
		t.Fatalf("fast path decoded a %T that strictish refuses (%v):\n%s", slow, slowErr, doc)
	case fastErr == nil && !reflect.DeepEqual(fast, slow):
		t.Fatalf("fast path decoded a %T differently:\n%s\n fast %+v\n slow %+v", slow, doc, fast, slow)
	case fastErr != nil && !errors.Is(fastErr, ErrNotPlain) && slowErr == nil:
		t.Fatalf("fast path failed on a %T (%v) where strictish decodes:\n%s", slow, fastErr, doc)
	}
	// The JSON written from the same tree reads the same, too.
	var viaJSON T
	jsonErr := strictish(appendNodeJSON(nil, tree), &viaJSON)
	if (jsonErr == nil) != (slowErr == nil) || (jsonErr == nil && !reflect.DeepEqual(viaJSON, slow)) {
		t.Fatalf("the tree's JSON reads differently as a %T (%v, strictish %v):\n%s", slow, jsonErr, slowErr, doc)
	}
	return fastErr == nil
}

// sameAsWorkloads is sameAs for each kind of workload drift decodes from
// the tree (a CronJob holds a Job's template; the others share a
// Deployment's shape with their own fields).
func sameAsWorkloads(t *testing.T, doc []byte) {
	t.Helper()
	sameAs[appsv1.Deployment](t, doc)
	sameAs[appsv1.StatefulSet](t, doc)
	sameAs[appsv1.DaemonSet](t, doc)
	sameAs[batchv1.CronJob](t, doc)
}

// sampleValues are written into every field of a Pod by TestDecodeNodeEveryField:
// each kind of scalar, the empty collections, numbers that do not fit,
// YAML 1.1 words the fast path leaves to go-yaml.
var sampleValues = []string{
	"x", `"x"`, "'it''s'", `""`, "1", "-5", "0", "70000", "3000000000", "99999999999999", "1.5", "true", "false", "null", "",
	"[]", "{}", "8Gi", "500m", "2026-01-01T00:00:00Z", `"2026-01-01T00:00:00Z"`, "yes", "on", "0755", "x # comment",
}

// TestDecodeNodeEveryField writes each sample value, and a nested map and a
// sequence, at every field path of a Pod (items of lists and values of
// maps included) and holds the fast decoding to strictish on each.
func TestDecodeNodeEveryField(t *testing.T) {
	took, docs := everyField(t, reflect.TypeFor[corev1.Pod](), "apiVersion: v1\nkind: Pod\n", sameAsStrictish)
	t.Logf("%d documents, %d decoded by the fast path", docs, took)
	if docs < 5000 || took*5 < docs {
		t.Errorf("only %d of %d documents decoded by the fast path", took, docs)
	}
}

// TestDecodeWorkloadEveryField is TestDecodeNodeEveryField for the
// workloads drift decodes from the tree: every field of a Deployment and
// of a CronJob (its Job's and Pod's included).
func TestDecodeWorkloadEveryField(t *testing.T) {
	for _, w := range []struct {
		ty     reflect.Type
		header string
		same   func(*testing.T, []byte) bool
	}{
		{reflect.TypeFor[appsv1.Deployment](), "apiVersion: apps/v1\nkind: Deployment\n", sameAs[appsv1.Deployment]},
		{reflect.TypeFor[batchv1.CronJob](), "apiVersion: batch/v1\nkind: CronJob\n", sameAs[batchv1.CronJob]},
	} {
		took, docs := everyField(t, w.ty, w.header, w.same)
		t.Logf("%s: %d documents, %d decoded by the fast path", w.ty.Name(), docs, took)
		if docs < 5000 || took*5 < docs {
			t.Errorf("%s: only %d of %d documents decoded by the fast path", w.ty.Name(), took, docs)
		}
	}
}

// everyField writes each sample value, a nested map and a sequence at every
// field path of type root under header, holds same to each document and
// says how many it decoded, of how many.
func everyField(t *testing.T, root reflect.Type, header string, same func(*testing.T, []byte) bool) (took, total int) {
	t.Helper()
	var docs []string
	var walk func(ty reflect.Type, path []string, depth int)
	walk = func(ty reflect.Type, path []string, depth int) {
		if ty.Kind() == reflect.Pointer {
			ty = ty.Elem()
		}
		at := func(value string) string {
			var b strings.Builder
			b.WriteString(header)
			ind := ""
			for i, seg := range path {
				last := i == len(path)-1
				switch {
				case seg == "-" && last:
					fmt.Fprintf(&b, "%s- %s\n", ind, value)
				case seg == "-":
					b.WriteString(ind + "-\n")
					ind += "  "
				case last:
					fmt.Fprintf(&b, "%s%s: %s\n", ind, seg, value)
				default:
					fmt.Fprintf(&b, "%s%s:\n", ind, seg)
					ind += "  "
				}
			}
			return b.String()
		}
		if len(path) > 0 {
			for _, v := range sampleValues {
				docs = append(docs, at(v))
			}
		}
		if depth > 9 {
			return
		}
		switch ty.Kind() {
		case reflect.Struct:
			if pl := buildPlan(ty, map[reflect.Type]*tplan{}); pl.kind != kStruct {
				return
			}
			for name := range buildPlan(ty, map[reflect.Type]*tplan{}).fields {
				f, _ := typeFieldByJSON(ty, name)
				walk(f, append(append([]string(nil), path...), name), depth+1)
			}
		case reflect.Slice:
			walk(ty.Elem(), append(append([]string(nil), path...), "-"), depth+1)
		case reflect.Map:
			walk(ty.Elem(), append(append([]string(nil), path...), "some.key/x"), depth+1)
		}
	}
	walk(root, nil, 0)
	for _, d := range docs {
		if same(t, []byte(d)) {
			took++
		}
	}
	return took, len(docs)
}

// typeFieldByJSON is the Go type of the field a JSON name decodes into.
func typeFieldByJSON(ty reflect.Type, name string) (reflect.Type, bool) {
	f := buildPlan(ty, map[reflect.Type]*tplan{}).fields[name]
	if f == nil {
		return nil, false
	}
	return ty.FieldByIndex(f.index).Type, true
}

// TestDecodeNodeMatchesStrictish: on every fixture document and the small
// block-YAML cases, decoding into a Pod from the tree agrees with strictish
// (a NetworkPolicy read as a Pod exercises unknown fields).
func TestDecodeNodeMatchesStrictish(t *testing.T) {
	files, _ := filepath.Glob("../../fixtures/drift/*.yaml")
	files = append(files, "../../manifests/cronjob.yaml")
	took := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, doc := range splitDocs(t, data) {
			if sameAsStrictish(t, doc) {
				took++
			}
			sameAsWorkloads(t, doc)
		}
	}
	for _, c := range append(append(blockCases, peopleCases...), podCases...) {
		sameAsStrictish(t, []byte(c))
	}
	for _, c := range podCases[:3] {
		if !sameAsStrictish(t, []byte(c)) {
			t.Errorf("the fast path declined a plain pod:\n%s", c)
		}
	}
	if took < 20 {
		t.Errorf("the fast path decoded only %d fixture documents", took)
	}
}

// podCases are pod shapes for the decoder: kubectl's output (null
// timestamps, status), quantities as numbers and strings, int-or-string
// ports, pointers to empty structs, a type mismatch, an overflow.
var podCases = []string{
	"apiVersion: v1\nkind: Pod\nmetadata:\n  creationTimestamp: null\n  name: a\n  labels:\n    sandbox: \"true\"\n    empty:\n  annotations: {}\nspec:\n  containers:\n  - name: a\n    image: x\n    resources:\n      limits:\n        memory: 6Gi\n        cpu: 2\n      requests: {}\n    securityContext: {}\n    livenessProbe:\n      httpGet:\n        port: 8080\n        path: /\n    readinessProbe:\n      tcpSocket:\n        port: http\n  volumes:\n  - name: v\n    emptyDir:\n      sizeLimit: 8Gi\n  - name: w\n  nodeSelector: {}\n  tolerations: []\nstatus: {}\n",
	"apiVersion: v1\nkind: Pod\nmetadata:\n  name: b\n  ownerReferences:\n  - apiVersion: apps/v1\n    kind: ReplicaSet\n    name: rs\n    controller: true\n    uid: u-1\nspec:\n  securityContext:\n    runAsUser: 65532\n    runAsNonRoot: true\n    sysctls:\n    - name: kernel.x\n      value: \"1\"\n  containers:\n  - name: a\n    ports:\n    - containerPort: 80\n      hostPort: 8080\n    env:\n    - name: K\n      valueFrom:\n        secretKeyRef:\n          name: s\n          key: k\n  terminationGracePeriodSeconds: 30\n  unknownField:\n    a: 1\n",
	"apiVersion: v1\nkind: Pod\nmetadata:\n  name: c\n  deletionTimestamp: \"2026-01-01T00:00:00Z\"\nspec:\n  containers: null\n  priority: -7\n  overhead:\n    memory: \"1\"\n",
	// Each of these must decline or agree.
	"apiVersion: v1\nkind: Pod\nspec:\n  containers: 3\n",
	"apiVersion: v1\nkind: Pod\nspec:\n  priority: 3000000000\n",
	"apiVersion: v1\nkind: Pod\nspec:\n  hostNetwork: \"true\"\n",
	"apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - resources:\n      limits:\n        memory: lots\n",
	"apiVersion: v1\nkind: Pod\nmetadata:\n  creationTimestamp: yesterday\n",
	"apiVersion: v1\nkind: Pod\nmetadata:\n  labels:\n    a: 1\n",
	"apiVersion: v1\nkind: Pod\nmetadata:\n  Name: capitalised\n",
	"apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    ports:\n    - containerPort: 1.5\n",
	"apiVersion: v1\nkind: Pod\nmetadata:\n  managedFields:\n  - manager: kubectl\n    fieldsV1:\n      f:metadata:\n        f:labels: {}\n",
	"apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - {}\n",
	"apiVersion: v1\nkind: Pod\nspec:\n  volumes:\n  - name: v\n    secret:\n      defaultMode: 0644\n",
	"apiVersion: v1\nkind: Pod\nspec:\n  volumes:\n  - name: v\n    secret:\n      defaultMode: 420\n",
}

// FuzzDecodeNode: whatever the document, decoding a Pod from its tree
// agrees with strictish over sigs.k8s.io/yaml's JSON, or declines
// (drift's FuzzJudged holds the verdicts; the seed corpus holds drift's
// kubectl cases).
func FuzzDecodeNode(f *testing.F) {
	for _, c := range append(append(blockCases, peopleCases...), podCases...) {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		if strings.Count(doc, "\n") > 300 {
			return
		}
		sameAsStrictish(t, []byte(doc))
		sameAsWorkloads(t, []byte(doc))
	})
}
