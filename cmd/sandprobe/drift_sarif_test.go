package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"
)

// sarifLog is the part of a SARIF log the tests read.
type sarifLog struct {
	Runs []struct {
		Tool struct {
			Driver struct {
				Rules []struct {
					ID string `json:"id"`
				} `json:"rules"`
			} `json:"driver"`
		} `json:"tool"`
		Invocations []struct {
			ExecutionSuccessful bool `json:"executionSuccessful"`
		} `json:"invocations"`
		Results []struct {
			RuleID              string                `json:"ruleId"`
			PartialFingerprints map[string]string     `json:"partialFingerprints"`
			Level               string                `json:"level"`
			Message             struct{ Text string } `json:"message"`
			Locations           []struct {
				PhysicalLocation *struct {
					ArtifactLocation struct{ URI string } `json:"artifactLocation"`
					Region           struct {
						StartLine int `json:"startLine"`
					} `json:"region"`
				} `json:"physicalLocation"`
				LogicalLocations []struct {
					FullyQualifiedName string `json:"fullyQualifiedName"`
				} `json:"logicalLocations"`
			} `json:"locations"`
		} `json:"results"`
	} `json:"runs"`
}

// sarifSchema is the OASIS SARIF 2.1.0 schema (errata 01,
// testdata/sarif-schema-2.1.0.json); call it before any t.Chdir.
func sarifSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	schemaFile, err := filepath.Abs("testdata/sarif-schema-2.1.0.json")
	if err != nil {
		t.Fatal(err)
	}
	sch, err := jsonschema.NewCompiler().Compile(schemaFile)
	if err != nil {
		t.Fatalf("compile the SARIF schema: %v", err)
	}
	return sch
}

// validateSARIF checks a document against the schema and decodes it.
func validateSARIF(t *testing.T, sch *jsonschema.Schema, doc []byte) sarifLog {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatalf("SARIF is not JSON: %v", err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("SARIF does not validate against the 2.1.0 schema: %v", err)
	}
	var l sarifLog
	if err := json.Unmarshal(doc, &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(l.Runs))
	}
	return l
}

// TestDriftSARIFFixtures: SARIF from every drift fixture validates against
// the 2.1.0 schema, and each result points at a line inside the object the
// finding asks to change (the policy for an egress rule, the pod or
// workload otherwise), on the field it names or the nearest one written.
func TestDriftSARIFFixtures(t *testing.T) {
	sch := sarifSchema(t)
	t.Chdir("../..") // paths relative to the repository root, as in CI
	sarifFile := filepath.Join(t.TempDir(), "drift.sarif")
	code, stdout, stderr := runApp(t, "", "drift", "--policy", "fixtures/policy.yaml", "-f", "fixtures/drift", "-o", "sarif", "--sarif", sarifFile)
	if code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, stderr)
	}
	file, err := os.ReadFile(sarifFile)
	if err != nil || !bytes.Equal(file, []byte(stdout)) {
		t.Fatalf("--sarif file differs from -o sarif (%v)", err)
	}
	l := validateSARIF(t, sch, []byte(stdout))
	run := l.Runs[0]
	if len(run.Tool.Driver.Rules) < 60 || len(run.Invocations) != 1 || !run.Invocations[0].ExecutionSuccessful {
		t.Fatalf("%d rules, invocations %+v", len(run.Tool.Driver.Rules), run.Invocations)
	}
	objects := map[string]map[string]span{}
	seen := map[string]bool{}
	for _, r := range run.Results {
		if len(r.Locations) != 1 || r.Locations[0].PhysicalLocation == nil {
			t.Errorf("%s %q: no physical location", r.RuleID, r.Message.Text)
			continue
		}
		loc := r.Locations[0]
		uri, line := loc.PhysicalLocation.ArtifactLocation.URI, loc.PhysicalLocation.Region.StartLine
		if !strings.HasPrefix(uri, "fixtures/drift/") {
			t.Errorf("%s: uri %q, want a path relative to the repository root", r.RuleID, uri)
			continue
		}
		if objects[uri] == nil {
			objects[uri] = documentSpans(t, uri)
		}
		subject, _, _ := strings.Cut(r.Message.Text, ": expected ")
		obj, path := "", subject
		if o, rest, ok := strings.Cut(subject, " "); ok && strings.Contains(o, "policy/") {
			obj, path = o, rest
		} else if len(loc.LogicalLocations) > 0 {
			obj = loc.LogicalLocations[0].FullyQualifiedName
		}
		sp, ok := objectSpan(objects[uri], obj, func() string { return loc.LogicalLocations[0].FullyQualifiedName })
		if !ok {
			t.Errorf("%s: %s is not an object of %s", r.RuleID, obj, uri)
			continue
		}
		if line < sp.first || line > sp.last {
			t.Errorf("%s %s: line %d is outside %s (lines %d-%d of %s)", r.RuleID, subject, line, obj, sp.first, sp.last, uri)
			continue
		}
		text := sp.lines[line-1]
		if !onField(text, path) && line != sp.start {
			t.Errorf("%s %s: %s:%d is %q: not the field, an enclosing one, or the object", r.RuleID, subject, uri, line, text)
		}
		seen[fmt.Sprintf("%s %s:%d", r.RuleID, uri, line)] = true
	}
	// The lines a reviewer would be shown, read off the fixtures by hand.
	for _, want := range []struct{ rule, file, text, after string }{
		{"drift.pod.privileged", "pods.yaml", "privileged: true", "name: privileged"},
		{"drift.pod.host-ports", "pods.yaml", "hostPort: 8080", "name: host-ports"},
		{"drift.pod.readonly-root", "pods.yaml", "readOnlyRootFilesystem: false", "name: readonly-root"},
		{"drift.netpol.world", "netpol.yaml", "- ipBlock:", "name: allow-internet-for-a-minute"},
		{"drift.cilium.fqdn-extra", "cilium.yaml", "- matchName: pastebin.com", "name: pastebin"},
		{"drift.pod.image-digest", "sandboxes.yaml", "image: registry.example/agents/agent:latest", "name: sandbox-image-digest"},
	} {
		line := lineAfter(t, "fixtures/drift/"+want.file, want.after, want.text)
		if !seen[fmt.Sprintf("%s fixtures/drift/%s:%d", want.rule, want.file, line)] {
			t.Errorf("no %s result at fixtures/drift/%s:%d (%q)", want.rule, want.file, line, want.text)
		}
	}
}

// objectSpan finds obj among a file's objects. A NetworkPolicy's subject
// omits its namespace: the pod's, which logical names; and the policy the
// agent-sandbox controller renders from a SandboxTemplate is located in
// the template.
func objectSpan(spans map[string]span, obj string, logical func() string) (span, bool) {
	sp, ok := spans[strings.TrimSuffix(obj, "*")]
	if !ok && strings.HasPrefix(obj, "networkpolicy/") {
		ns := strings.Split(logical(), "/")[1]
		sp, ok = spans["networkpolicy/"+ns+"/"+strings.TrimPrefix(obj, "networkpolicy/")]
		if tpl, rendered := strings.CutSuffix(strings.TrimPrefix(obj, "networkpolicy/"), "-network-policy"); !ok && rendered {
			sp, ok = spans["sandboxtemplate/"+ns+"/"+tpl]
		}
	}
	return sp, ok
}

// TestDriftSARIFPullRequest: a pull request that adds a privileged sandbox
// pod to a file of clean ones gets its annotation on the privileged line of
// that file, relative to the repository root; a missing field lands on the
// container that lacks it.
func TestDriftSARIFPullRequest(t *testing.T) {
	hardened, policy, sch := hardenedFixture(t)
	repo := t.TempDir()
	os.MkdirAll(filepath.Join(repo, "deploy"), 0o755)
	added := string(hardened) + "\n---\n# added by the pull request\n" + strings.Replace(podOf(t, hardened), "    securityContext:\n", "    securityContext:\n      privileged: true\n", 1)
	os.WriteFile(filepath.Join(repo, "deploy", "agents.yaml"), []byte(added), 0o644)
	t.Chdir(repo)
	code, stdout, stderr := runApp(t, "", "drift", "--policy", policy, "-f", "deploy/", "-o", "sarif")
	if code != 1 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	l := validateSARIF(t, sch, []byte(stdout))
	lines := strings.Split(added, "\n")
	var got []string
	for _, r := range l.Runs[0].Results {
		pl := r.Locations[0].PhysicalLocation
		if pl == nil {
			t.Fatalf("%s: no physical location", r.RuleID)
		}
		got = append(got, fmt.Sprintf("%s %s:%d %s", r.RuleID, pl.ArtifactLocation.URI, pl.Region.StartLine, strings.TrimSpace(lines[pl.Region.StartLine-1])))
	}
	want := "drift.pod.privileged deploy/agents.yaml:"
	if len(got) != 1 || !strings.HasPrefix(got[0], want) || !strings.HasSuffix(got[0], " privileged: true") {
		t.Fatalf("results %q, want one %s… on `privileged: true`", got, want)
	}
}

// podOf is the first Pod of a multi-document file, renamed, as a new
// document.
// TestDriftSARIFFingerprints: two sandbox pods in one file with the same
// drift (each privileged) are two results with two fingerprints — code
// scanning takes results with one fingerprint for one alert, so a shared
// one would fold the second pod's problem into the first's — and each
// fingerprint stays when lines above move (the file edited elsewhere).
func TestDriftSARIFFingerprints(t *testing.T) {
	hardened, policy, sch := hardenedFixture(t)
	privileged := strings.Replace(podOf(t, hardened), "    securityContext:\n", "    securityContext:\n      privileged: true\n", 1)
	second := strings.Replace(privileged, "-pr\n", "-pr-2\n", 1)
	if second == privileged {
		t.Fatal("could not rename the second pod")
	}
	fingerprints := func(body string) []string {
		t.Helper()
		repo := t.TempDir()
		os.WriteFile(filepath.Join(repo, "agents.yaml"), []byte(body), 0o644)
		t.Chdir(repo)
		code, stdout, stderr := runApp(t, "", "drift", "--policy", policy, "-f", "agents.yaml", "-o", "sarif")
		if code != 1 {
			t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
		}
		var out []string
		for _, r := range validateSARIF(t, sch, []byte(stdout)).Runs[0].Results {
			if r.RuleID == "drift.pod.privileged" {
				out = append(out, r.PartialFingerprints["sandprobeFinding/v2"])
			}
		}
		return out
	}
	two := string(hardened) + "\n---\n" + privileged + "\n---\n" + second
	got := fingerprints(two)
	if len(got) != 2 || got[0] == "" || got[0] == got[1] {
		t.Fatalf("fingerprints of the two privileged pods: %q, want two different ones", got)
	}
	moved := fingerprints("# a comment\n# and another, above everything\n" + two)
	if !slices.Equal(moved, got) {
		t.Fatalf("fingerprints moved with the lines: %q, were %q", moved, got)
	}
}

// hardenedFixture is the hardened drift fixture, the policy's absolute
// path and the SARIF schema (before any t.Chdir).
func hardenedFixture(t *testing.T) ([]byte, string, *jsonschema.Schema) {
	t.Helper()
	hardened, err := os.ReadFile(fx + "drift/hardened.yaml")
	if err != nil {
		t.Fatal(err)
	}
	policy, err := filepath.Abs(fx + "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return hardened, policy, sarifSchema(t)
}

func podOf(t *testing.T, data []byte) string {
	for _, doc := range strings.Split(string(data), "\n---") {
		if strings.Contains(doc, "kind: Pod") && strings.Contains(doc, "    securityContext:\n") {
			out := doc
			for _, l := range strings.Split(doc, "\n") {
				if n, ok := strings.CutPrefix(l, "  name: "); ok {
					out = strings.Replace(doc, l, "  name: "+n+"-pr", 1)
					break
				}
			}
			return strings.TrimLeft(out, "\n")
		}
	}
	t.Fatal("no pod with a container securityContext in the file")
	return ""
}

// span is where one object is written in a file.
type span struct {
	start, first, last int // the object's first line (1-based) and its document
	lines              []string
}

// documentSpans reads a file's objects by "kind/namespace/name" (lower-case
// kind; cluster-scoped without a namespace) with the lines they span,
// independently of drift's own reader.
func documentSpans(t *testing.T, file string) map[string]span {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	out := map[string]span{}
	first := 1
	flush := func(last int) {
		doc := strings.Join(lines[first-1:last], "\n")
		var obj struct {
			Kind     string
			Metadata struct{ Name, Namespace string }
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil || obj.Kind == "" {
			return
		}
		ns := obj.Metadata.Namespace
		switch obj.Kind {
		case "AdminNetworkPolicy", "BaselineAdminNetworkPolicy", "ClusterNetworkPolicy", "CiliumClusterwideNetworkPolicy", "Namespace":
		default:
			if ns == "" {
				ns = "default"
			}
			ns += "/"
		}
		start := first
		for start < last && (strings.TrimSpace(lines[start-1]) == "" || strings.HasPrefix(strings.TrimSpace(lines[start-1]), "#")) {
			start++
		}
		out[strings.ToLower(obj.Kind)+"/"+ns+obj.Metadata.Name] = span{start: start, first: first, last: last, lines: lines}
	}
	for i, l := range lines {
		if strings.HasPrefix(l, "---") {
			flush(i)
			first = i + 2
		}
	}
	flush(len(lines))
	return out
}

// onField: the line writes one of the path's fields, or the list item one
// of its brackets names.
func onField(text, path string) bool {
	text = strings.TrimSpace(text)
	item := strings.HasPrefix(text, "- ")
	text = strings.TrimPrefix(text, "- ")
	for _, part := range strings.FieldsFunc(path, func(r rune) bool { return r == '.' || r == '[' || r == ']' }) {
		if strings.HasPrefix(text, part+":") || (item && strings.HasPrefix(text, "name: "+part)) {
			return true
		}
	}
	// An index ("ports[0]", "networks[1]") lands on the item itself.
	return item && strings.Contains(path, "[")
}

// lineAfter is the 1-based line of the first line equal to text (trimmed)
// after the line holding marker.
func lineAfter(t *testing.T, file, marker, text string) int {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for i, l := range strings.Split(string(data), "\n") {
		switch {
		case !found && strings.Contains(l, marker):
			found = true
		case found && strings.TrimSpace(l) == text:
			return i + 1
		}
	}
	t.Fatalf("%s: no %q after %q", file, text, marker)
	return 0
}

// TestDriftSARIFWouldRefuse: the pods Deny would refuse, from files, are
// results on the pod's own first line.
func TestDriftSARIFWouldRefuse(t *testing.T) {
	sch := sarifSchema(t)
	t.Chdir("../..")
	code, stdout, stderr := runApp(t, "", "drift", "--policy", "fixtures/policy.yaml", "--would-refuse", "-f", "fixtures/drift/pods.yaml", "-o", "sarif")
	if code != 1 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	l := validateSARIF(t, sch, []byte(stdout))
	spans := documentSpans(t, "fixtures/drift/pods.yaml")
	if len(l.Runs[0].Results) == 0 {
		t.Fatal("no results")
	}
	for _, r := range l.Runs[0].Results {
		loc := r.Locations[0]
		if loc.PhysicalLocation == nil || len(loc.LogicalLocations) == 0 {
			t.Fatalf("%s: no location", r.RuleID)
		}
		sp, ok := spans[loc.LogicalLocations[0].FullyQualifiedName]
		if line := loc.PhysicalLocation.Region.StartLine; !ok || line != sp.start {
			t.Errorf("%s %s: line %d, want the pod's first line %d", r.RuleID, loc.LogicalLocations[0].FullyQualifiedName, line, sp.start)
		}
	}
}

// TestDriftSeverityPrivilegedStatefulSet: a pull request with a privileged
// StatefulSet that mounts the Docker socket gets code-scanning's Critical
// for both (security-severity ≥ 9.0 on drift.pod.privileged and
// drift.pod.host-path), a lower score for a missing memory limit, and the
// text report lists the two critical findings first.
func TestDriftSeverityPrivilegedStatefulSet(t *testing.T) {
	sch := sarifSchema(t)
	policy, err := filepath.Abs(fx + "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "db.yaml")
	os.WriteFile(file, []byte(`apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: sandboxes}
spec:
  serviceName: db
  selector: {matchLabels: {sandbox: "true"}}
  template:
    metadata: {labels: {sandbox: "true"}}
    spec:
      runtimeClassName: kata
      automountServiceAccountToken: false
      containers:
        - name: db
          image: postgres@sha256:0000000000000000000000000000000000000000000000000000000000000000
          securityContext:
            privileged: true
          volumeMounts: [{name: sock, mountPath: /var/run/docker.sock}]
      volumes:
        - name: sock
          hostPath: {path: /var/run/docker.sock}
`), 0o644)
	code, stdout, stderr := runApp(t, "", "drift", "--policy", policy, "-f", file, "-o", "sarif")
	if code != 1 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	validateSARIF(t, sch, []byte(stdout))
	var l struct {
		Runs []struct {
			Tool struct {
				Driver struct {
					Rules []struct {
						ID         string         `json:"id"`
						Properties map[string]any `json:"properties"`
					} `json:"rules"`
				} `json:"driver"`
			} `json:"tool"`
			Results []struct{ RuleID string } `json:"results"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(stdout), &l); err != nil {
		t.Fatal(err)
	}
	score := map[string]float64{}
	for _, r := range l.Runs[0].Tool.Driver.Rules {
		s, _ := r.Properties["security-severity"].(string)
		var v float64
		if _, err := fmt.Sscan(s, &v); err != nil {
			t.Errorf("rule %s: security-severity %q", r.ID, s)
		}
		score[r.ID] = v
	}
	for _, id := range []string{"drift.pod.privileged", "drift.pod.host-path"} {
		if score[id] < 9 {
			t.Errorf("%s: security-severity %v, want ≥ 9.0 (critical)", id, score[id])
		}
	}
	if s := score["drift.pod.resources"]; s >= 4 || s == 0 {
		t.Errorf("drift.pod.resources: security-severity %v, want low (< 4)", s)
	}
	var results []string
	for _, r := range l.Runs[0].Results {
		results = append(results, r.RuleID)
	}
	for _, id := range []string{"drift.pod.privileged", "drift.pod.host-path", "drift.pod.resources"} {
		if !slices.Contains(results, id) {
			t.Errorf("no %s result in %v", id, results)
		}
	}

	checkCriticalFirst(t, policy, file)
}

// checkCriticalFirst: the text report of drift -f file lists the two
// critical findings first.
func checkCriticalFirst(t *testing.T, policy, file string) {
	t.Helper()
	code, stdout, _ := runApp(t, "", "drift", "--policy", policy, "-f", file)
	if code != 1 {
		t.Fatalf("text: exit %d", code)
	}
	var first []string
	for _, line := range strings.Split(stdout, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "FAIL" {
			first = append(first, f[1]+" "+f[2])
		}
	}
	if len(first) < 3 || first[0] != "critical drift.pod.privileged" && first[0] != "critical drift.pod.host-path" || !strings.HasPrefix(first[1], "critical ") || strings.HasPrefix(first[2], "critical ") {
		t.Errorf("text lists %q, want the two critical findings first\n%s", first, stdout)
	}
}
