package kube

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sourcegraph/conc"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// The real layer: hack/cluster's single-node cluster (kube-apiserver,
// scheduler, controller-manager, kubelet, containerd with runc and gVisor),
// driven through the sandprobe binary exactly as the CronJob runs it.
// Every failure is provoked for real by an image that misbehaves in its own
// way (testdata/misbehave installed as /sandprobe and /sandprobe-probe).

// clusterNS is the tests' namespace: Pod Security "restricted" is
// enforced, so every probe pod also proves it passes the standard.
const clusterNS = "sandprobe-kube-test"

const probeImageRef = "sandprobe.local/sandprobe:kube-test"

// fullOnlyImageRef holds /sandprobe but not /sandprobe-probe, which probe pods run.
const fullOnlyImageRef = "sandprobe.local/sandprobe:kube-test-full-only"

// clusterPolicy is a runc sandbox without network checks, for the failure
// cases: fast, and independent of the network lab.
const clusterPolicy = `apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: kube-test}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  runtime: {classNames: [runc], isolation: {runc: none}}
  identity: {uid: 65532, gid: 65532, fsGroup: 65532}
  filesystem: {readOnlyRoot: true, writable: [/workspace, /tmp], emptyAtStart: [/workspace]}
  capabilities: []
  noNewPrivileges: true
  seccomp: RuntimeDefault
  serviceAccountToken: absent
  resources: {limits: {memory: 64Mi, ephemeral-storage: 64Mi}}
  # The control pod dials the metadata address: the lab's stand-in, never
  # the real one (the cluster drops it anyway).
  egress: {metadata: {address: 10.99.169.254, port: 80}}
  probe: {deadline: 60s}
`

// Each misbehaving image, by what /misbehave.mode says.
var misbehaviours = map[string]string{
	"exit42":    "exit 42",
	"segv":      "segv",
	"sleep":     "sleep 1h",
	"eat":       "eat",
	"stale":     "stale",
	"garbled":   "print hello from a wrapper script",
	"truncated": `print {"schema":"sandprobe.dev/probe-result/v1","nonce":"`,
}

type clusterEnv struct {
	kubeconfig, bin, kubectl string
}

// clusterImages remembers which cluster the images went into: another
// helper's test may tear the cluster down and bring up a new one between
// two of ours (each test holds the lock only for itself), and a new cluster
// has none of them.
var clusterImages struct {
	mu      sync.Mutex
	cluster time.Time // the admin kubeconfig's mtime: new with every cluster
}

// newClusterEnv takes the cluster (and its lock) for the test, imports the
// images once per test binary and makes the namespace.
func newClusterEnv(t testing.TB) *clusterEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("the real cluster takes minutes")
	}
	kubeconfig := testenv.Cluster(t)
	e := &clusterEnv{kubeconfig: kubeconfig, bin: testenv.Binary(t), kubectl: filepath.Join(testenv.KubeAssets(t), "kubectl")}
	clusterImages.mu.Lock()
	if fi, err := os.Stat(kubeconfig); err != nil || !fi.ModTime().Equal(clusterImages.cluster) {
		if err := e.importImages(t); err != nil {
			clusterImages.mu.Unlock()
			t.Fatal(err)
		}
		if err == nil {
			clusterImages.cluster = fi.ModTime()
		}
	}
	clusterImages.mu.Unlock()
	e.namespace(t, clusterNS)
	return e
}

// namespace makes a namespace enforcing Pod Security "restricted": every
// pod the tests start there proves it passes the standard.
func (e *clusterEnv) namespace(t testing.TB, name string) {
	t.Helper()
	e.apply(t, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %s
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
`, name))
}

// importImages builds the probe image (the sandprobe binary, and the lab's
// CA where the lab policy expects it) and one image per misbehaviour.
func (e *clusterEnv) importImages(t testing.TB) error {
	dir := t.TempDir()
	misbehave := filepath.Join(dir, "misbehave")
	build := exec.Command("go", "build", "-o", misbehave, "./runner/kube/testdata/misbehave")
	build.Dir = testenv.ModuleRoot(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build misbehave: %w\n%s", err, out)
	}
	testenv.ClusterImage(t, probeImageRef, rootfs(t, map[string]string{"/sandprobe": e.bin, "/sandprobe-probe": testenv.ProbeBinary(t)}, nil))
	testenv.ClusterImage(t, fullOnlyImageRef, rootfs(t, map[string]string{"/sandprobe": e.bin}, nil))
	for name, mode := range misbehaviours {
		files := map[string]string{"/sandprobe": misbehave, "/sandprobe-probe": misbehave}
		if name == "stale" {
			files["/sandprobe.real"] = e.bin
		}
		testenv.ClusterImage(t, misbehaveImage(name), rootfs(t, files, map[string]string{"/misbehave.mode": mode}))
	}
	return nil
}

func misbehaveImage(name string) string { return "sandprobe.local/misbehave-" + name + ":kube-test" }

// rootfs makes a minimal root: the mount points a container expects and
// the given files (copied from the host) and texts.
func rootfs(t testing.TB, files, texts map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"dev", "proc", "sys", "etc", "tmp", "workspace"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(root, "tmp"), 0o1777)
	for _, f := range []string{"etc/hosts", "etc/resolv.conf", "etc/hostname"} {
		os.WriteFile(filepath.Join(root, f), nil, 0o644)
	}
	for dest, src := range files {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(root, filepath.Dir(dest)), 0o755)
		if err := os.WriteFile(filepath.Join(root, dest), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for dest, text := range texts {
		if err := os.WriteFile(filepath.Join(root, dest), []byte(text+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func (e *clusterEnv) apply(t testing.TB, manifest string) {
	t.Helper()
	cmd := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

func (e *clusterEnv) kubectlOut(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(e.kubectl, append([]string{"--kubeconfig", e.kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// probeObjects lists what runs left in the namespace: probe pods and
// policy ConfigMaps.
func (e *clusterEnv) probeObjects(t testing.TB) []string {
	out := e.kubectlOut(t, "-n", clusterNS, "get", "pods,configmaps", "-l", leftoverSelector(), "-o", "name")
	return strings.Fields(out)
}

// runResult is one `sandprobe run --backend kube` as the CronJob runs it.
type runResult struct {
	code    int
	report  report.Run
	stderr  string
	seconds float64
}

// problems are the could-not-run findings of the run: reason → detail.
func (r runResult) problems() map[string]string {
	out := map[string]string{}
	for _, f := range r.report.Findings {
		if f.Check == "probe.run" {
			out[f.Subject] = f.Actual
		}
	}
	return out
}

func (e *clusterEnv) command(t testing.TB, policyDoc string, args ...string) (*exec.Cmd, string, *bytes.Buffer) {
	t.Helper()
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(policyDoc), 0o644); err != nil {
		t.Fatal(err)
	}
	jsonFile := filepath.Join(dir, "report.json")
	argv := append([]string{"run", "--backend", "kube", "--kubeconfig", e.kubeconfig, "--namespace", clusterNS, "--policy", pol,
		"--probe-image", probeImageRef, "--image-pull-policy", "Never", "--drift=false", "--json", jsonFile, "-o", "text"}, args...)
	cmd := exec.Command(e.bin, argv...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	return cmd, jsonFile, &stderr
}

func (e *clusterEnv) run(t testing.TB, policyDoc string, args ...string) runResult {
	t.Helper()
	cmd, jsonFile, out := e.command(t, policyDoc, args...)
	start := time.Now()
	err := cmd.Run()
	r := runResult{stderr: out.String(), seconds: time.Since(start).Seconds()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatal(err)
	}
	b, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatalf("no JSON report (exit %d): %v\n%s", r.code, err, r.stderr)
	}
	if err := json.Unmarshal(b, &r.report); err != nil {
		t.Fatalf("JSON report: %v", err)
	}
	return r
}

// TestClusterFailClosed provokes every could-not-run for real and sees
// exit 3 with that reason and nothing left behind.
func TestClusterFailClosed(t *testing.T) {
	e := newClusterEnv(t)
	unschedulable := strings.Replace(clusterPolicy, "  probe: {deadline: 60s}\n", "  placement: {nodeSelector: {pool: nobody-has-this}}\n  probe: {deadline: 60s}\n", 1)
	cases := []struct {
		name   string
		policy string
		args   []string
		reason string
		detail string
	}{
		{"image that does not exist", clusterPolicy, []string{"--probe-image", "sandprobe.local/no-such-image:1"}, runner.ReasonImagePull, "ErrImageNeverPull"},
		{"no node matches", unschedulable, []string{"--unschedulable-grace", "3s"}, runner.ReasonUnschedulable, "didn't match"},
		{"exit 42", clusterPolicy, []string{"--probe-image", misbehaveImage("exit42")}, runner.ReasonCrashed, "exited 42"},
		{"SIGSEGV", clusterPolicy, []string{"--probe-image", misbehaveImage("segv")}, runner.ReasonCrashed, "signal 11"},
		{"sleeps past its deadline", clusterPolicy, []string{"--probe-image", misbehaveImage("sleep"), "--deadline", "8s"}, runner.ReasonDeadline, "8s"}, // the runner's deadline or the kubelet's, whichever fires first
		{"out of memory", clusterPolicy, []string{"--probe-image", misbehaveImage("eat")}, runner.ReasonOOM, "64Mi"},
		{"stale result", clusterPolicy, []string{"--probe-image", misbehaveImage("stale"), "--no-network"}, runner.ReasonWrongNonce, "5ta1e5ta1e5ta1e5ta1e5ta1"},
		{"garbled", clusterPolicy, []string{"--probe-image", misbehaveImage("garbled")}, runner.ReasonGarbled, "hello from a wrapper script"},
		{"truncated", clusterPolicy, []string{"--probe-image", misbehaveImage("truncated")}, runner.ReasonTruncated, ""},
		// A probe image built before the split: /sandprobe alone.
		{"image without sandprobe-probe", clusterPolicy, []string{"--probe-image", fullOnlyImageRef}, runner.ReasonLaunch, "holds no /sandprobe-probe"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.run(t, c.policy, c.args...)
			probs := r.problems()
			t.Logf("exit %d in %.1fs: %v", r.code, r.seconds, probs)
			if r.code != report.ExitCouldNotRun {
				t.Errorf("exit %d, want 3\n%s", r.code, r.stderr)
			}
			if d, ok := probs[c.reason]; !ok || !strings.Contains(d, c.detail) || len(probs) != 1 {
				t.Errorf("problems %v, want only %s containing %q", probs, c.reason, c.detail)
			}
			if left := e.probeObjects(t); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

// TestClusterAdmissionRefused: a ValidatingAdmissionPolicy refusing
// sandbox pods without runtime class kata refuses the probe pod: exit 3,
// admission-refused with the policy's message.
func TestClusterAdmissionRefused(t *testing.T) {
	e := newClusterEnv(t)
	const name = "sandprobe-kube-test-runtime"
	e.apply(t, fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: %[1]s}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
  - expression: "!has(object.metadata.labels) || !('sandbox' in object.metadata.labels) || (has(object.spec.runtimeClassName) && object.spec.runtimeClassName in ['kata'])"
    message: sandbox pods must run under runtime class kata
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: %[1]s}
spec:
  policyName: %[1]s
  validationActions: [Deny]
  matchResources:
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %[2]s}}
`, name, clusterNS))
	t.Cleanup(func() {
		exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name, "--ignore-not-found").Run()
		// The API server keeps enforcing a deleted policy for a moment: hand
		// the cluster on (its lock is shared by every checkout's tests) only
		// once a sandbox pod is admitted again.
		pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: admission-probe, namespace: %s, labels: {sandbox: "true"}}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: c
    image: sandprobe.local/none
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`, clusterNS)
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			cmd := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "create", "--dry-run=server", "-f", "-")
			cmd.Stdin = strings.NewReader(pod)
			if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), name) {
				return
			}
		}
		t.Errorf("admission policy %s still enforced 30s after its deletion", name)
	})
	// The API server picks the policy up within a second or two.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := e.run(t, clusterPolicy, "--no-network")
		probs := r.problems()
		if d, ok := probs[runner.ReasonAdmission]; ok {
			if r.code != report.ExitCouldNotRun || !strings.Contains(d, "sandbox pods must run under runtime class kata") {
				t.Errorf("exit %d, %s", r.code, d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never refused: exit %d %v", r.code, probs)
		}
		time.Sleep(time.Second)
	}
	if left := e.probeObjects(t); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// labPolicy is the network lab's policy for a probe pod: every egress
// target is a lab address the pods reach through `lab attach-cluster`.
func labPolicy(t testing.TB, runtime string) string {
	b, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "fixtures", "lab-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The cluster's pod network is IPv4 only: an IPv6 target is unreachable
	// from a pod (ENETUNREACH), which a target pinned to "timeout" would
	// read as a changed rule.
	var lines []string
	for _, line := range strings.Split(string(b), "\n") {
		// The runtime is the test's (below).
		if !strings.Contains(line, "fd99:") && !strings.HasPrefix(line, "  runtime:") {
			lines = append(lines, line)
		}
	}
	doc := strings.Join(lines, "\n")
	for old, repl := range map[string]string{
		// The probe image is the bare binary: no shell to run as a tool.
		`  image: {tools: [{name: sh, args: [-c, "exit 0"]}]}`: "  image: {}",
		"  selector: {matchLabels: {sandbox: \"true\"}}":       "  selector: {matchLabels: {sandbox: \"true\"}}\n  runtime: " + runtime + "\n  resources: {limits: {memory: 256Mi}}\n  probe: {deadline: 90s}",
	} {
		if !strings.Contains(doc, old) {
			t.Fatalf("fixtures/lab-policy.yaml has no %q", old)
		}
		doc = strings.Replace(doc, old, repl, 1)
	}
	// Network safety: pods reach the host's network, so every metadata
	// target must be a lab stand-in; a policy that lost its override would
	// dial the real 169.254.169.254.
	p, err := policy.Load([]byte(doc))
	if err != nil {
		t.Fatalf("lab policy for pods: %v", err)
	}
	for _, a := range p.Spec.Egress.Metadata.Addresses {
		if !strings.HasPrefix(a, "10.99.") {
			t.Fatalf("lab policy for pods dials metadata address %s, not a lab stand-in", a)
		}
	}
	return doc
}

const labImageRef = "sandprobe.local/sandprobe:kube-test-lab"

// labCluster connects the cluster's pods to the network lab and imports
// the probe image with the lab's CA where the lab policy expects it.
func (e *clusterEnv) labCluster(t testing.TB) {
	t.Helper()
	lab := testenv.Lab(t)
	if out, err := exec.Command(lab, "attach-cluster").CombinedOutput(); err != nil {
		t.Fatalf("lab attach-cluster: %v\n%s", err, out)
	}
	ca := filepath.Join(testenv.LabDir(), "ca.pem")
	testenv.ClusterImage(t, labImageRef, rootfs(t, map[string]string{"/sandprobe": e.bin, "/sandprobe-probe": testenv.ProbeBinary(t), ca: ca}, nil))
}

// TestClusterHealthy: a conformant sandbox passes end to end — egress
// through the lab under kube-router, every deny proven by the control pod,
// identity, filesystem, capabilities, no token — under gVisor (declared as
// gvisor, with the runner's host-kernel cross-check passing); under runc
// (declared as runc: no cross-check); and a class called gvisor that really
// runs runc is caught by the cross-check.
//
// The runc cases leave the network out: kube-router programs a new pod's
// firewall a moment after the pod starts (about a second here), and a probe
// under runc is dialling by then, so every must-fail destination answers it
// — as it would a sandbox that dials in its first second. gVisor's start
// takes longer than kube-router does. (make e2e runs its probes under gVisor
// for the same reason.)
func TestClusterHealthy(t *testing.T) {
	e := newClusterEnv(t)
	e.labCluster(t)
	controlNS := e.enforcing(t, labPolicy(t, "{classNames: [gvisor]}"))
	// kube-router's new-pod window (hack/cluster/README.md) is not what
	// this test is about: the probe starts once its firewall is in place.
	e.gatedImage(t, "10.99.20.10:443")
	e.apply(t, `apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor-but-runc}
handler: runc
`)
	cases := []struct {
		name, runtime string
		code          int
		hostKernel    report.Status
		args          []string
	}{
		{"runc", "{classNames: [runc], isolation: {runc: none}}", report.ExitOK, "", []string{"--no-network"}},
		{"gvisor", "{classNames: [gvisor]}", report.ExitOK, report.Pass, nil},
		{"gvisor class running runc", "{classNames: [gvisor-but-runc], isolation: {gvisor-but-runc: gvisor}}", report.ExitNonConformant, report.Fail, []string{"--no-network"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.run(t, unpinned(labPolicy(t, c.runtime)), append([]string{"--probe-image", gatedImageRef, "--control-namespace", controlNS}, c.args...)...)
			t.Logf("exit %d in %.1fs", r.code, r.seconds)
			if r.code != c.code {
				var bad []string
				for _, f := range r.report.Findings {
					if f.Status != report.Pass && f.Status != report.Skip {
						bad = append(bad, fmt.Sprintf("%s %s: %s (%s)", f.Name(), f.Status, f.Actual, f.Evidence))
					}
				}
				t.Errorf("exit %d, want %d:\n%s\n%s", r.code, c.code, strings.Join(bad, "\n"), r.stderr)
			}
			var hk *report.Finding
			for i, f := range r.report.Findings {
				if f.Subject == runner.HostKernelSubject {
					hk = &r.report.Findings[i]
				}
				if !strings.HasPrefix(f.Target, "namespace/"+clusterNS+"/node/") && !strings.HasPrefix(f.Target, "namespace/"+controlNS+"/node/") {
					t.Errorf("finding %s targets %q, want namespace/%s/node/NAME", f.Name(), f.Target, clusterNS)
				}
				if f.Deny != "" && f.Deny != report.DenyProven {
					t.Errorf("%s: deny %s (the control got %s)", f.Name(), f.Deny, f.Control)
				}
			}
			switch {
			case c.hostKernel == "" && hk != nil:
				t.Errorf("host-kernel check for a runtime that isolates nothing: %+v", hk)
			case c.hostKernel != "" && (hk == nil || hk.Status != c.hostKernel):
				t.Errorf("host-kernel check %+v, want %s", hk, c.hostKernel)
			}
			if left := e.probeObjects(t); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

// enforcing makes kube-router, enforcing the NetworkPolicy `sandprobe
// render` writes for the policy in clusterNS, the only thing between the
// cluster's pods and the lab (the lab attached in engine mode, as in make
// e2e), and returns a namespace of its own, under no policy, for the
// control pod. Afterwards the lab goes back to sandbox mode and the engine
// away, as the other cluster tests expect them. Pinned failure classes are
// the lab's, not kube-router's (it rejects every deny alike): use a policy
// without them.
func (e *clusterEnv) enforcing(t testing.TB, doc string) string {
	t.Helper()
	return e.enforcingWith(t, doc)
}

// enforcingWith is enforcing with kube-router started by `netpol.sh up
// upArgs...` (--daemonset: as the DaemonSet kube-system/kube-router).
func (e *clusterEnv) enforcingWith(t testing.TB, doc string, upArgs ...string) string {
	t.Helper()
	root := testenv.ModuleRoot(t)
	lab, netpol := filepath.Join(root, "hack", "lab", "lab"), filepath.Join(root, "hack", "cluster", "netpol.sh")
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	sh(lab, "attach-cluster", "--engine")
	t.Cleanup(func() { exec.Command(lab, "attach-cluster").Run() })
	sh(append([]string{netpol, "up"}, upArgs...)...)
	t.Cleanup(func() { exec.Command(netpol, "down").Run() })
	p, err := policy.Load([]byte(unpinned(doc)))
	if err != nil {
		t.Fatal(err)
	}
	var np bytes.Buffer
	if err := render.WriteYAML(&np, render.NetworkPolicy(p, clusterNS)); err != nil {
		t.Fatal(err)
	}
	e.apply(t, np.String())
	t.Cleanup(func() {
		exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "-n", clusterNS, "delete", "networkpolicy", render.EgressPolicyName(p), "--ignore-not-found").Run()
	})
	for deadline := time.Now().Add(30 * time.Second); exec.Command(netpol, "has-policy", clusterNS, render.EgressPolicyName(p)).Run() != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("kube-router never programmed %s", render.EgressPolicyName(p))
		}
	}
	controlNS := clusterNS + "-control"
	e.namespace(t, controlNS)
	return controlNS
}

// unpinned drops the failure classes a policy pins: the lab's flavours
// (DROP, reset, ICMP) are not kube-router's, which rejects every deny alike,
// and the node's ICMP rate limit turns part of a burst of rejects into
// timeouts.
func unpinned(doc string) string {
	doc = regexp.MustCompile(`, expect: [a-z-]+`).ReplaceAllString(doc, "")
	return regexp.MustCompile(`(?m)^ +expect: [a-z-]+\n`).ReplaceAllString(doc, "")
}

// TestClusterControl: under kube-router, a must-fail destination that
// answers the control pod (in a namespace no policy restricts) and not the
// probe is a proven pass; one that answers nobody (the lab router's own
// address, where nothing listens) is a deny unproven: inconclusive, exit 1,
// and the report says what the control got.
func TestClusterControl(t *testing.T) {
	e := newClusterEnv(t)
	e.labCluster(t)
	doc := strings.Replace(labPolicy(t, "{classNames: [gvisor]}"), "        - 10.99.20.20/30\n",
		"        - 10.99.20.20/30\n        - {target: 10.99.20.1, reason: \"the lab router: nothing listens, it refuses everyone\"}\n", 1)
	if !strings.Contains(doc, "10.99.20.1,") {
		t.Fatal("fixtures/lab-policy.yaml changed: no 10.99.20.20/30 to add the dead target after")
	}
	doc = unpinned(doc)
	controlNS := e.enforcing(t, doc)
	e.gatedImage(t, "10.99.20.10:443") // past kube-router's new-pod window
	r := e.run(t, doc, "--probe-image", gatedImageRef, "--control-namespace", controlNS, "-o", "text")
	t.Logf("exit %d in %.1fs", r.code, r.seconds)
	byName := map[string]report.Finding{}
	var summary *report.Finding
	for i, f := range r.report.Findings {
		byName[f.Name()] = f
		if f.Check == CheckControl {
			summary = &r.report.Findings[i]
		}
	}
	// Nothing answers DNS on the router's address either: that deny proves nothing.
	if f := byName["egress.dns-bypass 10.99.20.1:53/tcp"]; f.Status != report.Inconclusive || f.Deny != report.DenyUnproven || f.Control == "" || f.Control == report.ClassAnswered {
		t.Errorf("DNS to the router's address: status %s, deny %s, control %q: want inconclusive, unproven, and what the control got (%s)", f.Status, f.Deny, f.Control, f.Evidence)
	}
	if f := byName["egress.must-fail 10.99.20.1:443"]; f.Status != report.Inconclusive || f.Deny != report.DenyUnproven || f.Control == "" || f.Control == report.ClassAnswered {
		t.Errorf("the router's address: status %s, deny %s, control %q: want inconclusive, unproven, and what the control got (%s)", f.Status, f.Deny, f.Control, f.Evidence)
	}
	for name, want := range map[string][3]string{
		"egress.must-fail 10.99.20.11:443":            {"pass", "proven", "answered"},
		"egress.must-fail blocked.lab.test:443":       {"pass", "proven", "answered"},
		"egress.metadata 10.99.169.254:80":            {"pass", "proven", "answered"},
		"egress.proxy-bypass api.lab.test:443 direct": {"pass", "proven", "answered"},
		// The outside resolvers (the must-fail IPs on 53): the lab
		// authority answers the control on 10.99.20.11.
		"egress.dns-bypass 10.99.20.11:53/udp": {"pass", "proven", "answered"},
		"egress.dns-bypass 10.99.20.11:53/tcp": {"pass", "proven", "answered"},
	} {
		f := byName[name]
		if got := [3]string{string(f.Status), f.Deny, f.Control}; got != want {
			t.Errorf("%s: status, deny, control %q, want %q (%s; %s)", name, got, want, f.Actual, f.Evidence)
		}
	}
	if r.code != report.ExitNonConformant {
		t.Errorf("exit %d, want 1: an unproven deny is never a pass\n%s", r.code, r.stderr)
	}
	if summary == nil || !strings.HasPrefix(summary.Target, "namespace/"+controlNS+"/") || !strings.Contains(summary.Actual, "no egress policy selects it") {
		t.Errorf("control summary %+v", summary)
	}
	if !strings.Contains(r.stderr, "deny unproven") {
		t.Errorf("the text report does not say the deny is unproven:\n%s", r.stderr)
	}
	for _, ns := range []string{clusterNS, controlNS} {
		if out := e.kubectlOut(t, "-n", ns, "get", "pods", "-l", leftoverSelector(), "-o", "name"); strings.TrimSpace(out) != "" {
			t.Errorf("left behind in %s: %s", ns, out)
		}
	}

	// The control under the way clusters restrict it: a default-deny of
	// egress in every namespace, the control's included. Its own line names
	// the policy. What it proves depends on timing, not on luck in the
	// verdict: kube-router programs a new pod's firewall about a second
	// after it starts (hack/cluster/README.md), and a runc control pod dials
	// before that (every time here), so its answers are real answers from
	// live targets and prove their denies; whatever it missed is unproven,
	// never a pass. TestLabControl drops everything leaving the lab's
	// control vantage and sees every direct deny unproven; TestControl does
	// the same on a real API server with its namespace's policy.
	t.Run("control under a default-deny", func(t *testing.T) {
		e.apply(t, "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: default-deny, namespace: "+controlNS+"}\nspec: {podSelector: {}, policyTypes: [Egress]}\n")
		t.Cleanup(func() {
			exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "-n", controlNS, "delete", "networkpolicy", "default-deny", "--ignore-not-found").Run()
		})
		r := e.run(t, doc, "--probe-image", labImageRef, "--control-namespace", controlNS, "-o", "text")
		var summary report.Finding
		for _, f := range r.report.Findings {
			if f.Check == CheckControl {
				summary = f
			}
		}
		t.Logf("exit %d in %.1fs; control: %s: %s", r.code, r.seconds, summary.Status, summary.Actual)
		if !strings.Contains(summary.Actual, "restricted by networkpolicy/"+controlNS+"/default-deny") {
			t.Errorf("the control's line does not name the policy that restricts it: %s", summary.Actual)
		}
		proven, unproven := 0, 0
		for _, f := range r.report.Findings {
			if f.Deny == "" || strings.HasSuffix(f.Subject, " via proxy") {
				continue
			}
			switch {
			case f.Deny == report.DenyProven && f.Control == report.ClassAnswered && f.Status == report.Pass:
				proven++
			case f.Deny == report.DenyUnproven && f.Status != report.Pass:
				unproven++
			default:
				t.Errorf("%s: %s, deny %s, control %q: a deny is proven by the control's answer and nothing else (%s)", f.Name(), f.Status, f.Deny, f.Control, f.Evidence)
			}
		}
		t.Logf("direct denies: %d proven by answers the control got (inside kube-router's start-up window), %d unproven", proven, unproven)
		if want := map[bool]report.Status{true: report.Inconclusive, false: report.Pass}[unproven > 0]; summary.Status != want {
			t.Errorf("control line %s, want %s: restricted, and %d destinations did not answer it", summary.Status, want, unproven)
		}
		if r.code != report.ExitNonConformant {
			t.Errorf("exit %d, want 1 (10.99.20.1 answers nobody)\n%s", r.code, r.stderr)
		}
	})
}

// TestClusterSIGKILL kills the runner with SIGKILL at random points of 20
// runs (before the pod exists, while it is pending, running, being
// collected or deleted). What a killed runner leaves ends by itself (the
// kubelet's activeDeadlineSeconds), and the next run's sweep deletes it
// once past its deadline: afterwards no probe pod or ConfigMap remains.
func TestClusterSIGKILL(t *testing.T) {
	e := newClusterEnv(t)
	const deadline = 15 * time.Second
	// Whole runs, unkilled, set the range the kills are drawn from: the
	// faster of two (the first after a cold start is slow), less a margin.
	var span time.Duration
	for range 2 {
		calib := e.run(t, clusterPolicy, "--no-network")
		if calib.code != report.ExitOK {
			t.Fatalf("calibration run exited %d: %v", calib.code, calib.problems())
		}
		if d := time.Duration(calib.seconds * 0.9 * float64(time.Second)); span == 0 || d < span {
			span = d
		}
	}
	var kills []string
	killed := 0
	for i := range 20 {
		cmd, _, _ := e.command(t, clusterPolicy, "--no-network", "--deadline", deadline.String())
		delay := time.Duration(rand.Int64N(int64(span)))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		var wg conc.WaitGroup
		wg.Go(func() { cmd.Wait(); close(exited) })
		select {
		case <-exited:
			kills = append(kills, fmt.Sprintf("run %d ended before its kill at %s", i, delay.Round(time.Millisecond)))
		case <-time.After(delay):
			cmd.Process.Kill()
			wg.Wait()
			killed++
			kills = append(kills, fmt.Sprintf("run %d killed at %s", i, delay.Round(time.Millisecond)))
		}
	}
	if killed < 15 {
		t.Errorf("only %d of 20 runs were killed before they ended (kills drawn from [0, %s))", killed, span.Round(time.Millisecond))
	}
	last := time.Now()
	left := e.probeObjects(t)
	t.Logf("kills drawn from [0, %s); %s\nleft by the killed runners: %d objects %v", span.Round(time.Millisecond), strings.Join(kills, "\n"), len(left), left)
	// Past every leftover's deadline plus the sweep's margin (--sweep-after:
	// a second here, where the default minute would only make the test
	// wait), the next run sweeps them all and leaves nothing of its own.
	const sweepAfter = time.Second
	wait := time.Until(last.Add(deadline + sweepAfter + 5*time.Second))
	t.Logf("waiting %s for the leftovers to expire", wait.Round(time.Second))
	time.Sleep(wait)
	r := e.run(t, clusterPolicy, "--no-network", "--sweep-after", sweepAfter.String())
	if r.code != report.ExitOK {
		t.Errorf("the sweeping run exited %d: %v\n%s", r.code, r.problems(), r.stderr)
	}
	if left := e.probeObjects(t); len(left) > 0 {
		t.Errorf("after the sweep: %v", left)
	}
}

// TestClusterCycleWithDrift: the CronJob's cycle is probe then drift, one
// report: both phases timed, the sandboxes counted, no could-not-run. The
// test cluster runs no sandbox besides the probe (gone before drift looks),
// so the drift phase finds nothing: a failing finding and exit 1, never a
// clean run that judged nothing.
func TestClusterCycleWithDrift(t *testing.T) {
	e := newClusterEnv(t)
	r := e.run(t, clusterPolicy, "--no-network", "--drift=true")
	t.Logf("exit %d in %.1fs, phases %v, scanned %d, notes %v", r.code, r.seconds, r.report.Phases, r.report.Scanned, r.report.Notes)
	if _, ok := r.report.Phases["probe"]; !ok {
		t.Errorf("no probe phase: %v", r.report.Phases)
	}
	if _, ok := r.report.Phases["drift"]; !ok {
		t.Errorf("no drift phase: %v", r.report.Phases)
	}
	for _, f := range r.report.Findings {
		if f.Check == "probe.run" || f.Check == "drift.run" {
			t.Errorf("could not run: %s %s: %s", f.Check, f.Subject, f.Actual)
		}
	}
	if r.code == report.ExitCouldNotRun {
		t.Errorf("exit 3:\n%s", r.stderr)
	}
	nothing := false
	for _, f := range r.report.Findings {
		if f.Check == "drift.scan.sandboxes-found" && f.Status == report.Fail {
			nothing = true
		}
	}
	if r.report.Scanned == 0 && (!nothing || r.code != report.ExitNonConformant) {
		t.Errorf("the drift phase found no sandbox, but exit %d and drift.scan.sandboxes-found failed: %v", r.code, nothing)
	}
}

// TestClusterSandboxImage: when the policy names the real sandbox image,
// the probe runs inside it: the init container copies the small probe binary
// out of the probe image (`sandprobe-probe install`) into an emptyDir mounted
// read-only, under the same constraints. The sandbox image here holds no
// sandprobe and no shell.
func TestClusterSandboxImage(t *testing.T) {
	e := newClusterEnv(t)
	const sandboxImage = "sandprobe.local/sandbox-base:kube-test"
	testenv.ClusterImage(t, sandboxImage, rootfs(t, nil, map[string]string{"/etc/os-release": "ID=sandbox-base"}))
	doc := strings.Replace(clusterPolicy, "  probe: {deadline: 60s}\n", "  image: {ref: "+sandboxImage+", requireDigest: false}\n  probe: {deadline: 60s}\n", 1)
	r := e.run(t, doc, "--no-network")
	t.Logf("exit %d in %.1fs", r.code, r.seconds)
	if r.code != report.ExitOK {
		t.Errorf("exit %d, want 0: %v\n%s", r.code, r.problems(), r.stderr)
	}
	if left := e.probeObjects(t); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
