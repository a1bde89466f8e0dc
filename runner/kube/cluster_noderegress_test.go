package kube

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
)

// Issue 15's node-by-node regression on the real single-node cluster: the
// real node (a real kubelet, gVisor pods, kube-router enforcing the
// rendered NetworkPolicy, the network lab behind it) and, beside it,
// SIMULATED nodes (kwok's fake kubelets playing hack/kwok/stages.yaml
// against the same API server), so `sandprobe run --per-node` fans out
// over a fleet in which one node is real.

// simulatedTaint keeps every pod that does not tolerate it — the run's
// unpinned control pod, other tests' pods, DaemonSets without a catch-all
// toleration — off the simulated nodes: only the probe's per-node pods
// and the control pinned beside each (the policy tolerates it) land
// there. Each node's denies are proven by its own node's control: a
// simulated control never "proves" a real deny.
var simulatedTaint = corev1.Taint{Key: "sandprobe.dev/simulated", Value: "kwok", Effect: corev1.TaintEffectNoSchedule}

const (
	simulatedPrefix = "kwok-simulated-"
	// heldOutTaint keeps the simulated node that reports a reopened rule out
	// of the pool until the case that wants it (no toleration for it).
	heldOutTaint = "sandprobe.dev/held-out=regression:NoSchedule"
	// simulatedBrokenTarget is what a simulated node's reopened rule lets
	// through: a direct must-fail address of the lab policy.
	simulatedBrokenTarget = "10.99.20.11:443"
	// clusterPids is where hack/cluster keeps its components' pid files
	// (kube-router's among them, when netpol.sh runs it).
	clusterPids = "/run/sandprobe-cluster/pids"
	// clusterLogs is where they log.
	clusterLogs = "/run/sandprobe-cluster/logs"
)

// crashNodeAgent breaks the real node, and only it, the way a node-local
// CNI fault does: the NetworkPolicy agent on that node dies (an upgrade
// that crashloops on the nodes it reached, an OOM kill). SIGKILL, so it
// cleans up nothing: the rules it programmed stay, every NetworkPolicy
// object stays as it was, and from the API nothing changed — but no new
// pod on the node is programmed any more, so a new sandbox there (the
// probe's pod is one) reaches what the policy denies. undo restarts the
// agent (netpol.sh up, which first removes what a killed one left) and
// waits until it has programmed the policy again; the test's cleanup
// (netpol.sh down) removes whatever is left, however the test ends.
//
// Tried first and dropped: a mangle rule marking the pod bridge's packets
// with the bit kube-router's pod firewall reads as "allowed by a policy"
// (0x10000, inside Calico's default mark mask: two node agents that
// disagree about mark bits). It reopened egress as intended in most runs,
// but in about one run in three on the shared machine every packet of the
// probe vanished instead (each attempt timed out while the mangle rule
// counted them), for a reason not found in the time there was.
func crashNodeAgent(t *testing.T, netpol, ns, policyName string) (undo func()) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(clusterPids, "kube-router.pid"))
	if err != nil {
		t.Fatalf("kube-router's pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 1 {
		t.Fatalf("kube-router's pid file holds %q", raw)
	}
	// Between two syncs, not in one: an agent killed half way through
	// its sync (it syncs back to back while pods come and go) can leave
	// new pods with no network at all, a node-local fault too but not the
	// one this is about. Quiet is a log that has not grown for a second
	// (at most 10 s of waiting; then it is killed anyway).
	waitAgentQuiet(t, filepath.Join(clusterLogs, "kube-router.log"), time.Second, 10*time.Second)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill kube-router (pid %d): %v", pid, err)
	}
	for end := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("kube-router (pid %d) still alive 10s after SIGKILL", pid)
		}
	}
	if exec.Command(netpol, "has-policy", ns, policyName).Run() != nil {
		t.Fatal("the killed agent's rules are gone: this is not the fault intended")
	}
	return func() {
		t.Helper()
		if out, err := exec.Command(netpol, "up").CombinedOutput(); err != nil {
			t.Fatalf("netpol.sh up after the fault: %v\n%s", err, out)
		}
		for deadline := time.Now().Add(30 * time.Second); exec.Command(netpol, "has-policy", ns, policyName).Run() != nil; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the restarted kube-router never programmed %s", policyName)
			}
		}
	}
}

// waitAgentQuiet waits until log has not grown for quiet, or for at most
// limit (it logs each sync: a quiet log is an agent between syncs).
func waitAgentQuiet(t *testing.T, log string, quiet, limit time.Duration) {
	t.Helper()
	size := func() int64 {
		fi, err := os.Stat(log)
		if err != nil {
			return -1
		}
		return fi.Size()
	}
	last, since := size(), time.Now()
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if n := size(); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= quiet {
			return
		}
	}
	t.Logf("kube-router's log never went quiet for %s in %s: killing it mid-sync", quiet, limit)
}

// regressionRun is one per-node run over the real and the simulated nodes.
type regressionRun struct {
	runResult
	metrics map[string]*dto.MetricFamily
}

// gatedImageRef is the lab probe image with testdata/firewallgate in front
// of the probe: the real probe starts once kube-router enforces the pod.
const gatedImageRef = "sandprobe.local/sandprobe:kube-test-lab-gated"

// firewallGateWait bounds how long a probe waits for its firewall: under
// the node fault it never comes, and the probe starts after this.
const firewallGateWait = 8 * time.Second

// gatedImage builds and imports gatedImageRef; its sentinel is a
// must-fail lab listener.
func (e *clusterEnv) gatedImage(t *testing.T, sentinel string) {
	t.Helper()
	gate := filepath.Join(t.TempDir(), "firewallgate")
	build := exec.Command("go", "build", "-o", gate, "./runner/kube/testdata/firewallgate")
	build.Dir = testenv.ModuleRoot(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build firewallgate: %v\n%s", err, out)
	}
	ca := filepath.Join(testenv.LabDir(), "ca.pem")
	testenv.ClusterImage(t, gatedImageRef, rootfs(t,
		map[string]string{"/sandprobe": e.bin, "/sandprobe-probe": gate, "/sandprobe-probe.real": testenv.ProbeBinary(t), ca: ca},
		map[string]string{"/firewallgate.target": sentinel + "\n" + firewallGateWait.String()}))
}

func (e *clusterEnv) perNodeRun(t *testing.T, doc, controlNS string) regressionRun {
	t.Helper()
	metricsPath := filepath.Join(t.TempDir(), "metrics.prom")
	r := regressionRun{runResult: e.run(t, doc, "--per-node", "--probe-image", gatedImageRef,
		"--control-namespace", controlNS, "--metrics-file", metricsPath)}
	f, err := os.Open(metricsPath)
	if err != nil {
		t.Fatalf("run exited %d without metrics: %v\n%s", r.code, err, tail(r.stderr, 3000))
	}
	defer f.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	if r.metrics, err = parser.TextToMetricFamilies(f); err != nil {
		t.Fatalf("the metrics file: %v", err)
	}
	return r
}

// nodeVerdict checks one run: every node of the fleet reported (the real
// one and each simulated one), a control ran on each node, the only
// findings that are not pass or skip are on broken (none when ""), and
// want holds for them; sandprobe_egress_unexpected_open is 0 on every node
// but broken; the shipped SandboxEgressReopened names broken alone.
func nodeVerdict(t *testing.T, r regressionRun, fl mixedFleet, broken string, want func(report.Finding) bool) {
	t.Helper()
	realNode := fl.real
	nodes := append([]string{realNode}, fl.simulated...)
	c := report.Count(r.report.Findings)
	t.Logf("exit %d in %.1fs: %d pass, %d fail, %d skip, %d inconclusive, %d error", r.code, r.seconds, c.Pass, c.Fail, c.Skip, c.Inconclusive, c.Error)
	reported := map[string]bool{}
	for _, p := range r.report.Probes {
		if strings.HasPrefix(p.Target, "namespace/"+clusterNS+"/node/") {
			reported[nodeOf(p.Where, p.Target)] = true
		}
	}
	for _, n := range nodes {
		if !reported[n] {
			t.Errorf("no probe result from node %s (results from %v)", n, reported)
		}
	}
	if len(reported) != len(nodes) {
		t.Errorf("probe results from %d nodes %v, want exactly %v", len(reported), reported, nodes)
	}
	failing := 0
	controls := map[string]int{}
	for _, f := range r.report.Findings {
		node := nodeOf(f.Where, f.Target)
		if f.Check == CheckControl {
			controls[node]++
		}
		if f.Status == report.Pass || f.Status == report.Skip {
			continue
		}
		switch {
		case node != broken:
			t.Errorf("%s on %s is %s: %s (%s) — only node %q should fail", f.Name(), f.Target, f.Status, f.Actual, f.Evidence, broken)
		case !want(f):
			t.Errorf("%s on broken node %s is %s: %s — not how this break should show", f.Name(), node, f.Status, f.Actual)
		default:
			failing++
		}
	}
	// A control on each node, the real node's the real one: a deny is
	// proven only from the node it was seen on (a simulated control
	// proves nothing of the real node).
	for _, n := range nodes {
		if controls[n] != 1 {
			t.Errorf("node %s: %d control summaries (controls on %v), want its own one", n, controls[n], controls)
		}
	}
	if len(controls) != len(nodes) {
		t.Errorf("controls on %v, want one on each of %v", controls, nodes)
	}
	if broken != "" && failing == 0 {
		t.Errorf("nothing fails on the broken node %s", broken)
	}
	open := gaugesByNode(r.metrics, report.MetricEgressUnexpectedOpen)
	for _, n := range nodes {
		v, ok := open[n]
		switch {
		case !ok:
			t.Errorf("no %s series for node %s", report.MetricEgressUnexpectedOpen, n)
		case n == broken && v == 0, n != broken && v != 0:
			t.Errorf("%s{node=%q} = %v (broken node: %q)", report.MetricEgressUnexpectedOpen, n, v, broken)
		}
	}
	t.Logf("%s by node: %v", report.MetricEgressUnexpectedOpen, open)
	assertAlertNamesOnly(t, r.metrics, broken)
	if left := fl.left(t); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// mixedFleet is the real node and the simulated ones beside it; left
// lists what runs left behind (probe pods, pods on simulated nodes).
type mixedFleet struct {
	real      string
	simulated []string
	left      func(*testing.T) []string
}

// TestClusterNodeByNodeRegression is issue 15's node-by-node regression on
// the real cluster. SIMULATED nodes (kwok) stand beside the real node;
// `sandprobe run --per-node` probes them all under kube-router with the
// rendered NetworkPolicy and a real control pod on the real node.
//
//  1. The real node breaks the way a node-local CNI fault does
//     (crashNodeAgent: its agent dies; no policy object changes): the real probe's
//     must-fail destinations answer, only the real node's checks fail,
//     sandprobe_egress_unexpected_open is > 0 there and 0 on every
//     simulated node, and the shipped SandboxEgressReopened names the real
//     node and no other.
//  2. Undone: every node green, exit 0, no alert.
//  3. The converse: a third simulated node, whose probe reports a
//     reopened rule, joins the pool (its hold-out taint removed); only it
//     fails, the real node and the other simulated ones stay green, and
//     the alert names it alone.
//
// Nothing is left: no probe pod, no simulated node, lease or pod, kwok's
// controller stopped, kube-router down and its rules gone.
func TestClusterNodeByNodeRegression(t *testing.T) {
	e := newClusterEnv(t)
	// From here on, the test's own cost (the lock wait, a cluster rebuild
	// and the shared images are newClusterEnv's).
	start := time.Now()
	e.labCluster(t)
	doc := unpinned(strings.Replace(labPolicy(t, "{classNames: [gvisor]}"), "  probe: {deadline: 90s}",
		"  probe: {deadline: 90s}\n  placement: {tolerations: [{key: "+simulatedTaint.Key+", operator: Exists, effect: NoSchedule}]}", 1))
	if !strings.Contains(doc, "placement:") {
		t.Fatal("labPolicy changed: no probe deadline line to add the placement after")
	}
	p, _ := loadPolicy(t, doc)
	// The sentinel the probe waits on: a must-fail listener of the lab
	// that the control also dials (it answers when nothing blocks it).
	e.gatedImage(t, "10.99.20.10:443")
	controlNS := e.enforcing(t, doc)
	realNode := e.realNode(t)

	healthy, broken, control := simulatedResultsBreaking(t, p, simulatedBrokenTarget)
	// The third simulated node's probe reports a reopened rule; it stays
	// out of the pool (an untolerated taint) until the converse case.
	simStart := time.Now()
	sim := testenv.StartSimulatedNodes(t, e.kubeconfig, testenv.KwokOptions{
		Nodes: 3, NamePrefix: simulatedPrefix, NodeTaints: []corev1.Taint{simulatedTaint},
		NodeLabels: map[string]string{"sandprobe.dev/simulated": "true"},
		Kernel:     kwokKernel, Start: 500 * time.Millisecond, Run: time.Second,
		Healthy: healthy, Broken: broken, Control: control, BrokenNode: simulatedPrefix + "0002",
	})
	brokenSim := sim.Names[2]
	e.kubectlOut(t, "taint", "nodes", brokenSim, heldOutTaint)
	t.Logf("real node %s; simulated nodes %v up in %.1fs (setup %.1fs)", realNode, sim.Names, time.Since(simStart).Seconds(), time.Since(start).Seconds())
	fl := mixedFleet{real: realNode, simulated: sim.Names[:2], left: func(t *testing.T) []string {
		left := e.probeObjects(t)
		left = append(left, strings.Fields(e.kubectlOut(t, "-n", controlNS, "get", "pods", "-l", leftoverSelector(), "-o", "name"))...)
		for _, n := range sim.Names {
			left = append(left, strings.Fields(e.kubectlOut(t, "get", "pods", "-A", "--field-selector", "spec.nodeName="+n, "-o", "name"))...)
		}
		return left
	}}

	// The direct denies: destinations, metadata stand-ins, the allowed
	// hosts' addresses around the proxy, DNS servers around the resolver.
	deny := func(f report.Finding) bool {
		switch f.Check {
		case "egress.must-fail", "egress.metadata", "egress.proxy-bypass", "egress.dns-bypass", "egress.udp":
			return !strings.HasSuffix(f.Subject, " via proxy")
		}
		return false
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("bash", "-c", "grep -iE 'error|abort|fail|took' /run/sandprobe-cluster/logs/kube-router.log | tail -n 40; cat /proc/loadavg").CombinedOutput()
			t.Logf("kube-router's log (errors, sync times) and the load:\n%s", out)
		}
	})
	netpol := filepath.Join(testenv.ModuleRoot(t), "hack", "cluster", "netpol.sh")
	t.Run("real node: node-local fault", func(t *testing.T) {
		// Now and then the dead agent leaves the new probe pod with no
		// network at all (every allowed host and the resolver time out)
		// instead of an open one: node-local too, but not the break this
		// case is about; it is logged and the fault made again (up to five
		// times: a CI run once met it three times in a row).
		var r regressionRun
		for attempt := 1; ; attempt++ {
			undo := crashNodeAgent(t, netpol, clusterNS, render.EgressPolicyName(p))
			r = e.perNodeRun(t, doc, controlNS)
			undo()
			if attempt == 5 || !deadNetwork(r, realNode) {
				break
			}
			t.Logf("attempt %d: the dead agent left the probe pod on %s with no network, not an open one; making the fault again", attempt, realNode)
		}
		if r.code != report.ExitNonConformant {
			t.Errorf("exit %d, want 1\n%s", r.code, tail(r.stderr, 3000))
		}
		// What the dead agent leaves open is every direct deny of the new
		// probe pod: each answered (a real TCP handshake with a lab listener).
		nodeVerdict(t, r, fl, realNode, func(f report.Finding) bool {
			return deny(f) && f.Status == report.Fail && (f.Class == report.ClassAnswered || strings.HasPrefix(f.Actual, "answered"))
		})
	})
	t.Run("real node: fault undone, every node green", func(t *testing.T) {
		r := e.perNodeRun(t, doc, controlNS)
		if r.code != report.ExitOK {
			t.Errorf("exit %d, want 0\n%s", r.code, tail(r.stderr, 3000))
		}
		nodeVerdict(t, r, fl, "", func(report.Finding) bool { return false })
		// Not a vacuous green: the real node's denies are proven by the
		// real control's answers.
		proven := 0
		for _, f := range r.report.Findings {
			if nodeOf(f.Where, f.Target) == realNode && f.Check == "egress.must-fail" && f.Status == report.Pass && f.Deny == report.DenyProven {
				proven++
			}
		}
		if proven < 5 {
			t.Errorf("only %d proven must-fail passes on the real node %s", proven, realNode)
		}
	})
	t.Run("simulated node: reopened rule", func(t *testing.T) {
		// The node joins the pool; its (simulated) probe sees a rule
		// reopened on it alone.
		e.kubectlOut(t, "taint", "nodes", brokenSim, strings.Split(heldOutTaint, "=")[0]+"-")
		fl := fl
		fl.simulated = sim.Names
		r := e.perNodeRun(t, doc, controlNS)
		if r.code != report.ExitNonConformant {
			t.Errorf("exit %d, want 1\n%s", r.code, tail(r.stderr, 3000))
		}
		nodeVerdict(t, r, fl, brokenSim, func(f report.Finding) bool {
			return f.Check == "egress.must-fail" && f.Subject == simulatedBrokenTarget && f.Status == report.Fail
		})
	})
	t.Logf("the test's own time, after the cluster and its shared images were there: %.1fs", time.Since(start).Seconds())
}

// realNode is the cluster's one real node (the kubelet's).
func (e *clusterEnv) realNode(t *testing.T) string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var real []string
	for _, n := range nodes.Items {
		if n.Annotations["kwok.x-k8s.io/node"] != "fake" {
			real = append(real, n.Name)
		}
	}
	if len(real) != 1 {
		t.Fatalf("the test cluster has %d real nodes %v, want 1", len(real), real)
	}
	slices.Sort(real)
	return real[0]
}

// deadNetwork reports whether every egress.allowed verdict on node failed:
// the probe pod there had no network at all.
func deadNetwork(r regressionRun, node string) bool {
	allowed, failed := 0, 0
	for _, f := range r.report.Findings {
		if f.Check == "egress.allowed" && nodeOf(f.Where, f.Target) == node {
			allowed++
			if f.Status == report.Fail {
				failed++
			}
		}
	}
	return allowed > 0 && failed == allowed
}
