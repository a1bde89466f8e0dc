package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
)

// SIMULATED fleets (kwok). Every test and figure here runs the real
// `sandprobe run --backend kube --per-node` binary against a real
// kube-apiserver, etcd and kube-scheduler whose nodes are kwok's fakes:
// the runner's fan-out, watches, result decoding, nonce check and cleanup
// meet real API semantics at fleet size, but no probe runs — kwok's stages
// (hack/kwok/stages.yaml) write the result each probe would. The
// real-kubelet tests (cluster_test.go, hack/e2e.sh) are the proof that a
// probe really runs.

// kwokFleetPolicy is the fleet's policy: gVisor sandboxes on the
// pool=sandbox nodes, a short allow-list and must-fail targets. Nothing
// dials them: kwok writes the verdicts.
const kwokFleetPolicy = `apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: fleet}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  namespaces: [sandboxes]
  runtime: {classNames: [gvisor]}
  identity: {uid: 65532, gid: 65532}
  filesystem: {readOnlyRoot: true, writable: [/tmp]}
  capabilities: []
  serviceAccountToken: absent
  resources: {limits: {memory: 256Mi}}
  placement: {nodeSelector: {pool: sandbox}}
  egress:
    allow:
      - {host: api.fleet.test, port: 443, reason: "the model API"}
    mustFail:
      hosts: [example.com]
      ips: [192.0.2.10]
    timeout: 1s
  probe: {deadline: 5m}
`

// kwokKernel is what the fake nodes report; the simulated gVisor probe
// sees a kernel of its own.
const (
	kwokKernel       = "6.1.0-kwok-simulated"
	kwokProbeKernel  = "4.4.0"
	kwokBrokenTarget = "192.0.2.10:443"
)

// simulatedResults are the termination messages the fake kubelets write:
// a healthy probe, the probe on a node where a rule reopened (one
// must-fail destination answered), and the control vantage that sees
// every must-fail destination answer. They are built from the policy's
// real egress plan, so they name exactly what a probe would dial.
func simulatedResults(t testing.TB, p *policy.Policy) (healthy, broken, control string) {
	t.Helper()
	return simulatedResultsBreaking(t, p, kwokBrokenTarget)
}

// simulatedResultsBreaking is simulatedResults with the reopened rule on
// breakTarget (a direct must-fail subject of the policy's plan). Through a
// proxy, a deny is the proxy's own refusal (proxy-denied), which is what
// proves it.
func simulatedResultsBreaking(t testing.TB, p *policy.Policy, breakTarget string) (healthy, broken, control string) {
	t.Helper()
	plan, notes := probes.PlanEgress(p.Spec.Egress)
	base := report.ProbeResult{
		Schema: report.ProbeResultSchema, Nonce: "@NONCE@", Policy: p.Metadata.Name, Version: "simulated-kwok",
		StartedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Seconds: p.Spec.Egress.Timeout.Seconds(),
		Runtime: &report.RuntimeEvidence{Kernel: kwokProbeKernel, Kind: "gvisor"},
	}
	pass := func(check, subject string) report.Finding {
		return report.Finding{Check: check, Subject: subject, Status: report.Pass}
	}
	fixed := []report.Finding{
		pass("identity.uid", ""), pass("identity.gid", ""), pass("identity.groups", ""),
		pass("caps.sets", ""), pass("caps.no-new-privs", ""), pass("caps.seccomp", ""),
		pass("fs.root-readonly", ""), pass("fs.writable", "/tmp"),
		pass("creds.sa-token", ""), pass("creds.env-secrets", ""),
		pass("runtime.isolation", ""), pass("pod.labels", ""),
	}
	egress := func(breakTarget string) []report.Finding {
		var out []report.Finding
		for _, a := range plan {
			f := pass(a.Check, a.Subject)
			switch {
			case a.MustAnswer():
				f.Class = report.ClassAnswered
			case a.ViaProxy:
				f.Class = policy.VerdictProxyDenied
			default:
				f.Class = "timeout"
			}
			if a.Subject == breakTarget {
				f.Status, f.Class = report.Fail, report.ClassAnswered
				f.Expected, f.Actual = "no answer (must fail)", "answered: TCP handshake completed (simulated: a rule reopened on this node)"
			}
			out = append(out, f)
		}
		return append(out, notes...)
	}
	msg := func(findings []report.Finding, vantage string) string {
		r := base
		r.Findings = findings
		declareRoles(&r)
		// kwok's templates cannot gzip, which is how a real probe fits a
		// policy of seventy checks into the kubelet's 4 KiB: the simulated
		// message is the plain compact JSON, whole (the runner reads both
		// forms through one decoder; kwok and the API server take any size).
		b, err := r.CompactJSON(4 * report.TerminationMsgSize)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(`"omittedPasses"`)) {
			t.Fatalf("a simulated result lost findings to the size limit: %s", b)
		}
		if vantage != "" {
			// The control's result says where it dialled from.
			var doc map[string]any
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			doc["vantage"] = vantage
			if b, err = json.Marshal(doc); err != nil {
				t.Fatal(err)
			}
		}
		return string(b)
	}
	healthy = msg(append(slices.Clone(fixed), egress("")...), "")
	if !strings.Contains(healthy, `"subject":"`+breakTarget+`"`) {
		t.Fatalf("the policy's plan does not dial %s: %s", breakTarget, healthy)
	}
	broken = msg(append(slices.Clone(fixed), egress(breakTarget)...), "")
	// Exactly what a real control dials (probes.ControlPlan: the direct
	// denies, and the DNS queries around the resolver), each answered.
	var ctl []report.Finding
	for _, a := range probes.ControlPlan(p.Spec.Egress) {
		f := pass(a.Check, a.Subject)
		f.Class = report.ClassAnswered
		ctl = append(ctl, f)
	}
	control = msg(ctl, "control")
	return healthy, broken, control
}

// fleet is a simulated fleet with the policy's namespace and runtime
// class in place.
type fleet struct {
	*testenv.Kwok
	cs         kubernetes.Interface
	policyPath string
	policy     *policy.Policy
}

// newFleet brings up nodes fake nodes; the probe on brokenNode (if any)
// reports what breakResult makes of the healthy and the reopened results
// (nil: the reopened one).
func newFleet(t testing.TB, nodes int, start, run time.Duration, brokenNode string, breakResult func(healthy, reopened string) string) *fleet {
	t.Helper()
	testenv.Binary(t) // fail on a build error before a fleet is up
	p, raw := loadPolicy(t, kwokFleetPolicy)
	healthy, broken, control := simulatedResults(t, p)
	if breakResult != nil {
		broken = breakResult(healthy, broken)
	}
	k := testenv.StartKwok(t, testenv.KwokOptions{
		Nodes: nodes, NodeLabels: map[string]string{"pool": "sandbox"}, Kernel: kwokKernel,
		Start: start, Run: run, Healthy: healthy, Broken: broken, Control: control, BrokenNode: brokenNode,
	})
	cs, err := kubernetes.NewForConfig(k.Admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range append([]string{RunnerNamespace}, p.Spec.Namespaces...) {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(k.Dir, "policy.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	f := &fleet{Kwok: k, cs: cs, policyPath: path, policy: p}
	f.grantShippedRBAC(t)
	return f
}

// grantShippedRBAC gives the runner exactly the rights a cluster gives the
// CronJob: manifests/rbac.yaml (its service account, its own namespace's
// Role, the cluster-wide reader) and the sandbox namespaces' Role that
// `sandprobe render --format rbac` writes for the policy. A request the
// runner makes beyond them is refused here as it would be there.
func (f *fleet) grantShippedRBAC(t testing.TB) {
	t.Helper()
	rendered, err := exec.Command(testenv.Binary(t), "render", "--format", "rbac", "--policy", f.policyPath).Output()
	if err != nil {
		t.Fatalf("sandprobe render --format rbac: %v", err)
	}
	shipped, err := os.ReadFile(filepath.Join("..", "..", "manifests", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(testenv.KubeAssets(t), "kubectl")
	cmd := exec.Command(kubectl, "--kubeconfig", f.AdminKubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(string(shipped) + "\n---\n" + string(rendered))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply the shipped RBAC: %v\n%s", err, out)
	}
}

// fleetRun is one `sandprobe run` against the fleet, as a subprocess.
type fleetRun struct {
	code    int
	wall    time.Duration
	maxRSS  int64 // bytes, the runner's peak resident set (under maxrss only)
	report  report.Run
	metrics map[string]*dto.MetricFamily
	stderr  string
}

// run runs the real binary, under wrapper when one is given: --per-node
// over every node, no drift phase (the fleet has no sandboxes to compare:
// this is the probe path), metrics to a file. With jsonReport the JSON
// report is written too and read back; without, the run writes what the
// shipped CronJob does (the text report and the metrics).
func (f *fleet) run(t testing.TB, wrapper string, jsonReport bool, extra ...string) fleetRun {
	t.Helper()
	dir := t.TempDir()
	jsonPath, metricsPath := filepath.Join(dir, "report.json"), filepath.Join(dir, "metrics.prom")
	args := []string{"run", "--backend", "kube", "--per-node", "--drift=false",
		"--kubeconfig", f.RunnerKubeconfig, "--policy", f.policyPath, "--metrics-file", metricsPath}
	args = append(args, extra...)
	if jsonReport {
		args = append(args, "--json", jsonPath)
	}
	cmd := exec.Command(testenv.Binary(t), args...)
	if wrapper != "" {
		cmd = exec.Command(wrapper, append([]string{testenv.Binary(t)}, args...)...)
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	start := time.Now()
	err := cmd.Run()
	out := fleetRun{wall: time.Since(start), stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		out.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("sandprobe run: %v", err)
	}
	if jsonReport {
		data, err := os.ReadFile(jsonPath)
		if err != nil {
			t.Fatalf("sandprobe run exited %d without a JSON report: %v\n%s", out.code, err, out.stderr)
		}
		if err := json.Unmarshal(data, &out.report); err != nil {
			t.Fatalf("the JSON report: %v", err)
		}
	}
	mf, err := os.Open(metricsPath)
	if err != nil {
		t.Fatalf("sandprobe run exited %d without metrics: %v\n%s", out.code, err, tail(out.stderr, 2000))
	}
	defer mf.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	if out.metrics, err = parser.TextToMetricFamilies(mf); err != nil {
		t.Fatalf("the metrics file: %v", err)
	}
	return out
}

// podsLeft lists the pods the run left anywhere on the fleet.
func (f *fleet) podsLeft(t testing.TB) []string {
	t.Helper()
	pods, err := f.cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		out = append(out, p.Namespace+"/"+p.Name+" on "+p.Spec.NodeName+" ("+string(p.Status.Phase)+")")
	}
	return out
}

// errorsOf names the first n error findings of a run.
func errorsOf(run report.Run, n int) string {
	var out []string
	for _, f := range run.Findings {
		if f.Status == report.Error && len(out) < n {
			out = append(out, fmt.Sprintf("%s %s %s: %s", f.Target, f.Check, f.Subject, f.Actual))
		}
	}
	return strings.Join(out, "; ")
}

// nodeProbes counts the probe results from the sandbox nodes (the run's
// control vantage reports beside them).
func nodeProbes(run report.Run) int {
	n := 0
	for _, p := range run.Probes {
		if strings.HasPrefix(p.Target, "namespace/sandboxes/node/") {
			n++
		}
	}
	return n
}

// byNode gathers a run's findings under the node they report from.
func byNode(run report.Run) map[string][]report.Finding {
	out := map[string][]report.Finding{}
	for _, f := range run.Findings {
		out[nodeOf(f.Where, f.Target)] = append(out[nodeOf(f.Where, f.Target)], f)
	}
	return out
}

// gaugesByNode is one metric's value per node label.
func gaugesByNode(mfs map[string]*dto.MetricFamily, name string) map[string]float64 {
	out := map[string]float64{}
	mf := mfs[name]
	if mf == nil {
		return out
	}
	for _, m := range mf.Metric {
		for _, l := range m.Label {
			if l.GetName() == "node" {
				out[l.GetValue()] += m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// TestKwokNodeByNodeRegressionSimulated is issue 15's node-by-node
// regression on a simulated fleet of 40 nodes, one of which breaks the way
// fleets break: a rule reopened on that node only (its probe saw a
// must-fail destination answer), or a result replayed from an earlier run
// (someone else's nonce). Only that node's check fails, the metric and the
// shipped alert name that node, every other node stays green, no pod is
// left, and the runner watched rather than polled.
func TestKwokNodeByNodeRegressionSimulated(t *testing.T) {
	const nodes = 40
	brokenNode := testenv.KwokNodeName(17)
	cases := []struct {
		name        string
		breakResult func(healthy, reopened string) string
		code        int
		// the one finding that must not pass, on brokenNode
		check, subject string
		status         report.Status
		// alert: the node's must-fail series is 1 and pages
		alert bool
	}{
		{name: "rule reopened on one node", code: report.ExitNonConformant,
			check: "egress.must-fail", subject: kwokBrokenTarget, status: report.Fail, alert: true},
		{name: "replayed result on one node", code: report.ExitCouldNotRun,
			breakResult: func(healthy, _ string) string {
				return strings.Replace(healthy, "@NONCE@", "0123456789abcdef0123456789abcdef", 1)
			},
			check: "probe.run", subject: "wrong-nonce", status: report.Error},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, nodes, 200*time.Millisecond, 300*time.Millisecond, brokenNode, tc.breakResult)
			run := f.run(t, "", true)
			c := report.Count(run.report.Findings)
			t.Logf("simulated run over %d nodes: exit %d in %.1fs; findings: %d pass, %d fail, %d skip, %d inconclusive, %d error",
				nodes, run.code, run.wall.Seconds(), c.Pass, c.Fail, c.Skip, c.Inconclusive, c.Error)
			if run.code != tc.code {
				t.Fatalf("exit %d, want %d; errors: %s\n%s", run.code, tc.code, errorsOf(run.report, 3), tail(run.stderr, 2000))
			}
			wantProbes := nodes
			if !tc.alert {
				wantProbes-- // the replayed result is refused: no probe result from that node
			}
			if got := nodeProbes(run.report); got != wantProbes {
				t.Errorf("%d probe results from nodes, want %d", got, wantProbes)
			}
			nodesSeen := byNode(run.report)
			for node, findings := range nodesSeen {
				for _, fd := range findings {
					bad := fd.Status != report.Pass && fd.Status != report.Skip
					want := node == brokenNode && fd.Check == tc.check && fd.Subject == tc.subject
					switch {
					case want && fd.Status != tc.status:
						t.Errorf("%s: %s %s is %s, want %s", node, fd.Check, fd.Subject, fd.Status, tc.status)
					case bad && !want:
						t.Errorf("%s (%s): %s %s is %s: %s — only %s %s on %s should be", node, fd.Target, fd.Check, fd.Subject, fd.Status, fd.Actual, tc.check, tc.subject, brokenNode)
					}
				}
			}
			if !slices.ContainsFunc(nodesSeen[brokenNode], func(fd report.Finding) bool {
				return fd.Check == tc.check && fd.Subject == tc.subject && fd.Status == tc.status
			}) {
				t.Errorf("no %s %s %s on %s: %+v", tc.status, tc.check, tc.subject, brokenNode, nodesSeen[brokenNode])
			}

			open := gaugesByNode(run.metrics, report.MetricEgressUnexpectedOpen)
			if len(open) != wantProbes {
				t.Errorf("%s has %d node series, want %d (every node that reported, 0 where closed)", report.MetricEgressUnexpectedOpen, len(open), wantProbes)
			}
			for node, v := range open {
				if want := map[bool]float64{true: 1, false: 0}[tc.alert && node == brokenNode]; v != want {
					t.Errorf("%s{node=%q} = %v, want %v", report.MetricEgressUnexpectedOpen, node, v, want)
				}
			}
			if tc.alert {
				assertAlertNamesOnly(t, run.metrics, brokenNode)
			}
			// A node whose result is refused is an unprobed node, named with
			// its reason; the other 39 were checked, so the run could check.
			unprobed := map[string]string{}
			if mf := run.metrics[report.MetricNodeUnprobed]; mf != nil {
				for _, m := range mf.Metric {
					unprobed[labelOf(m, "node")] = labelOf(m, "reason")
				}
			}
			wantUnprobed := map[string]string{}
			if !tc.alert {
				wantUnprobed[brokenNode] = tc.subject
			}
			if fmt.Sprint(unprobed) != fmt.Sprint(wantUnprobed) {
				t.Errorf("%s: %v, want %v", report.MetricNodeUnprobed, unprobed, wantUnprobed)
			}
			if up := run.metrics[report.MetricUp]; up == nil || up.Metric[0].GetGauge().GetValue() != 1 {
				t.Errorf("%s is not 1: %d of %d nodes were checked", report.MetricUp, wantProbes, nodes)
			}
			if left := f.podsLeft(t); len(left) > 0 {
				t.Errorf("%d pods left after the run: %v", len(left), left)
			}
			// Two pods a node: the probe and the control pinned beside it.
			assertWatchNotPoll(t, f.RunnerRequests(t), 2*nodes)
		})
	}
}

// assertWatchNotPoll holds the runner's API use per pod to what one pod
// needs (create, one watch, a log read, the node, delete, one list that
// finds it gone) plus the run's own dozen: a runner that polls, or lists
// per pod beyond that, breaks it.
func assertWatchNotPoll(t *testing.T, reqs []testenv.AuditEvent, pods int) {
	t.Helper()
	lists, watches, refused := 0, 0, 0
	for _, r := range reqs {
		switch {
		case r.Verb == "list" && r.Resource == "pods":
			lists++
		case r.Verb == "watch" && r.Resource == "pods":
			watches++
		}
		if r.Code == http.StatusForbidden {
			refused++
		}
	}
	// The shipped RBAC gives the runner no pods/log in sandbox namespaces:
	// it asks once per namespace, not once per node.
	if refused > 1 {
		t.Errorf("%d requests refused by RBAC, want at most 1 (the first log read in the sandbox namespace): %s", refused, requestMix(reqs))
	}
	t.Logf("the runner's requests: %s", requestMix(reqs))
	if perPod := float64(len(reqs)-20) / float64(pods); perPod > 7 {
		t.Errorf("%d API requests for %d pods (%.1f a pod beyond the run's own), want ≤ 7 a pod: %s", len(reqs), pods, perPod, requestMix(reqs))
	}
	if lists > pods+10 || watches > 2*pods+2 {
		t.Errorf("%d pod lists and %d pod watches for %d pods: the runner polls (%s)", lists, watches, pods, requestMix(reqs))
	}
}

// assertAlertNamesOnly feeds the run's unexpected-open series to the
// shipped alert rules in promtool and expects SandboxEgressReopened for
// node alone ("": for no node at all).
func assertAlertNamesOnly(t *testing.T, mfs map[string]*dto.MetricFamily, node string) {
	t.Helper()
	promtool := testenv.Promtool(t)
	rules := rulesWithoutAnnotations(t)
	var series strings.Builder
	mf := mfs[report.MetricEgressUnexpectedOpen]
	if mf == nil {
		t.Fatalf("no %s in the metrics", report.MetricEgressUnexpectedOpen)
	}
	var ns string
	for _, m := range mf.Metric {
		var labels []string
		for _, l := range m.Label {
			labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			if l.GetName() == "node" && l.GetValue() == node {
				ns = labelOf(m, "namespace")
			}
		}
		fmt.Fprintf(&series, "      - series: '%s{%s}'\n        values: '%v+0x10'\n", report.MetricEgressUnexpectedOpen, strings.Join(labels, ","), m.GetGauge().GetValue())
	}
	exp := fmt.Sprintf("\n          - exp_labels: {severity: critical, node: %q, namespace: %q}", node, ns)
	if node == "" {
		exp = " []"
	}
	test := fmt.Sprintf(`rule_files: [%q]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
%s    alert_rule_test:
      - eval_time: 5m
        alertname: SandboxEgressReopened
        exp_alerts:%s
`, rules, series.String(), exp)
	path := filepath.Join(t.TempDir(), "node_alert_test.yml")
	if err := os.WriteFile(path, []byte(test), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool: SandboxEgressReopened should fire for %q alone (\"\": for none): %v\n%s", node, err, out)
	}
}

// rulesWithoutAnnotations is the shipped alert rules with their
// annotations taken out (promtool compares them whole, and their wording
// is not what this test is about), after checking that the summary of
// SandboxEgressReopened names the node: the expression and labels, which
// decide what fires and where it routes, stay exactly as shipped.
func rulesWithoutAnnotations(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "manifests", "alerts", "sandprobe.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Name  string           `json:"name"`
			Rules []map[string]any `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r["alert"] == "SandboxEgressReopened" {
				found = true
				ann, _ := r["annotations"].(map[string]any)
				if summary, _ := ann["summary"].(string); !strings.Contains(summary, "$labels.node") {
					t.Errorf("SandboxEgressReopened's summary %q does not name the node", summary)
				}
			}
			delete(r, "annotations")
		}
	}
	if !found {
		t.Fatal("no SandboxEgressReopened in manifests/alerts/sandprobe.rules.yml")
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// nodeOf is the node a finding or probe result read back from a JSON
// report was made on: the typed location does not travel in the report
// (json:"-"), its string form, the target, does ("…/node/NAME[/…]").
func nodeOf(where report.Location, target string) string {
	if where.Node != "" {
		return where.Node
	}
	_, rest, ok := strings.Cut(target, "/node/")
	if !ok {
		return ""
	}
	node, _, _ := strings.Cut(rest, "/")
	return node
}
