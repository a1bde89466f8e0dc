package drift_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
)

var update = flag.Bool("update", false, "rewrite the fixture files under fixtures/drift")

func runtimeToUnstructured(obj any) (map[string]any, error) {
	return runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
}

// toYAML renders test objects as one multi-document stream.
func toYAML(t testing.TB, objs []any) []byte {
	t.Helper()
	var buf bytes.Buffer
	plain := make([]any, len(objs))
	for i, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			plain[i] = u.Object
		} else {
			plain[i] = o
		}
	}
	if err := render.WriteYAML(&buf, plain...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// expectations reads the expected checks per target from the objects' annotations.
func expectations(t testing.TB, m *drift.Manifests) map[string][]string {
	t.Helper()
	want := map[string][]string{}
	for _, p := range m.Pods {
		want["pod/"+p.Namespace+"/"+p.Name] = splitChecks(p.Annotations[expectAnnotation])
	}
	for _, s := range m.Sandboxes {
		want[strings.ToLower(s.GetKind())+"/"+s.GetNamespace()+"/"+s.GetName()] = splitChecks(s.GetAnnotations()[expectAnnotation])
	}
	for _, s := range m.Claims {
		want[strings.ToLower(s.GetKind())+"/"+s.GetNamespace()+"/"+s.GetName()] = splitChecks(s.GetAnnotations()[expectAnnotation])
	}
	for _, w := range m.Workloads {
		if exp, ok := w.Meta.Annotations[expectAnnotation]; ok {
			want[w.Target()] = splitChecks(exp)
		}
	}
	return want
}

func splitChecks(s string) []string {
	var out []string
	for _, c := range strings.Split(s, ",") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}

// checksByTarget groups the non-passing findings' checks by target.
func checksByTarget(fs []report.Finding) map[string][]string {
	got := map[string][]string{}
	for _, f := range fs {
		if f.Status == report.Pass {
			continue
		}
		// A policy's finding is reported once, naming the sandboxes it
		// applies to: each of them has it.
		for _, target := range targetsOf(f) {
			if !slices.Contains(got[target], f.Check) {
				got[target] = append(got[target], f.Check)
			}
		}
	}
	for k := range got {
		sort.Strings(got[k])
	}
	return got
}

// assertExpected compares findings with the annotated expectations: every
// object triggers exactly the checks it names, and every failing finding
// carries expected, actual, fix and evidence.
func assertExpected(t *testing.T, want map[string][]string, fs []report.Finding) {
	t.Helper()
	got := checksByTarget(fs)
	for target, w := range want {
		if !slices.Equal(got[target], w) {
			t.Errorf("%s: checks %v, want %v\n%s", target, got[target], w, findingsFor(fs, target))
		}
	}
	for target := range got {
		if _, ok := want[target]; !ok && target != drift.SummaryTarget {
			t.Errorf("unexpected findings for %s: %v", target, got[target])
		}
	}
	for _, f := range fs {
		if f.Status != report.Fail {
			continue
		}
		if f.Expected == "" || f.Actual == "" || f.Fix == "" || f.Evidence == "" || f.Subject == "" {
			t.Errorf("%s %s on %s lacks expected/actual/fix/evidence/subject: %+v", f.Check, f.Subject, f.Target, f)
		}
		if f.Namespace == "" && strings.HasPrefix(f.Target, "pod/") {
			t.Errorf("%s on %s has no namespace", f.Check, f.Target)
		}
	}
}

// targetsOf are the sandboxes a finding is about: its target, or those a
// policy's finding applies to.
func targetsOf(f report.Finding) []string {
	if len(f.Affects) > 0 {
		return f.Affects
	}
	return []string{f.Target}
}

func findingsFor(fs []report.Finding, target string) string {
	var b strings.Builder
	for _, f := range fs {
		if slices.Contains(targetsOf(f), target) && f.Status != report.Pass {
			b.WriteString("  " + f.Check + " " + f.Subject + ": " + report.ExpectedActual(f) + "\n")
		}
	}
	return b.String()
}

// checkYAML decodes manifests and runs the engine over them, as `sandprobe
// drift -f` does.
func checkYAML(t *testing.T, p *policy.Policy, data []byte) (*drift.Manifests, *drift.Collector) {
	t.Helper()
	return checkYAMLIn(t, p, data, "")
}

// checkYAMLIn is checkYAML with `-n namespace`.
func checkYAMLIn(t *testing.T, p *policy.Policy, data []byte, namespace string) (*drift.Manifests, *drift.Collector) {
	t.Helper()
	m := drift.Manifests{Namespace: namespace}
	if err := m.DecodeManifests(bytes.NewReader(data), "test"); err != nil {
		t.Fatal(err)
	}
	e, err := drift.NewEngine(p)
	if err != nil {
		t.Fatal(err)
	}
	col := drift.NewCollector()
	if err := drift.CheckManifests(e, &m, col); err != nil {
		t.Fatal(err)
	}
	return &m, col
}

// TestFixtures: every lazy object in fixtures/drift triggers exactly the
// checks it is annotated with, and the hardened ones trigger none. The
// fixture files are generated from the case tables (go test -update) and
// must be current.
func TestFixtures(t *testing.T) {
	for _, set := range fixtureSets() {
		t.Run(set.file, func(t *testing.T) {
			p := loadPolicy(t, set.policy)
			data := toYAML(t, set.objects(p, ""))
			data = append([]byte("# Generated by `go test ./drift -run TestFixtures -update` from drift/cases_test.go.\n"+
				"# Each pod and Sandbox names the checks it must trigger in "+expectAnnotation+"; check it with\n"+
				"#   sandprobe drift --policy fixtures/"+set.policy+" -f fixtures/drift/"+set.file+"\n"), data...)
			path := filepath.Join(repoRoot(), "fixtures", "drift", set.file)
			if *update {
				if err := os.WriteFile(path, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			have, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(have, data) {
				t.Fatalf("%s is stale: run go test ./drift -run TestFixtures -update", path)
			}
			m, col := checkYAML(t, p, data)
			want := expectations(t, m)
			if len(want) == 0 {
				t.Fatal("no objects with expectations")
			}
			assertExpected(t, want, col.Findings)
		})
	}
}

// TestEveryRuleHasALazyObject: the fixtures break every rule at least once.
func TestEveryRuleHasALazyObject(t *testing.T) {
	covered := map[string]bool{}
	for _, c := range append(podCases(), phaseCases()...) {
		for _, x := range c.expect {
			covered[x] = true
		}
	}
	for _, cs := range [][]egressCase{netpolCases(), ciliumCases()} {
		for _, c := range cs {
			for _, x := range c.expect {
				covered[x] = true
			}
		}
	}
	for _, cs := range [][]anpCase{anpCases(), ciliumReadCases()} {
		for _, c := range cs {
			for _, x := range c.expect {
				covered[x] = true
			}
		}
	}
	// SandboxClaims are among the workloads' objects.
	for _, o := range workloadObjects(loadPolicy(t, "policy.yaml"), "") {
		if u, ok := o.(*unstructured.Unstructured); ok {
			for _, x := range splitChecks(u.GetAnnotations()[expectAnnotation]) {
				covered[x] = true
			}
		}
	}
	// Only a live source can find nothing: TestKubeNothingFound.
	for _, c := range scanCases() {
		covered[c.check] = true
	}
	for _, c := range dockerCases() {
		for _, x := range c.expect {
			covered[x] = true
		}
	}
	for _, r := range drift.Rules() {
		if !covered[r.ID] {
			t.Errorf("rule %s has no lazy object that breaks it", r.ID)
		}
	}
}

// TestRenderHasZeroDrift: for every fixture policy, what `sandprobe render`
// produces (probe pod, NetworkPolicy, CiliumNetworkPolicy) drifts nowhere.
func TestRenderHasZeroDrift(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(repoRoot(), "fixtures", "*.yaml"))
	if len(files) < 4 {
		t.Fatalf("want ≥ 4 fixture policies, have %d", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			p, raw, err := policy.LoadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			opts := render.ProbePodOptions{Nonce: "n0nce"}
			if p.Spec.Image.RequireDigest && p.Spec.Probe.Image == "" {
				opts.ProbeImage = "ghcr.io/sandprobe/sandprobe" + digest
			}
			if err := render.CheckPinned(p, opts); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := render.WriteYAML(&buf, render.Manifests(p, raw, opts, "")...); err != nil {
				t.Fatal(err)
			}
			m, col := checkYAML(t, p, buf.Bytes())
			if len(m.Pods) != 1 || len(m.NetworkPolicies) == 0 || len(m.Cilium) == 0 {
				t.Fatalf("render gave %d pods, %d NetworkPolicies, %d Cilium policies", len(m.Pods), len(m.NetworkPolicies), len(m.Cilium))
			}
			if col.Scanned != 1 {
				t.Fatalf("scanned %d sandboxes, want the probe pod", col.Scanned)
			}
			col.Summary(p)
			for _, f := range col.Findings {
				if f.Status != report.Pass {
					t.Errorf("rendered objects drift: %s %s %s: %s", f.Target, f.Check, f.Subject, report.ExpectedActual(f))
				}
			}
			// A policy that allows nothing and needs no resolver renders
			// a pure default deny: no rule, so no reason.
			if len(m.NetworkPolicies[0].Spec.Egress) > 0 {
				for _, key := range []string{"sandprobe.dev/reason.egress.0"} {
					if m.NetworkPolicies[0].Annotations[key] == "" || m.Cilium[0].GetAnnotations()[key] == "" {
						t.Errorf("rendered policies lack the reason annotation %s", key)
					}
				}
			}
			// Every rendered rule carries its reason.
			if n := len(m.NetworkPolicies[0].Spec.Egress); n != countReasons(m.NetworkPolicies[0].Annotations) {
				t.Errorf("NetworkPolicy: %d egress rules, %d reasons", n, countReasons(m.NetworkPolicies[0].Annotations))
			}
			egress, _, _ := unstructured.NestedSlice(m.Cilium[0].Object, "spec", "egress")
			if len(egress) != countReasons(m.Cilium[0].GetAnnotations()) {
				t.Errorf("CiliumNetworkPolicy: %d egress rules, %d reasons", len(egress), countReasons(m.Cilium[0].GetAnnotations()))
			}
		})
	}
}

func countReasons(a map[string]string) int {
	n := 0
	for k := range a {
		if strings.HasPrefix(k, render.AnnotationReasonPrefix) {
			n++
		}
	}
	return n
}

// TestPSSRestrictedWhateverThePolicySays: a policy that allows a capability
// and no seccomp still cannot make a pod pass that the restricted standard
// refuses.
func TestPSSRestrictedWhateverThePolicySays(t *testing.T) {
	p := loadPolicy(t, "policy.yaml")
	p.Spec.Capabilities = []string{"NET_ADMIN"}
	p.Spec.Seccomp = policy.SeccompUnconfined
	pod := hardenedPod(p, "sandboxes", "lax")
	agent(pod).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
	pod.Spec.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	e, err := drift.NewEngine(p)
	if err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for _, f := range e.CheckPod(pod) {
		if f.Check != drift.PodPSSRestricted {
			t.Errorf("unexpected %s %s", f.Check, f.Subject)
		}
		subjects = append(subjects, f.Subject)
	}
	sort.Strings(subjects)
	if want := []string{"capabilities_restricted", "seccompProfile_restricted"}; !slices.Equal(subjects, want) {
		t.Errorf("restricted findings %v, want %v", subjects, want)
	}
}

// TestFindingsNameTheField: a finding's subject and fix name the exact
// field, for containers, init containers and pod-level settings alike.
func TestFindingsNameTheField(t *testing.T) {
	p := loadPolicy(t, "policy.yaml")
	e, err := drift.NewEngine(p)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		mutate  func(*corev1.Pod)
		subject string
		fix     string
	}{
		{"init container", func(p *corev1.Pod) { p.Spec.InitContainers[0].SecurityContext.AllowPrivilegeEscalation = ptr(true) },
			"spec.initContainers[setup].securityContext.allowPrivilegeEscalation", "set spec.initContainers[setup].securityContext.allowPrivilegeEscalation: false"},
		{"pod level", func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsUser = nil },
			"spec.securityContext.runAsUser", "set spec.securityContext.runAsUser: 65532"},
		{"container override", func(p *corev1.Pod) { p.Spec.Containers[1].SecurityContext.RunAsUser = ptr(int64(0)) },
			"spec.containers[browser].securityContext.runAsUser", "set spec.containers[browser].securityContext.runAsUser: 65532"},
		{"ephemeral container", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debugger", Image: "busybox" + digest,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true)},
			}}}
		}, "spec.ephemeralContainers[debugger].securityContext.capabilities.drop", "set spec.ephemeralContainers[debugger].securityContext.capabilities.drop: [ALL]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := hardenedPod(p, "sandboxes", "x")
			c.mutate(pod)
			fs := e.CheckPod(pod)
			if len(fs) != 1 || fs[0].Subject != c.subject || fs[0].Fix != c.fix {
				t.Fatalf("got %+v\nwant subject %q fix %q", fs, c.subject, c.fix)
			}
		})
	}
}

// TestSecretValuesNeverReported: a credential's value appears nowhere in a finding.
func TestSecretValuesNeverReported(t *testing.T) {
	p := loadPolicy(t, "policy.yaml")
	e, _ := drift.NewEngine(p)
	pod := hardenedPod(p, "sandboxes", "x")
	const secret = "ghp_S3cr3tV4lu3ThatMustNotLeak"
	agent(pod).Env = append(agent(pod).Env, corev1.EnvVar{Name: "GH_TOKEN", Value: secret})
	fs := e.CheckPod(pod)
	if len(fs) != 1 {
		t.Fatalf("want one finding, got %+v", fs)
	}
	var buf bytes.Buffer
	if err := (report.JSON{}).Write(&buf, report.Run{Findings: fs}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), secret) || !strings.Contains(buf.String(), "GH_TOKEN") {
		t.Fatalf("finding leaks the value or misses the name:\n%s", buf.String())
	}
}

// TestDecodeManifests: Lists, typed lists, comments and empty documents are
// read; malformed input is an error naming the file and document.
func TestDecodeManifests(t *testing.T) {
	good := `# comment only
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: a, namespace: sandboxes}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: c}
---
---
{"apiVersion": "v1", "kind": "PodList", "items": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b"}}]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicyList
items:
- apiVersion: networking.k8s.io/v1
  kind: NetworkPolicy
  metadata: {name: np}
  spec: {podSelector: {}}
`
	var m drift.Manifests
	if err := m.DecodeManifests(strings.NewReader(good), "good.yaml"); err != nil {
		t.Fatal(err)
	}
	if len(m.Pods) != 2 || len(m.NetworkPolicies) != 1 || m.Skipped["ConfigMap"] != 1 {
		t.Fatalf("pods %d, netpols %d, skipped %v", len(m.Pods), len(m.NetworkPolicies), m.Skipped)
	}
	bad := []struct{ name, doc, want string }{
		{"not yaml", "apiVersion: v1\nkind: Pod\nmetadata: [", "bad.yaml: document 1"},
		{"no kind", "apiVersion: v1\nmetadata: {name: x}\n", "no kind"},
		{"wrong type", "apiVersion: v1\nkind: Pod\nspec: {containers: 3}\n", "document 1: pod"},
		{"bad list item", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, spec: {hostNetwork: yes-please}}\n", "List item 0"},
		{"second document", "apiVersion: v1\nkind: Pod\nmetadata: {name: ok}\n---\nkind: [\n", "document 2"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			var m drift.Manifests
			err := m.DecodeManifests(strings.NewReader(c.doc), "bad.yaml")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestSummaryKeepsReportsSmall: clean objects add no findings; the run
// carries one passing line per applicable rule instead.
func TestSummaryKeepsReportsSmall(t *testing.T) {
	p := loadPolicy(t, "policy.yaml")
	objs := egressBase(p, false)
	for i := 0; i < 1000; i++ {
		objs = append(objs, hardenedPod(p, "sandboxes", "agent-"+strconv.Itoa(i)))
	}
	_, col := checkYAML(t, p, toYAML(t, objs))
	if col.Scanned != 1000 || len(col.Findings) != 0 {
		t.Fatalf("scanned %d, findings %d", col.Scanned, len(col.Findings))
	}
	col.Summary(p)
	if len(col.Findings) == 0 || len(col.Findings) > len(drift.Rules()) {
		t.Fatalf("summary has %d findings", len(col.Findings))
	}
	for _, f := range col.Findings {
		if f.Target != drift.SummaryTarget || f.Status != report.Pass {
			t.Fatalf("summary finding %+v", f)
		}
	}
	run := report.Run{Findings: col.Findings}
	if run.ExitCode() != report.ExitOK {
		t.Fatalf("exit %d", run.ExitCode())
	}
}

// TestSecretPatterns: the fast matcher agrees with path.Match.
func TestSecretPatterns(t *testing.T) {
	p := loadPolicy(t, "policy.yaml")
	p.Spec.Secrets.EnvNamePatterns = []string{"*_KEY", "*_TOKEN", "*PASSWORD*", "AWS_*", "GH?TOKEN", "X*Y*Z"}
	e, err := drift.NewEngine(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		want bool
	}{
		{"ANTHROPIC_API_KEY", true}, {"api_key", true}, {"KEY", false}, {"_KEY", true}, {"GITHUB_TOKEN", true},
		{"DB_PASSWORD_FILE", true}, {"PASSWORD", true}, {"AWS_REGION", true}, {"GH_TOKEN", true}, {"GHXTOKEN", true},
		{"XYZ", true}, {"XAYBZ", true}, {"XZY", false}, {"HOME", false}, {"PATH", false}, {"KEYS", false},
	} {
		pod := hardenedPod(p, "sandboxes", "x")
		agent(pod).Env = []corev1.EnvVar{{Name: c.name, Value: "v"}}
		got := len(e.CheckPod(pod)) == 1
		if got != c.want {
			t.Errorf("%s: secret %v, want %v", c.name, got, c.want)
		}
	}
}

// TestDocsRules: docs/drift.md lists every rule, generated from the table.
func TestDocsRules(t *testing.T) {
	path := filepath.Join(repoRoot(), "docs", "drift.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "|---|---|---|---|\n", "<!-- /rules -->"
	text := string(data)
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i < 0 || j < i {
		t.Fatal("docs/drift.md lacks the rules table markers")
	}
	var b strings.Builder
	for _, r := range drift.Rules() {
		b.WriteString("| `" + r.ID + "` | " + string(r.Severity) + " | " + r.Proves + " | " + strings.ReplaceAll(r.Fix, "|", `\|`) + " |\n")
	}
	want := text[:i+len(begin)] + b.String() + text[j:]
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want != text {
		t.Fatal("docs/drift.md rules table is stale: go test ./drift -run TestDocsRules -update")
	}
}

// TestSilentIdentityNeverMeansRoot: a policy that says nothing about its
// identity expects the non-root default, so a pod running as root is drift
// and no fix ever reads "runAsUser: 0"; only a policy that declares root
// (allowRoot) accepts it, and render's pod for it then drifts nowhere.
func TestSilentIdentityNeverMeansRoot(t *testing.T) {
	const head = "apiVersion: sandprobe.dev/v1alpha1\nkind: SandboxPolicy\nmetadata: {name: t}\nspec:\n  selector: {matchLabels: {sandbox: \"true\"}}\n  namespaces: [sandboxes]\n  image: {requireDigest: false}\n"
	silent, err := policy.Load([]byte(head))
	if err != nil {
		t.Fatal(err)
	}
	pod := hardenedPod(silent, "sandboxes", "root")
	pod.Spec.SecurityContext.RunAsUser = ptr(int64(0))
	pod.Spec.SecurityContext.RunAsGroup = ptr(int64(0))
	e, err := drift.NewEngine(silent)
	if err != nil {
		t.Fatal(err)
	}
	fs := e.CheckPod(pod)
	got := checksByTarget(fs)["pod/sandboxes/root"]
	for _, want := range []string{drift.PodRunAsUser, drift.PodRunAsGroup} {
		if !slices.Contains(got, want) {
			t.Errorf("a root pod under a silent policy: checks %v, want %s", got, want)
		}
	}
	for _, f := range fs {
		if strings.HasSuffix(f.Fix, ": 0") || f.Expected == "0" {
			t.Errorf("%s: fix %q expected %q: the default identity reads as root", f.Check, f.Fix, f.Expected)
		}
	}

	root, err := policy.Load([]byte(head + "  identity: {uid: 0, gid: 0, allowRoot: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := render.WriteYAML(&buf, render.Manifests(root, []byte(head), render.ProbePodOptions{}, "")...); err != nil {
		t.Fatal(err)
	}
	m, col := checkYAML(t, root, buf.Bytes())
	if len(m.Pods) != 1 {
		t.Fatalf("render gave %d pods", len(m.Pods))
	}
	for _, f := range col.Findings {
		// The restricted standard still refuses root, whatever the policy says.
		if f.Status == report.Fail && f.Check != drift.PodPSSRestricted {
			t.Errorf("render's pod for a root policy drifts: %s %s: %s", f.Check, f.Subject, report.ExpectedActual(f))
		}
	}
}

// TestOfflineReadLikeTheAPIServer: files are judged as the API server would
// store them — a typed list's items take its item kind, an object without a
// namespace lands in default (or the namespace given with -n), a volume
// with no source is an emptyDir.
func TestOfflineReadLikeTheAPIServer(t *testing.T) {
	p := loadPolicy(t, "policy.yaml")
	pod := hardenedPod(p, "", "agent")
	pod.TypeMeta = metav1.TypeMeta{}
	podJSON, _ := json.Marshal(pod)
	open := netpol("", "open", "agent", networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{ipPeer("0.0.0.0/0")}})
	open.TypeMeta = metav1.TypeMeta{}
	npJSON, _ := json.Marshal(open)

	t.Run("typed lists", func(t *testing.T) {
		doc := `{"apiVersion":"v1","kind":"PodList","items":[` + string(podJSON) + `]}` + "\n---\n" +
			`{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicyList","items":[` + string(npJSON) + `]}`
		m, col := checkYAML(t, p, []byte(doc))
		if len(m.Pods) != 1 || len(m.NetworkPolicies) != 1 {
			t.Fatalf("decoded %d pods, %d policies", len(m.Pods), len(m.NetworkPolicies))
		}
		// Both omit the namespace: both land in default, where the policy
		// selects the pod and opens the internet.
		if got := checksByTarget(col.Findings)["pod/default/agent"]; !slices.Contains(got, drift.NetpolWorld) {
			t.Errorf("pod/default/agent: checks %v, want %s", got, drift.NetpolWorld)
		}
		// A plain List's items must say what they are.
		var m2 drift.Manifests
		err := m2.DecodeManifests(strings.NewReader(`{"apiVersion":"v1","kind":"List","items":[`+string(podJSON)+`]}`), "list.json")
		if err == nil || !strings.Contains(err.Error(), "no kind") {
			t.Errorf("a List item without kind: %v", err)
		}
	})
	t.Run("namespace", func(t *testing.T) {
		podY := toYAML(t, []any{hardenedPod(p, "", "agent")})
		for _, c := range []struct {
			name, npNamespace, defaultNS string
			want                         string // the pod's target, its checks must include want
			check                        string
		}{
			// The policy names default, the pod says nothing: the same namespace.
			{"pod omits, policy names default", "default", "", "pod/default/agent", drift.NetpolWorld},
			// The policy is elsewhere: it does not select the pod.
			{"pod omits, policy elsewhere", "team-a", "", "pod/default/agent", drift.NetpolEgressUnrestricted},
			// -n sandboxes: the pod lands in a sandbox namespace.
			{"-n puts both in the namespace", "", "sandboxes", "pod/sandboxes/agent", drift.NetpolWorld},
		} {
			t.Run(c.name, func(t *testing.T) {
				np := netpol(c.npNamespace, "open", "agent", networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{ipPeer("0.0.0.0/0")}})
				data := append(append([]byte{}, podY...), toYAML(t, []any{np})...)
				_, col := checkYAMLIn(t, p, data, c.defaultNS)
				got := checksByTarget(col.Findings)
				if !slices.Contains(got[c.want], c.check) {
					t.Errorf("checks %v, want %s on %s", got, c.check, c.want)
				}
			})
		}
	})
	t.Run("volume with no source", func(t *testing.T) {
		bare := hardenedPod(p, "sandboxes", "bare")
		bare.Spec.Volumes = append(bare.Spec.Volumes, corev1.Volume{Name: "scratch"})
		_, col := checkYAML(t, p, toYAML(t, append(egressBase(p, false), bare)))
		fs := col.Findings
		if got := checksByTarget(fs)["pod/sandboxes/bare"]; !slices.Equal(got, []string{drift.PodEmptyDirSize}) {
			t.Errorf("checks %v, want %s: a volume with no source is an unbounded emptyDir once admitted", got, drift.PodEmptyDirSize)
		}
	})
}

// TestUnicodeLineBreaksHideNothing: YAML (and so the API server) ends a
// comment at NEL, LS and PS as at '\n'. A line written after one inside a
// comment is part of the object the API server stores, so drift must see
// it, in memory and streamed.
func TestUnicodeLineBreaksHideNothing(t *testing.T) {
	p := loadPolicy(t, "policy.yaml")
	clean := string(toYAML(t, append(egressBase(p, false), hardenedPod(p, "sandboxes", "agent"))))
	for _, br := range []string{"\u0085", "\u2028", "\u2029"} {
		for _, c := range []struct{ after, hidden, check string }{
			{"spec:\n", "  hostNetwork: true", drift.PodHostNetwork},
			{"spec:\n", "  hostPID: true", drift.PodHostPID},
		} {
			pod := strings.Index(clean, "kind: Pod\n")
			i := strings.Index(clean[max(pod, 0):], c.after) + pod
			if pod < 0 || i < pod {
				t.Fatalf("no %q in the rendered pod", c.after)
			}
			doc := clean[:i+len(c.after)] + "  # reviewed" + br + c.hidden + "\n" + clean[i+len(c.after):]
			_, col := checkYAML(t, p, []byte(doc))
			if got := checksByTarget(col.Findings)["pod/sandboxes/agent"]; !slices.Contains(got, c.check) {
				t.Errorf("%U before %q: checks %v, want %s", []rune(br)[0], c.hidden, got, c.check)
			}
			path := filepath.Join(t.TempDir(), "pods.yaml")
			if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			_, sp, err := streamed(t, p, []string{path}, nil, "", 2)
			if err != nil {
				t.Fatal(err)
			}
			sfs, err := sp.Slice()
			if err != nil {
				t.Fatal(err)
			}
			if got := checksByTarget(sfs)["pod/sandboxes/agent"]; !slices.Contains(got, c.check) {
				t.Errorf("streamed, %U before %q: checks %v, want %s", []rune(br)[0], c.hidden, got, c.check)
			}
		}
	}
}
