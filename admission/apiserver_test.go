package admission

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/report"
)

// The reference policy: pods labelled sandbox=true must run under kata or gvisor.
const refPolicy = "../fixtures/policy.yaml"

// auditPolicy logs every pod request at Metadata level, where the
// annotations admission adds (the ValidatingAdmissionPolicy's Audit action
// among them) are recorded.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    resources: [{group: "", resources: [pods]}]
  - level: None
`

// server is one real kube-apiserver with etcd, with an audit policy and an
// audit log, for this package's tests. There is no kubelet, scheduler or
// controller: pods are admitted and stored, never run.
var server struct {
	once       sync.Once
	env        *envtest.Environment
	cfg        *rest.Config
	client     kubernetes.Interface
	kubeconfig string
	auditLog   string
	dir        string
	err        error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if server.env != nil {
		if err := server.env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop kube-apiserver: %v\n", err)
		}
	}
	if server.dir != "" {
		os.RemoveAll(server.dir)
	}
	os.Exit(code)
}

func auditedAPIServer(t *testing.T) kubernetes.Interface {
	t.Helper()
	assets := testenv.KubeAssets(t)
	server.once.Do(func() { server.err = startAudited(assets) })
	if server.err != nil {
		t.Fatal(server.err)
	}
	return server.client
}

func startAudited(assets string) error {
	dir, err := os.MkdirTemp("", "sandprobe-admission-")
	if err != nil {
		return err
	}
	server.dir = dir
	server.auditLog = filepath.Join(dir, "audit.log")
	policyFile := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policyFile, []byte(auditPolicy), 0o600); err != nil {
		return err
	}
	ctrllog.SetLogger(logr.Discard())
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("audit-policy-file", policyFile)
	args.Set("audit-log-path", server.auditLog)
	// Written as each request completes, so a test reads its event at once.
	args.Set("audit-log-mode", "blocking")
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("start kube-apiserver and etcd from %s with an audit log: %w", assets, err)
	}
	server.env, server.cfg = env, cfg
	if server.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	server.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(server.kubeconfig, kc, 0o600); err != nil {
		return err
	}
	ctx := context.Background()
	// The RuntimeClass admission plugin refuses a pod naming a class that
	// does not exist: every class the tests name exists.
	for _, rc := range []string{"kata", "gvisor", "runc"} {
		if _, err := server.client.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: rc}, Handler: rc}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for _, ns := range []string{"sandboxes", "builds"} {
		if _, err := server.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// applyRendered applies what `sandprobe render --format admission --mode
// mode` prints (the admission policy and its binding) and waits until the
// API server acts on the new stage: ready says when it does.
func applyRendered(t *testing.T, policyFile, mode string, ready func() error, extra ...string) {
	t.Helper()
	code, stdout, stderr := testenv.Exec(t, testenv.Binary(t), append([]string{"render", "--format", "admission", "--policy", policyFile, "--mode", mode}, extra...)...)
	if code != 0 {
		t.Fatalf("render --mode %s: exit %d: %s", mode, code, stderr)
	}
	ctx := context.Background()
	api := server.client.AdmissionregistrationV1()
	for _, doc := range strings.Split(stdout, "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ValidatingAdmissionPolicy":
			var vap admissionv1.ValidatingAdmissionPolicy
			if err := yaml.UnmarshalStrict([]byte(doc), &vap); err != nil {
				t.Fatal(err)
			}
			if old, err := api.ValidatingAdmissionPolicies().Get(ctx, vap.Name, metav1.GetOptions{}); err == nil {
				vap.ResourceVersion = old.ResourceVersion
				_, err = api.ValidatingAdmissionPolicies().Update(ctx, &vap, metav1.UpdateOptions{})
				must(t, err)
			} else {
				_, err = api.ValidatingAdmissionPolicies().Create(ctx, &vap, metav1.CreateOptions{})
				must(t, err)
			}
		case "ValidatingAdmissionPolicyBinding":
			var b admissionv1.ValidatingAdmissionPolicyBinding
			if err := yaml.UnmarshalStrict([]byte(doc), &b); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.ToLower(fmt.Sprint(b.Spec.ValidationActions)), strings.Split(mode, ",")[0]) {
				t.Fatalf("render --mode %s wrote validationActions %v", mode, b.Spec.ValidationActions)
			}
			if old, err := api.ValidatingAdmissionPolicyBindings().Get(ctx, b.Name, metav1.GetOptions{}); err == nil {
				b.ResourceVersion = old.ResourceVersion
				_, err = api.ValidatingAdmissionPolicyBindings().Update(ctx, &b, metav1.UpdateOptions{})
				must(t, err)
			} else {
				_, err = api.ValidatingAdmissionPolicyBindings().Create(ctx, &b, metav1.CreateOptions{})
				must(t, err)
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ready()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server does not act on --mode %s: %v", mode, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// warnings collects the Warning headers of one client's requests.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// create creates a pod (or only asks admission, with dryRun) and returns
// the warnings the API server sent back with the answer.
func create(t *testing.T, pod *corev1.Pod, dryRun bool) ([]string, error) {
	t.Helper()
	cfg := rest.CopyConfig(server.cfg)
	w := &warnings{}
	cfg.WarningHandler = w
	c, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = c.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, opts)
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.list), err
}

func newPod(ns, name string, labels map[string]string, runtimeClass string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "sandbox.invalid/agent:1"}}},
	}
	if runtimeClass != "" {
		p.Spec.RuntimeClassName = &runtimeClass
	}
	return p
}

// auditEvent is the part of an audit.k8s.io/v1 Event the tests read.
type auditEvent struct {
	Verb      string `json:"verb"`
	Stage     string `json:"stage"`
	ObjectRef struct {
		Resource, Namespace, Name string
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Annotations map[string]string `json:"annotations"`
}

// auditEventFor waits for the audit log's record of the creation of a pod.
func auditEventFor(t *testing.T, ns, name string) auditEvent {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(server.auditLog)
		must(t, err)
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev auditEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			if ev.Verb == "create" && ev.Stage == "ResponseComplete" && ev.ObjectRef.Resource == "pods" && ev.ObjectRef.Namespace == ns && ev.ObjectRef.Name == name {
				return ev
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no audit event for the creation of pod %s/%s in %s", ns, name, server.auditLog)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

const failureAnnotation = "validation.policy.admission.k8s.io/validation_failure"

// TestModesOnAPIServer proves the three rollout stages on a real API
// server, each applied from `render --mode`: Deny refuses an unisolated
// sandbox pod with the policy's message; Warn admits it and returns that
// message to the client as a warning; Audit admits it without a word to the
// client and annotates its audit event; warn,audit does both. A sandbox pod
// under an allowed class, and a pod without the labels, pass every stage
// untouched.
func TestModesOnAPIServer(t *testing.T) {
	auditedAPIServer(t)
	sandbox := map[string]string{"sandbox": "true"}
	const ns = "sandboxes"
	const refusal = "runtimeClassName runc is not allowed for a sandbox pod (labels sandbox=true): SandboxPolicy agent-sandbox allows only kata, gvisor"
	probe := newPod(ns, "stage-probe", sandbox, "runc")
	warnedBy := func(ws []string) bool {
		for _, w := range ws {
			if strings.Contains(w, "ValidatingAdmissionPolicy '"+PolicyName+"'") && strings.Contains(w, refusal) {
				return true
			}
		}
		return false
	}
	stages := []modeStage{
		{mode: "deny", refused: true, ready: func() error {
			if _, err := create(t, probe, true); !apierrors.IsForbidden(err) {
				return fmt.Errorf("dry run: %w, want Forbidden", err)
			}
			return nil
		}},
		{mode: "warn", warn: true, ready: func() error {
			if ws, err := create(t, probe, true); err != nil || !warnedBy(ws) {
				return fmt.Errorf("dry run: %w, warnings %q", err, ws)
			}
			return nil
		}},
		{mode: "warn,audit", warn: true, audited: true, ready: func() error {
			// From warn, nothing a client sees changes: wait for the
			// audit annotation of a dry run instead.
			name := fmt.Sprintf("stage-ready-%d", time.Now().UnixNano())
			p := newPod(ns, name, sandbox, "runc")
			if _, err := create(t, p, true); err != nil {
				return err
			}
			if ev := auditEventFor(t, ns, name); ev.Annotations[failureAnnotation] == "" {
				return fmt.Errorf("not audited yet")
			}
			return nil
		}},
		{mode: "audit", audited: true, ready: func() error {
			if ws, err := create(t, probe, true); err != nil || len(ws) > 0 {
				return fmt.Errorf("dry run: %w, warnings %q", err, ws)
			}
			return nil
		}},
	}
	for i, st := range stages {
		t.Run(strings.ReplaceAll(st.mode, ",", "+"), func(t *testing.T) {
			applyRendered(t, refPolicy, st.mode, st.ready)
			for _, c := range []modeCase{
				{name: "runc", class: "runc", labels: sandbox, offending: true},
				{name: "unset", labels: sandbox, offending: true},
				{name: "gvisor", class: "gvisor", labels: sandbox},
				{name: "unlabelled", class: "runc"},
			} {
				name := fmt.Sprintf("%d-%s", i, c.name)
				ws, err := create(t, newPod(ns, name, c.labels, c.class), false)
				if checkModeCase(t, st, c, name, ws, err) {
					checkModeAudit(t, st, c, auditEventFor(t, ns, name), name)
				}
			}
		})
	}
}

// modeStage is one validation mode of the binding: how to tell it is in
// force, and what it does to an offending pod.
type modeStage struct {
	mode          string
	ready         func() error
	refused, warn bool
	audited       bool
}

// modeCase is a pod created in each stage.
type modeCase struct {
	name, class string
	labels      map[string]string
	offending   bool
}

// checkModeCase: in stage st, pod c was refused with the policy's message
// or created with (only) the policy's warning, as the stage says; true
// when it was to be created, for its audit event to be checked.
func checkModeCase(t *testing.T, st modeStage, c modeCase, name string, ws []string, err error) bool {
	t.Helper()
	switch {
	case c.offending && st.refused:
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "is not allowed for a sandbox pod") {
			t.Errorf("%s: %v, want refused with the policy's message", name, err)
		}
		return false
	case err != nil:
		t.Errorf("%s: refused in stage %s: %v", name, st.mode, err)
		return false
	}
	var policyWarnings []string
	for _, w := range ws {
		if strings.Contains(w, "ValidatingAdmissionPolicy '"+PolicyName+"' with binding '"+PolicyName+"'") {
			policyWarnings = append(policyWarnings, w)
		}
	}
	if wantWarn := c.offending && st.warn; (len(policyWarnings) > 0) != wantWarn {
		t.Errorf("%s: warnings %q in stage %s (want the policy's warning: %v)", name, ws, st.mode, wantWarn)
	} else if wantWarn && !strings.Contains(policyWarnings[0], "runtimeClassName "+c.name+" is not allowed for a sandbox pod") {
		t.Errorf("%s: warning %q does not carry the policy's message", name, policyWarnings[0])
	}
	return true
}

// checkModeAudit: pod c, created in stage st, has the audit annotation
// naming the policy, its binding and the Audit action exactly when the
// stage audits an offending pod.
func checkModeAudit(t *testing.T, st modeStage, c modeCase, ev auditEvent, name string) {
	t.Helper()
	ann := ev.Annotations[failureAnnotation]
	if (ann != "") != (c.offending && st.audited) {
		t.Errorf("%s: audit annotation %q in stage %s (want one: %v)", name, ann, st.mode, c.offending && st.audited)
	}
	if ann != "" {
		var failures []struct {
			Message, Policy, Binding string
			ValidationActions        []string
		}
		if err := json.Unmarshal([]byte(ann), &failures); err != nil || len(failures) != 1 {
			t.Fatalf("%s: annotation %q: %v", name, ann, err)
		}
		f := failures[0]
		if f.Policy != PolicyName || f.Binding != PolicyName || !strings.Contains(f.Message, "is not allowed for a sandbox pod") || !slices.Contains(f.ValidationActions, "Audit") {
			t.Errorf("%s: audit annotation %+v does not name the policy, its binding, the Audit action and the message", name, f)
		}
	}
	if ev.ResponseStatus.Code != 201 {
		t.Errorf("%s: audit event says %d, want 201 Created", name, ev.ResponseStatus.Code)
	}
}

// TestWouldRefuseIsWhatDenyRefuses: while the binding audits, pods of every
// kind are let in (sandboxes under runc, without a class, under kata or
// gvisor, near-miss labels, pods a controller owns, in several namespaces).
// `sandprobe drift --would-refuse` then names a set of pods; the binding is
// switched to Deny and every live pod is submitted again (a dry run of its
// copy): the pods the API server refuses are exactly the pods named, each
// with the API server's own message.
func TestWouldRefuseIsWhatDenyRefuses(t *testing.T) {
	client := auditedAPIServer(t)
	ctx := context.Background()
	t.Cleanup(func() {
		for _, ns := range []string{"sandboxes", "builds", "default"} {
			client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "wr-test"})
		}
	})
	probe := newPod("sandboxes", "wr-probe", map[string]string{"sandbox": "true"}, "runc")
	applyRendered(t, refPolicy, "audit", func() error {
		if ws, err := create(t, probe, true); err != nil || len(ws) > 0 {
			return fmt.Errorf("dry run: %w, warnings %q", err, ws)
		}
		return nil
	})
	n := createWouldRefusePods(t)
	named := wouldRefuseNamed(t)

	// What Deny refuses, on the same pods.
	applyRendered(t, refPolicy, "deny", func() error {
		if _, err := create(t, probe, true); !apierrors.IsForbidden(err) {
			return fmt.Errorf("dry run: %w, want Forbidden", err)
		}
		return nil
	})
	// Every live pod, not only this test's: --would-refuse looks at all.
	live, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	must(t, err)
	if len(live.Items) < n {
		t.Fatalf("%d live pods, want at least this test's %d", len(live.Items), n)
	}
	refused := 0
	for _, p := range live.Items {
		again := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, GenerateName: p.Name + "-", Labels: p.Labels, Annotations: p.Annotations, OwnerReferences: p.OwnerReferences},
			Spec:       p.Spec,
		}
		target := "pod/" + p.Namespace + "/" + p.Name
		_, err := create(t, again, true)
		actual, isNamed := named[target]
		switch {
		case err == nil && isNamed:
			t.Errorf("%s: named by --would-refuse, but Deny admits it", target)
		case err != nil && !apierrors.IsForbidden(err):
			t.Fatalf("%s: dry run: %v", target, err)
		case err != nil:
			refused++
			if !isNamed {
				t.Errorf("%s: Deny refuses it (%v), but --would-refuse did not name it", target, err)
				continue
			}
			// The API server's message is "... denied request: MESSAGE".
			_, msg, _ := strings.Cut(err.Error(), "denied request: ")
			if msg == "" || !strings.HasSuffix(actual, msg) {
				t.Errorf("%s: --would-refuse says %q, the API server %q", target, actual, err)
			}
		}
	}
	if refused == 0 || refused != len(named) {
		t.Fatalf("Deny refused %d of %d live pods; --would-refuse named %d", refused, len(live.Items), len(named))
	}
	t.Logf("%d live pods: Deny refuses %d, exactly the %d --would-refuse named, with the same messages", len(live.Items), refused, len(named))
}

// createWouldRefusePods creates, while the binding only audits, a pod for
// every namespace, label set, runtime class and owner (controlled by a
// ReplicaSet or not), and returns how many.
func createWouldRefusePods(t *testing.T) int {
	t.Helper()
	labelSets := []map[string]string{
		{"sandbox": "true"}, {"sandbox": "true", "team": "agents"}, {"sandbox": "false"}, {"sandbox": "True"}, {"team": "agents"}, {},
	}
	classes := []string{"", "kata", "gvisor", "runc"}
	yes := true
	n := 0
	for _, ns := range []string{"sandboxes", "builds", "default"} {
		for li, ls := range labelSets {
			for _, rc := range classes {
				for _, owned := range []bool{false, true} {
					labels := map[string]string{"wr-test": "1"}
					for k, v := range ls {
						labels[k] = v
					}
					p := newPod(ns, fmt.Sprintf("wr-%d-%s-%v", li, map[string]string{"": "none"}[rc]+rc, owned), labels, rc)
					if owned {
						p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "agents-7d9f", UID: "0b1d3c5e-0000-4000-8000-000000000001", Controller: &yes}}
					}
					if _, err := create(t, p, false); err != nil {
						t.Fatalf("create %s/%s while auditing: %v", ns, p.Name, err)
					}
					n++
				}
			}
		}
	}
	return n
}

// wouldRefuseNamed runs drift --would-refuse through the CLI, in small
// pages, and returns the pods it names (pod/NS/NAME) with why; each
// finding's evidence and fix name the pod's controller when it has one.
func wouldRefuseNamed(t *testing.T) map[string]string {
	t.Helper()
	// What --would-refuse names, through the CLI, in small pages.
	out := filepath.Join(t.TempDir(), "would-refuse.json")
	code, _, stderr := testenv.Exec(t, testenv.Binary(t), "drift", "--would-refuse", "--policy", refPolicy, "--kubeconfig", server.kubeconfig,
		"--page-size", "7", "-o", "text", "--json", out)
	if code != report.ExitNonConformant {
		t.Fatalf("drift --would-refuse: exit %d, want 1\n%s", code, stderr)
	}
	var run report.Run
	data, err := os.ReadFile(out)
	must(t, err)
	must(t, json.Unmarshal(data, &run))
	named := map[string]string{} // pod/ns/name -> Actual
	for _, f := range run.Findings {
		if f.Check != CheckWouldRefuse || f.Status != report.Fail {
			t.Fatalf("unexpected finding %+v", f)
		}
		named[f.Target] = f.Actual
		if strings.Contains(f.Evidence, "controlled by: ReplicaSet/agents-7d9f") != strings.HasSuffix(f.Target, "-true") {
			t.Errorf("%s: evidence %q does not say who controls it", f.Target, f.Evidence)
		}
		if strings.HasSuffix(f.Target, "-true") && !strings.Contains(f.Fix, "in the pod template of ReplicaSet/agents-7d9f") {
			t.Errorf("%s: fix %q does not point at the template", f.Target, f.Fix)
		}
	}
	return named
}

// TestWouldRefuseVerdicts: a selector whose pods all conform passes (exit
// 0); one that matches no live pod says so (skip, exit 0); an unknown
// --mode or a policy with no runtime class is bad input (exit 2, one line).
func TestWouldRefuseVerdicts(t *testing.T) {
	client := auditedAPIServer(t)
	ctx := context.Background()
	for _, rc := range []string{"kata", "gvisor"} {
		p := newPod("sandboxes", "conform-"+rc, map[string]string{"sandbox": "true", "fleet": "conforming"}, rc)
		if _, err := create(t, p, false); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.CoreV1().Pods("sandboxes").Delete(ctx, p.Name, metav1.DeleteOptions{}) })
	}
	dir := t.TempDir()
	write := func(name, labels string) string {
		f := filepath.Join(dir, name+".yaml")
		must(t, os.WriteFile(f, []byte("apiVersion: sandprobe.dev/v1alpha1\nkind: SandboxPolicy\nmetadata: {name: "+name+"}\nspec:\n  selector: {matchLabels: {"+labels+"}}\n  runtime: {classNames: [kata, gvisor]}\n"), 0o600))
		return f
	}
	bin := testenv.Binary(t)
	cases := []struct {
		name   string
		args   []string
		code   int
		status report.Status
		stderr string
	}{
		{name: "all conform", args: []string{"--policy", write("conforming", `sandbox: "true", fleet: conforming`)}, code: 0, status: report.Pass},
		{name: "nothing matches", args: []string{"--policy", write("nobody", `sandbox: "true", fleet: nobody`)}, code: 0, status: report.Skip},
		{name: "no runtime class", args: []string{"--policy", "../fixtures/lab-policy.yaml"}, code: 2, stderr: "spec.runtime.classNames is empty"},
		{name: "with docker", args: []string{"--policy", refPolicy, "--docker"}, code: 2, stderr: "--would-refuse judges pods by the Kubernetes admission policy"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.json")
			args := append([]string{"drift", "--would-refuse", "--kubeconfig", server.kubeconfig, "--json", out}, c.args...)
			code, _, stderr := testenv.Exec(t, bin, args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\n%s", code, c.code, stderr)
			}
			if c.stderr != "" {
				if !strings.Contains(stderr, c.stderr) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
					t.Fatalf("stderr %q, want one line saying %q", stderr, c.stderr)
				}
				return
			}
			var run report.Run
			data, err := os.ReadFile(out)
			must(t, err)
			must(t, json.Unmarshal(data, &run))
			if len(run.Findings) != 1 || run.Findings[0].Status != c.status {
				t.Fatalf("findings %+v, want one %s", run.Findings, c.status)
			}
		})
	}
}
