package kube

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// egressResult is what a probe reports: the metadata address blocked (the
// test kubelet's control answers it, so the deny is proven) and an allowed
// host reached, both passing.
func egressResult(pod *corev1.Pod) report.ProbeResult {
	res := probeResult(pod, "4.4.0")
	res.Findings = append(res.Findings,
		report.Finding{Check: "egress.metadata", Subject: "169.254.169.254:80", Status: report.Pass, Class: "timeout", Expected: "no answer", Actual: "timeout"},
		report.Finding{Check: "egress.allowed", Subject: "api.lab.test:443", Status: report.Pass, Class: "answered", Expected: "answered", Actual: "answered"},
	)
	return res
}

// probesOnly plays the kubelet for probe pods and leaves every other pod
// (the live sandboxes) as created.
func probesOnly(t *testing.T, seen func(*corev1.Pod)) script {
	return func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
		if pod.Labels[LabelRun] == "" {
			return
		}
		if seen != nil {
			seen(pod)
		}
		k.bind(ctx, pod, "node-a")
		k.running(ctx, pod)
		k.exit(ctx, pod, 0, "Completed", message(t, egressResult(pod)))
	}
}

func (f *fixture) livePod(name string, labels map[string]string, runtimeClass, node string) {
	f.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "agent", Image: "sandbox.invalid/agent:1"}}}}
	if runtimeClass != "" {
		p.Spec.RuntimeClassName = &runtimeClass
	}
	if _, err := f.cs.CoreV1().Pods(f.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) egressPolicy(name string, selector metav1.LabelSelector) {
	f.t.Helper()
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: selector, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}
	if _, err := f.cs.NetworkingV1().NetworkPolicies(f.ns).Create(context.Background(), np, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func findings(res report.ProbeResult, check string) []report.Finding {
	var out []report.Finding
	for _, f := range res.Findings {
		if f.Check == check {
			out = append(out, f)
		}
	}
	return out
}

// TestParity: on a real API server, the probe is compared with the live
// sandboxes of its namespace before its egress verdicts count. The same
// policies, class and node: proven. A NetworkPolicy that selects the
// sandboxes through an extra label the probe lacks, one that singles out
// the probe, a runtime class no sandbox uses, a node pool they do not run
// in: a failing finding naming it, and every egress verdict inconclusive.
// No sandbox at all: unproven, said so, never a silent pass.
func TestParity(t *testing.T) {
	sandbox := map[string]string{"sandbox": "true"}
	withTeam := map[string]string{"sandbox": "true", "team": "a"}
	cases := []struct {
		name  string
		setup func(f *fixture)
		class string // --runtime-class
		// want is the status of each parity check; egress is the status the
		// egress verdicts end with.
		want   map[string]report.Status
		egress report.Status
		says   string // in the failing finding's actual
	}{
		{name: "governed like the sandboxes", setup: func(f *fixture) {
			f.egressPolicy("deny-egress", metav1.LabelSelector{MatchLabels: sandbox})
			f.livePod("agent-1", withTeam, "gvisor", "node-a")
		}, want: map[string]report.Status{CheckParityPolicies: report.Pass, CheckParityRuntimeClass: report.Pass, CheckParityNodePool: report.Pass}, egress: report.Pass},
		{name: "a policy selects the sandboxes through a label the probe lacks", setup: func(f *fixture) {
			f.egressPolicy("deny-egress", metav1.LabelSelector{MatchLabels: sandbox})
			f.egressPolicy("team-a-egress", metav1.LabelSelector{MatchLabels: withTeam})
			f.livePod("agent-1", withTeam, "gvisor", "node-a")
		}, want: map[string]report.Status{CheckParityPolicies: report.Fail}, egress: report.Inconclusive, says: "team-a-egress selects sandbox agent-1 but not the probe"},
		{name: "a policy singles out the probe", setup: func(f *fixture) {
			f.egressPolicy("deny-egress", metav1.LabelSelector{MatchLabels: sandbox})
			f.egressPolicy("probe-only", metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "sandprobe-probe"}})
			f.livePod("agent-1", sandbox, "gvisor", "node-a")
		}, want: map[string]report.Status{CheckParityPolicies: report.Fail}, egress: report.Inconclusive, says: "probe-only selects the probe but not sandbox agent-1"},
		{name: "a policy singles out the probe and no sandbox runs", setup: func(f *fixture) {
			f.egressPolicy("deny-egress", metav1.LabelSelector{MatchLabels: sandbox})
			f.egressPolicy("probe-only", metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: LabelRun, Operator: metav1.LabelSelectorOpExists}}})
		}, want: map[string]report.Status{CheckParityPolicies: report.Fail}, egress: report.Inconclusive, says: "selects the probe but not a pod with exactly the declared labels"},
		{name: "no live sandbox", setup: func(f *fixture) {
			f.egressPolicy("deny-egress", metav1.LabelSelector{MatchLabels: sandbox})
		}, want: map[string]report.Status{CheckParityPolicies: report.Skip, CheckParityRuntimeClass: report.Skip, CheckParityNodePool: report.Skip}, egress: report.Pass},
		{name: "the sandboxes run under another class", class: "gvisor", setup: func(f *fixture) {
			f.egressPolicy("deny-egress", metav1.LabelSelector{MatchLabels: sandbox})
			f.livePod("agent-1", sandbox, "kata", "node-a")
		}, want: map[string]report.Status{CheckParityPolicies: report.Pass, CheckParityRuntimeClass: report.Fail}, egress: report.Inconclusive, says: "no live sandbox does"},
		{name: "the probe picks the sandboxes' class", setup: func(f *fixture) {
			f.livePod("agent-1", sandbox, "kata", "node-a")
			f.livePod("agent-2", sandbox, "kata", "node-a")
		}, want: map[string]report.Status{CheckParityRuntimeClass: report.Pass}, egress: report.Pass},
		{name: "the sandboxes run in another pool", setup: func(f *fixture) {
			f.livePod("agent-1", sandbox, "gvisor", "node-b")
		}, want: map[string]report.Status{CheckParityNodePool: report.Fail}, egress: report.Inconclusive, says: "pools cloud.google.com/gke-nodepool=sandboxes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			f.node("node-a", "6.1.0", map[string]string{"cloud.google.com/gke-nodepool": "general"})
			f.node("node-b", "6.1.0", map[string]string{"cloud.google.com/gke-nodepool": "sandboxes"})
			c.setup(f)
			var mu sync.Mutex
			var probes []*corev1.Pod
			f.kubelet(probesOnly(t, func(p *corev1.Pod) { mu.Lock(); probes = append(probes, p); mu.Unlock() }))
			b := f.backend()
			b.RuntimeClass = c.class
			results, err := b.Run(context.Background(), specFor(t, strings.Replace(gvisorPolicy, "[gvisor]", "[gvisor, kata]", 1)))
			results = probeResults(results)
			if err != nil || len(results) != 1 {
				t.Fatalf("run: %v %+v", err, results)
			}
			res := results[0]
			for _, fd := range res.Findings {
				if report.Area(fd.Check) == "parity" {
					t.Logf("%s %s %s: %s", fd.Check, fd.Subject, fd.Status, fd.Actual)
				}
			}
			checkParity(t, res, c.want, c.says, c.egress)
			if c.name == "the probe picks the sandboxes' class" {
				if len(probes) != 1 || probes[0].Spec.RuntimeClassName == nil || *probes[0].Spec.RuntimeClassName != "kata" {
					t.Errorf("probe pods %v: want one under kata, the class the sandboxes run under", probes)
				}
			}
		})
	}
}

// checkParity: each parity check has the status want says, a failing one
// saying says and carrying a fix, and the egress verdicts end as egress.
func checkParity(t *testing.T, res report.ProbeResult, want map[string]report.Status, says string, egress report.Status) {
	t.Helper()
	for check, w := range want {
		fs := findings(res, check)
		if len(fs) == 0 {
			t.Errorf("no %s finding", check)
			continue
		}
		for _, fd := range fs {
			if fd.Status != w {
				t.Errorf("%s %s: %s (%s), want %s", check, fd.Subject, fd.Status, fd.Actual, w)
			}
			if fd.Status == report.Fail && (!strings.Contains(fd.Actual, says) || fd.Fix == "") {
				t.Errorf("%s says %q (fix %q), want it to say %q", check, fd.Actual, fd.Fix, says)
			}
		}
	}
	for _, fd := range res.Findings {
		if report.Area(fd.Check) == "egress" && fd.Status != egress {
			t.Errorf("%s %s: %s, want %s (%s)", fd.Check, fd.Subject, fd.Status, egress, fd.Actual)
		}
	}
}

// TestStrayProbe: a pod in the sandbox namespace without the sandbox
// labels stands outside the sandbox policies. The run adds a probe where it
// stands: its labels (only those the namespace's policies look at, never a
// controller's), its runtime class, its node, egress checks only, reported
// as namespace/NS/node/NODE/as/POD; pods with the same such labels share
// one. A pod the sandbox policies govern anyway gets none.
func TestStrayProbe(t *testing.T) {
	f := newFixture(t)
	f.node("node-a", "6.1.0", nil)
	f.node("node-b", "6.1.0", nil)
	sandbox := map[string]string{"sandbox": "true"}
	f.egressPolicy("deny-egress", metav1.LabelSelector{MatchLabels: sandbox})
	f.egressPolicy("web-egress", metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}})
	f.egressPolicy("everyone", metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}}})
	f.livePod("agent-1", sandbox, "gvisor", "node-a")
	f.livePod("forgot-its-label", map[string]string{"app": "web", "pod-template-hash": "5d8f"}, "", "node-b")
	f.livePod("forgot-its-label-too", map[string]string{"app": "web", "pod-template-hash": "77aa"}, "", "node-b")
	f.livePod("unlabelled", nil, "runc", "node-a")
	var mu sync.Mutex
	var probes []*corev1.Pod
	f.kubelet(probesOnly(t, func(p *corev1.Pod) { mu.Lock(); probes = append(probes, p); mu.Unlock() }))
	results, err := f.backend().Run(context.Background(), specFor(t, gvisorPolicy))
	results = probeResults(results)
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, r := range results {
		targets = append(targets, r.Target)
	}
	want := []string{Target(f.ns, "node-a"), Target(f.ns, "node-a") + "/as/unlabelled", Target(f.ns, "node-b") + "/as/forgot-its-label"}
	slices.Sort(want)
	if !slices.Equal(targets, want) {
		t.Fatalf("results for %v, want %v", targets, want)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range probes {
		stands := p.Annotations["sandprobe.dev/stands-for"]
		if stands == "" {
			continue
		}
		args := strings.Join(p.Spec.Containers[0].Args, " ")
		if !strings.Contains(args, "--only egress") || strings.Contains(args, "--runtime-class") {
			t.Errorf("stray probe %s runs %q, want egress only, no runtime class check", p.Name, args)
		}
		if _, ok := p.Labels["sandbox"]; ok {
			t.Errorf("stray probe %s carries the sandbox label: %v", p.Name, p.Labels)
		}
		if _, ok := p.Labels["pod-template-hash"]; ok {
			t.Errorf("stray probe %s carries a controller's label: a ReplicaSet could adopt it: %v", p.Name, p.Labels)
		}
		switch stands {
		case "forgot-its-label,forgot-its-label-too":
			if p.Labels["app"] != "web" || p.Spec.RuntimeClassName != nil {
				t.Errorf("stray probe for the web pods: labels %v class %v", p.Labels, p.Spec.RuntimeClassName)
			}
		case "unlabelled":
			if p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != "runc" {
				t.Errorf("stray probe for unlabelled: class %v, want runc (where it stands)", p.Spec.RuntimeClassName)
			}
		default:
			t.Errorf("stray probe stands for %q", stands)
		}
	}
	for _, r := range results {
		if !strings.Contains(r.Target, "/as/") {
			continue
		}
		ps := findings(r, CheckParityPolicies)
		if len(ps) != 1 || ps[0].Status != report.Pass {
			t.Errorf("%s: parity %+v, want the stray's probe governed like the stray", r.Target, ps)
		}
	}
}

// TestControl: the control pod stands in its own namespace with none of
// the sandbox labels (and so under none of their policies), runs the probe
// image as `probe --control`, and each deny of the probes counts only where
// it got an answer: a destination that answers the control and not the
// sandbox is a proven pass, one that refuses the control too is unproven and
// inconclusive. A control that cannot run proves nothing, and says why.
func TestControl(t *testing.T) {
	doc := strings.Replace(gvisorPolicy, "  egress: {timeout: 1s}", `  egress:
    timeout: 1s
    mustFail: {ips: [10.0.0.1, 10.0.0.2]}`, 1)
	denies := func(pod *corev1.Pod) report.ProbeResult {
		res := probeResult(pod, "4.4.0")
		res.Findings = append(res.Findings,
			report.Finding{Check: "egress.must-fail", Subject: "10.0.0.1:443", Status: report.Pass, Class: "timeout", Actual: "timeout"},
			report.Finding{Check: "egress.must-fail", Subject: "10.0.0.2:443", Status: report.Pass, Class: "refused", Actual: "refused"},
			report.Finding{Check: "egress.metadata", Subject: "169.254.169.254:80", Status: report.Pass, Class: "timeout", Actual: "timeout"})
		return res
	}
	cases := []struct {
		name    string
		control func(probes.Attempt) string // nil: the control pod crashes
		want    map[string][2]string        // status, deny
		failed  bool
		// restrict puts a default-deny egress policy in the control's
		// namespace; summary is then the control line's status.
		restrict bool
		summary  report.Status
	}{
		{"a control that answers and one that is refused", func(a probes.Attempt) string {
			if a.Host == "10.0.0.2" {
				return "refused" // nothing listens there: it refuses everyone
			}
			return "answered"
		}, map[string][2]string{
			"egress.must-fail 10.0.0.1:443":      {"pass", "proven"},
			"egress.must-fail 10.0.0.2:443":      {"inconclusive", "unproven"},
			"egress.metadata 169.254.169.254:80": {"pass", "proven"},
		}, false, false, report.Pass},
		// How a control breaks in the real world: the cluster denies egress
		// in every namespace, the control's included, so it is refused
		// exactly like the sandbox. Nothing is proven, nothing passes, and
		// the control's own line names the policy that stops it.
		{"a control under a default-deny of its namespace", func(probes.Attempt) string { return "refused" }, map[string][2]string{
			"egress.must-fail 10.0.0.1:443":      {"inconclusive", "unproven"},
			"egress.must-fail 10.0.0.2:443":      {"inconclusive", "unproven"},
			"egress.metadata 169.254.169.254:80": {"inconclusive", "unproven"},
		}, false, true, report.Inconclusive},
		{"a control that crashes", nil, map[string][2]string{
			"egress.must-fail 10.0.0.1:443":      {"inconclusive", "unproven"},
			"egress.metadata 169.254.169.254:80": {"inconclusive", "unproven"},
		}, true, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			ctl := f.sibling("ctl")
			f.node("node-a", "6.1.0", nil)
			f.kubelet(func(ctx context.Context, k *kubelet, pod *corev1.Pod) {
				k.bind(ctx, pod, "node-a")
				k.running(ctx, pod)
				k.exit(ctx, pod, 0, "Completed", message(t, denies(pod)))
			})
			if c.restrict {
				ctl.egressPolicy("default-deny", metav1.LabelSelector{})
			}
			ck := ctl.kubelet(nil)
			ck.control, ck.crashControl = c.control, c.control == nil
			b := f.backend()
			b.ControlNamespace = ctl.ns
			results, err := b.Run(context.Background(), specFor(t, doc))
			if c.failed != (err != nil) {
				t.Fatalf("err = %v", err)
			}
			var probe report.ProbeResult
			var summary *report.ProbeResult
			for i, r := range results {
				if r.Vantage == probes.VantageControl {
					summary = &results[i]
				} else {
					probe = r
				}
			}
			got := map[string][2]string{}
			for _, fd := range probe.Findings {
				if fd.Deny != "" {
					got[fd.Name()] = [2]string{string(fd.Status), fd.Deny}
				}
			}
			for name, want := range c.want {
				if got[name] != want {
					t.Errorf("%s: %v, want %v", name, got[name], want)
				}
			}
			if c.failed {
				var cnr *runner.CouldNotRun
				if !errors.As(err, &cnr) || !strings.HasPrefix(cnr.Target, "namespace/"+ctl.ns) {
					t.Errorf("err = %v, want the control's could-not-run", err)
				}
				return
			}
			for _, fd := range probe.Findings {
				if fd.Deny != "" && fd.Status == report.Pass && fd.Deny != report.DenyProven {
					t.Errorf("%s passes with deny %s", fd.Name(), fd.Deny)
				}
			}
			says := "no egress policy selects it"
			if c.restrict {
				says = "restricted by networkpolicy/" + ctl.ns + "/default-deny"
			}
			if summary == nil || len(summary.Findings) != 1 || summary.Findings[0].Check != CheckControl || summary.Findings[0].Status != c.summary || !strings.Contains(summary.Findings[0].Actual, says) {
				t.Errorf("control summary %+v, want %s saying %q", summary, c.summary, says)
			} else if c.restrict && !strings.Contains(summary.Findings[0].Fix, "--control-namespace") {
				t.Errorf("control summary fix %q", summary.Findings[0].Fix)
			}
			ck.mu.Lock()
			pod := ck.controlPod
			ck.mu.Unlock()
			if pod == nil {
				t.Fatal("no control pod")
			}
			if _, ok := pod.Labels["sandbox"]; ok || pod.Spec.RuntimeClassName != nil || *pod.Spec.AutomountServiceAccountToken ||
				!strings.Contains(strings.Join(pod.Spec.Containers[0].Args, " "), "probe --control") || pod.Spec.Containers[0].Image != b.ProbeImage {
				t.Errorf("control pod: labels %v, class %v, token %v, %s %v", pod.Labels, pod.Spec.RuntimeClassName, *pod.Spec.AutomountServiceAccountToken, pod.Spec.Containers[0].Image, pod.Spec.Containers[0].Args)
			}
			for _, left := range append(f.leftovers(), ctl.leftovers()...) {
				t.Errorf("left behind: %s", left)
			}
		})
	}
}
