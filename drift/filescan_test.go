package drift_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// readOnce is how drift -f read files before it streamed them: every
// document of every path decoded into one Manifests, then CheckManifests.
// It is the oracle of TestFileScanMatchesManifests.
func readOnce(p *policy.Policy, paths []string, stdin []byte, ns string) (*drift.Collector, error) {
	m := &drift.Manifests{Namespace: ns}
	for _, path := range paths {
		if path == "-" {
			if err := m.DecodeManifests(bytes.NewReader(stdin), "stdin"); err != nil {
				return nil, err
			}
			continue
		}
		fi, err := os.Stat(path)
		if err != nil {
			return nil, err
		}
		files := []string{path}
		if fi.IsDir() {
			files = nil
			entries, _ := os.ReadDir(path)
			for _, e := range entries {
				switch strings.ToLower(filepath.Ext(e.Name())) {
				case ".yaml", ".yml", ".json":
					files = append(files, filepath.Join(path, e.Name()))
				}
			}
			sort.Strings(files)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			if err := m.DecodeManifests(bytes.NewReader(data), f); err != nil {
				return nil, err
			}
		}
	}
	e, err := drift.NewEngine(p)
	if err != nil {
		return nil, err
	}
	col := drift.NewCollector()
	return col, drift.CheckManifests(e, m, col)
}

// streamed is drift -f as it reads now, into a spool that spills at once.
func streamed(t *testing.T, p *policy.Policy, paths []string, stdin []byte, ns string, workers int) (*drift.Collector, *report.Spool, error) {
	t.Helper()
	e, err := drift.NewEngine(p)
	if err != nil {
		t.Fatal(err)
	}
	sp := report.NewSpool(t.TempDir(), -1)
	t.Cleanup(func() { sp.Close() })
	col := drift.NewSpoolingCollector(sp)
	scan := &drift.FileScan{Engine: e, Paths: paths, Stdin: bytes.NewReader(stdin), Namespace: ns, Workers: workers, TempDir: t.TempDir()}
	return col, sp, scan.Run(col)
}

// generatedFile writes n pods (benchObjects' mix: drifted ones, shards
// under their own NetworkPolicies) with the policies after the pods, a
// Deployment whose pods fold into it, a List, JSON documents, comments
// and empty documents in between.
func generatedFile(t *testing.T, p *policy.Policy, n int) string {
	t.Helper()
	ns := p.Spec.Namespaces[0]
	pods, nps := benchObjects(p, ns, n, 20)
	more := benchMore(p, ns, 5, 3, 4, 19)
	var b bytes.Buffer
	emit := func(obj any) {
		out, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(out)
	}
	for i, pod := range pods {
		switch {
		case i%97 == 1:
			js, _ := json.Marshal(pod)
			b.WriteString("---\n")
			b.Write(js)
			b.WriteString("\n")
		case i%89 == 2:
			emit(map[string]any{"apiVersion": "v1", "kind": "List", "items": []any{pod, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}}}})
		case i%50 == 3:
			b.WriteString("---\n# a comment-only document\n---\n")
			emit(pod)
		case i%10 == 4:
			pod.OwnerReferences = controllerRef("Deployment", "apps/v1", more.deployments[i%5].Name)
			pod.Labels = more.deployments[i%5].Spec.Template.Labels
			emit(pod)
		default:
			emit(pod)
		}
	}
	for _, d := range more.deployments {
		emit(d)
	}
	for _, u := range append(more.anps, more.cilium...) {
		emit(u.Object)
	}
	for _, np := range nps {
		emit(np)
	}
	path := filepath.Join(t.TempDir(), "generated.yaml")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFileScanMatchesManifests: streaming the files gives exactly the
// findings, order, notes, counts and first error of reading them whole,
// on every fixture, on a generated file and on bad input, with one
// decoder and with several.
func TestFileScanMatchesManifests(t *testing.T) {
	p := loadPolicy(t, "policy.yaml")
	dir := filepath.Join(repoRoot(), "fixtures", "drift")
	fixtures, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	gen := generatedFile(t, p, 600)
	bad := t.TempDir()
	write := func(name, data string) string {
		path := filepath.Join(bad, name)
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	genData, _ := os.ReadFile(gen)
	good := "apiVersion: v1\nkind: Pod\nmetadata: {name: ok, namespace: sandboxes, labels: {sandbox: \"true\"}}\nspec: {containers: [{name: a, image: x}]}\n"
	badYAML := write("bad-yaml.yaml", good+"---\napiVersion: v1\nkind: Pod\nmetadata: [\n")
	badPod := write("bad-pod.yaml", good+"---\napiVersion: v1\nkind: Pod\nspec: {containers: 3}\n---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nspec: {podSelector: 7}\n")
	badNP := write("bad-np.yaml", "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nspec: {podSelector: 7}\n---\n"+good+"---\napiVersion: v1\nkind: Pod\nspec: {containers: 3}\n")
	badList := write("bad-list.yaml", good+"---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, spec: {hostNetwork: yes-please}}\n")
	noKind := write("no-kind.yaml", good+"---\napiVersion: v1\nmetadata: {name: x}\n")
	badGen := write("bad-generated.yaml", string(genData[:len(genData)/2])+"\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: broken\n"+string(genData[len(genData)/2:]))
	flow := write("flow.yaml", "{apiVersion: v1, kind: Pod, metadata: {name: f, namespace: sandboxes, labels: {sandbox: \"true\"}}, spec: {containers: [{name: a, image: x}]}}\n")
	tricky := write("tricky.yaml", "apiVersion: \"v1\"  # core\nkind: 'Pod'\r\nmetadata: {name: q, namespace: sandboxes, labels: {sandbox: \"true\"}}\nspec: {containers: [{name: a, image: x}]}\n")

	cases := []fileScanCase{
		{"fixture dir", []string{dir}, nil, ""},
		{"generated", []string{gen}, nil, ""},
		{"generated + fixtures", append([]string{gen}, fixtures...), nil, ""},
		{"generated on stdin", []string{"-"}, genData, ""},
		{"generated -n", []string{gen}, nil, "sandboxes"},
		{"flow and tricky", []string{flow, tricky}, nil, ""},
		{"bad yaml", []string{badYAML}, nil, ""},
		{"bad pod before bad netpol", []string{badPod}, nil, ""},
		{"bad netpol before bad pod", []string{badNP}, nil, ""},
		{"bad list", []string{badList}, nil, ""},
		{"no kind", []string{noKind}, nil, ""},
		{"bad pod mid-file", []string{badGen}, nil, ""},
		{"bad file then missing", []string{badPod, filepath.Join(bad, "missing.yaml")}, nil, ""},
		{"missing then bad", []string{filepath.Join(bad, "missing.yaml"), badPod}, nil, ""},
		{"good then bad file", []string{gen, badNP}, nil, ""},
	}
	for _, f := range fixtures {
		cases = append(cases, fileScanCase{filepath.Base(f), []string{f}, nil, ""})
	}
	for _, c := range cases {
		for _, workers := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/workers-%d", c.name, workers), func(t *testing.T) {
				checkScanMatches(t, p, c, workers)
			})
		}
	}
}

// fileScanCase is one drift -f input: paths, standard input, the -n namespace.
type fileScanCase struct {
	name  string
	paths []string
	stdin []byte
	ns    string
}

// checkScanMatches: FileScan with workers gives c's findings, notes,
// counts and first error exactly as reading the files whole does.
func checkScanMatches(t *testing.T, p *policy.Policy, c fileScanCase, workers int) {
	t.Helper()
	want, wantErr := readOnce(p, c.paths, c.stdin, c.ns)
	got, sp, err := streamed(t, p, c.paths, c.stdin, c.ns, workers)
	if badCase := strings.Contains(c.name, "bad") || strings.Contains(c.name, "missing") || c.name == "no kind"; badCase != (wantErr != nil) {
		t.Fatalf("reading whole: error %v", wantErr)
	}
	if fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Fatalf("error\n got %v\nwant %v", err, wantErr)
	}
	if err != nil {
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("error on more than one line: %q", err)
		}
		return
	}
	want.Summary(p)
	got.Summary(p)
	fs, err := sp.Slice()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fs, want.Findings) {
		t.Errorf("findings differ: got %d, want %d\n%s", len(fs), len(want.Findings), firstDiff(fs, want.Findings))
	}
	// What a directory held that was not read is the scan's
	// own note (ManifestFiles): the reference reads no directory.
	got.Notes = slices.DeleteFunc(got.Notes, func(n string) bool { return strings.HasPrefix(n, "-f ") })
	if got.Scanned != want.Scanned || got.Drifted != want.Drifted || !reflect.DeepEqual(got.Notes, want.Notes) {
		t.Errorf("scanned %d/%d drifted %d/%d notes\n got %q\nwant %q", got.Scanned, want.Scanned, got.Drifted, want.Drifted, got.Notes, want.Notes)
	}
	if c.name == "generated" && (want.Scanned < 500 || len(want.Findings) < 40) {
		t.Errorf("the generated file judged too little: %d sandboxes, %d findings", want.Scanned, len(want.Findings))
	}
}

func firstDiff(got, want []report.Finding) string {
	for i := range min(len(got), len(want)) {
		if !reflect.DeepEqual(got[i], want[i]) {
			return fmt.Sprintf("at %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
	return "one is a prefix of the other"
}

// TestFileScanSettlesOnceFindings: pods are judged in parallel, but what
// the run reports once (a Cilium selection's missing names) still lands
// on the first pod of that selection in file order, as reading whole does,
// whichever worker finished first.
func TestFileScanSettlesOnceFindings(t *testing.T) {
	p := loadPolicy(t, "direct-policy.yaml")
	ns := p.Spec.Namespaces[0]
	var b bytes.Buffer
	emit := func(obj any) {
		out, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(out)
	}
	const selections = 7
	for i := 0; i < 400; i++ {
		pod := hardenedPod(p, ns, fmt.Sprintf("sel-%d", i%selections))
		pod.Name = fmt.Sprintf("agent-%d", i)
		if i%13 == 0 {
			pod.Spec.Containers[0].SecurityContext.Privileged = ptr(true)
		}
		emit(pod)
	}
	for s := 0; s < selections; s++ {
		emit(cnp(ns, fmt.Sprintf("model-only-%d", s), fmt.Sprintf("sel-%d", s), map[string]any{
			"toFQDNs": []any{map[string]any{"matchName": "api.anthropic.com"}}, "toPorts": ciliumPorts("443")}).Object)
	}
	emit(admin(drift.AdminNetworkPolicyKind, "world", map[string]any{
		"priority": int64(10),
		"subject":  map[string]any{"namespaces": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}}},
		"egress":   []any{map[string]any{"name": "world", "action": "Allow", "to": []any{networks("0.0.0.0/0")}}},
	}).Object)
	path := filepath.Join(t.TempDir(), "once.yaml")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	want, err := readOnce(p, []string{path}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	missing := map[string]bool{}
	for _, f := range want.Findings {
		if f.Check == drift.CiliumFQDNMissing {
			missing[f.Target] = true
		}
	}
	if len(missing) != selections {
		t.Fatalf("reading whole: fqdn-missing on %d pods, want one per selection (%d)", len(missing), selections)
	}
	for _, workers := range []int{1, 2, 8} {
		_, sp, err := streamed(t, p, []string{path}, nil, "", workers)
		if err != nil {
			t.Fatal(err)
		}
		fs, err := sp.Slice()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fs, want.Findings) {
			t.Errorf("workers %d: findings differ: got %d, want %d\n%s", workers, len(fs), len(want.Findings), firstDiff(fs, want.Findings))
		}
	}
}

// TestFileScanOutputsMatch: on a generated corpus (the bench's shapes,
// Lists, JSON, comments, policies after the pods), every output format of
// drift -f prints the same bytes from the streamed reading (the fast
// decoder, judged in parallel, spooled) as from reading whole the old way.
func TestFileScanOutputsMatch(t *testing.T) {
	p := loadPolicy(t, "policy.yaml")
	gen := generatedFile(t, p, 3000)
	want, err := readOnce(p, []string{gen}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	got, sp, err := streamed(t, p, []string{gen}, nil, "", 4)
	if err != nil {
		t.Fatal(err)
	}
	run := func(col *drift.Collector, spool *report.Spool) report.Run {
		col.Summary(p)
		return report.Run{Policy: p.Metadata.Name, Version: "v", Backend: "drift", Scanned: col.Scanned, Notes: col.Notes,
			Findings: col.Findings, Spooled: spool, DeclaredNamespaces: len(p.Spec.Namespaces)}
	}
	old, now := run(want, nil), run(got, sp)
	writers := map[string]report.Writer{"text": report.Text{}, "json": report.JSON{}, "junit": report.JUnit{},
		"sarif": report.SARIF{BaseDir: filepath.Dir(gen), Rules: []report.SARIFRule{{ID: drift.PodPrivileged, Proves: "x"}}}}
	for name, w := range writers {
		var a, b bytes.Buffer
		if err := w.Write(&a, old); err != nil {
			t.Fatal(err)
		}
		if err := w.Write(&b, now); err != nil {
			t.Fatal(err)
		}
		if a.Len() < 5000 || !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Errorf("%s: %d bytes streamed, %d read whole; identical: %v", name, b.Len(), a.Len(), bytes.Equal(a.Bytes(), b.Bytes()))
		}
	}
}
