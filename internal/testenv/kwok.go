package testenv

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/sourcegraph/conc"
	"github.com/sourcegraph/conc/pool"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// KwokRunnerUser is the identity the runner under test authenticates as on
// a simulated fleet: the shipped CronJob's service account, so the
// shipped RBAC (manifests/rbac.yaml, render --format rbac) decides what it
// may do, as in a cluster. The API server's audit log records its requests
// (and only its), so they can be counted.
const KwokRunnerUser = "system:serviceaccount:sandprobe-system:sandprobe"

// KwokOptions shape a simulated fleet.
type KwokOptions struct {
	// Nodes is how many fake nodes to create (kwok-node-0000 …, or
	// NamePrefix0000 …), labelled NodeLabels, tainted NodeTaints and
	// annotated for kwok to manage.
	Nodes      int
	NamePrefix string
	NodeLabels map[string]string
	NodeTaints []corev1.Taint
	// Kernel is the release the nodes report (the runner cross-checks the
	// probe's kernel against it).
	Kernel string
	// Start is how long a scheduled probe pod takes to run (the simulated
	// pod start-up), Run how long it runs before it ends (the simulated
	// probe: one egress timeout).
	Start, Run time.Duration
	// Healthy and Broken are the probe results as the probe leaves them in
	// its termination message (compact JSON) with the literal @NONCE@
	// where the run's nonce goes: kwok writes the pod's own nonce there.
	// Broken is what the probe on BrokenNode reports (it exits 1); empty
	// BrokenNode: every node is healthy.
	Healthy, Broken string
	BrokenNode      string
	// Control is the control vantage's result (every must-fail
	// destination answered it), for the run's control pod.
	Control string
}

// Kwok is a simulated fleet — SIMULATED: no container ever runs. It has
// its own etcd and kube-apiserver (the shared APIServer and the
// single-node cluster are untouched), the real kube-scheduler, and kwok's
// controller playing the kubelet of every fake node through the stages in
// hack/kwok/stages.yaml. What a runner does against it meets real API
// semantics: admission, scheduling, watch, resource versions, deletion.
type Kwok struct {
	// Admin is a cluster-admin config for the test's own set-up.
	Admin *rest.Config
	// AdminKubeconfig is Admin as a kubeconfig file (for kubectl).
	AdminKubeconfig string
	// RunnerKubeconfig is a kubeconfig file for KwokRunnerUser, with no
	// rights until the test grants them (RBAC bound to that service
	// account), whose requests AuditLog records.
	RunnerKubeconfig string
	AuditLog         string
	Dir              string
}

// KwokBinary builds (or finds) kwok's controller with hack/kwok/build.sh:
// seconds when cached, a few minutes cold.
func KwokBinary(t testing.TB) string {
	t.Helper()
	script := filepath.Join(ModuleRoot(t), "hack", "kwok", "build.sh")
	out, err := exec.Command("bash", script, "--print-bin").Output()
	if err != nil {
		t.Fatalf("hack/kwok/build.sh --print-bin: %v", err)
	}
	bin := strings.TrimSpace(string(out))
	if _, err := os.Stat(bin); err != nil {
		t.Logf("building kwok (hack/kwok/build.sh)")
		if out, err := exec.Command("bash", script).CombinedOutput(); err != nil {
			t.Fatalf("hack/kwok/build.sh: %v\n%s", err, out)
		}
	}
	return bin
}

// StartKwok brings a simulated fleet up for the test and tears it down
// after: about 5 s plus the nodes (1,000 in some 10 s).
func StartKwok(t testing.TB, opts KwokOptions) *Kwok {
	t.Helper()
	assets := KubeAssets(t)
	scheduler := filepath.Join(assets, "kube-scheduler")
	if _, err := os.Stat(scheduler); err != nil {
		Missing(t, fmt.Sprintf("kube-scheduler not in %s (run hack/k8s/build.sh)", assets))
	}
	kwokBin := KwokBinary(t)
	dir := t.TempDir()
	k := &Kwok{Dir: dir, AuditLog: filepath.Join(dir, "audit.log")}

	// The runner's requests, and nothing else, at Metadata level: one line
	// per request once its response is complete (a watch when it ends).
	auditPolicy := filepath.Join(dir, "audit-policy.yaml")
	writeFile(t, auditPolicy, `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  users: [`+KwokRunnerUser+`]
- level: None
`)
	ctrllog.SetLogger(logr.Discard())
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("audit-policy-file", auditPolicy).Set("audit-log-path", k.AuditLog).
		Set("audit-log-mode", "blocking").
		// Without the node lifecycle controller nothing would lift the
		// not-ready taint the API server puts on a new node.
		Append("disable-admission-plugins", "TaintNodesByCondition")
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver and etcd for kwok from %s: %v", assets, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stop kwok's kube-apiserver: %v", err)
		}
	})
	cfg.QPS, cfg.Burst = 500, 1000
	k.Admin = cfg

	adminKC := filepath.Join(dir, "admin.kubeconfig")
	k.AdminKubeconfig = adminKC
	writeKubeconfig(t, env, envtest.User{Name: "kwok-admin", Groups: []string{"system:masters"}}, adminKC)
	k.RunnerKubeconfig = filepath.Join(dir, "runner.kubeconfig")
	// The groups a service account's token carries.
	writeKubeconfig(t, env, envtest.User{Name: KwokRunnerUser,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:sandprobe-system", "system:authenticated"}}, k.RunnerKubeconfig)
	// Its context's namespace is the service account's own, as in the
	// CronJob's pod: where the runner puts what it keeps to itself (the
	// control pod).
	setContextNamespace(t, k.RunnerKubeconfig, "sandprobe-system")

	stages := kwokStages(t, opts)
	stagesFile := filepath.Join(dir, "kwok.yaml")
	writeFile(t, stagesFile, stages)

	startDaemon(t, dir, "kube-scheduler", scheduler,
		"--kubeconfig", adminKC, "--authentication-kubeconfig", adminKC, "--authorization-kubeconfig", adminKC,
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", "0",
		// A thousand pods arrive in waves of the runner's cap: the
		// defaults (50 QPS) would queue binds behind the client limit.
		"--kube-api-qps", "500", "--kube-api-burst", "1000", "--v=1")
	startDaemon(t, dir, "kwok", kwokBin,
		"--kubeconfig", adminKC, "--config", stagesFile,
		"--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake", "--v", "WARN")

	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	k.createNodes(t, cs, opts)
	return k
}

// kwokStages is hack/kwok/stages.yaml with the options filled in.
func kwokStages(t testing.TB, opts KwokOptions) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(ModuleRoot(t), "hack", "kwok", "stages.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	result := func(doc string) string {
		// The message is a single-quoted YAML scalar inside a Go template.
		if strings.Contains(doc, "'") || strings.Contains(doc, "{{") || strings.Contains(doc, "\n") {
			t.Fatalf("a simulated result must be one line without ' or {{: %s", doc)
		}
		return strings.ReplaceAll(doc, "@NONCE@", "{{ $nonce }}")
	}
	broken := cmp.Or(opts.Broken, opts.Healthy)
	control := cmp.Or(opts.Control, opts.Healthy)
	return strings.NewReplacer(
		"@START_MS@", strconv.FormatInt(opts.Start.Milliseconds(), 10),
		"@RUN_MS@", strconv.FormatInt(opts.Run.Milliseconds(), 10),
		"@BROKEN_NODE@", opts.BrokenNode,
		"@KERNEL@", opts.Kernel,
		"@HEALTHY_RESULT@", result(opts.Healthy),
		"@BROKEN_RESULT@", result(broken),
		"@CONTROL_RESULT@", result(control),
	).Replace(string(raw))
}

// KwokNodeName is the name of fake node i.
func KwokNodeName(i int) string { return fmt.Sprintf("kwok-node-%04d", i) }

// nodeName is the name of fake node i under opts.
func (opts KwokOptions) nodeName(i int) string {
	return fmt.Sprintf("%s%04d", cmp.Or(opts.NamePrefix, "kwok-node-"), i)
}

// createNodes creates the fake nodes and waits until kwok has made every
// one Ready.
func (k *Kwok) createNodes(t testing.TB, cs kubernetes.Interface, opts KwokOptions) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := pool.New().WithErrors().WithMaxGoroutines(32)
	for i := range opts.Nodes {
		name := opts.nodeName(i)
		labels := map[string]string{"kubernetes.io/hostname": name, "type": "kwok"}
		for k, v := range opts.NodeLabels {
			labels[k] = v
		}
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
			Spec: corev1.NodeSpec{Taints: opts.NodeTaints},
		}
		p.Go(func() error {
			_, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
			return err
		})
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("create %d kwok nodes: %v", opts.Nodes, err)
	}
	for {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list kwok nodes: %v", err)
		}
		ready := 0
		for _, n := range list.Items {
			if n.Annotations["kwok.x-k8s.io/node"] != "fake" || !strings.HasPrefix(n.Name, cmp.Or(opts.NamePrefix, "kwok-node-")) {
				continue
			}
			// On a real cluster the API server puts the not-ready taint on
			// a new node and the node lifecycle controller lifts it once
			// kwok made it Ready: until then nothing schedules there.
			if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return strings.HasPrefix(t.Key, "node.kubernetes.io/") }) {
				continue
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && n.Status.NodeInfo.KernelVersion == opts.Kernel {
					ready++
				}
			}
		}
		if ready == opts.Nodes {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kwok made %d of %d nodes ready (log: %s)", ready, opts.Nodes, filepath.Join(k.Dir, "kwok.log"))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// AuditEvent is one request of KwokRunnerUser as the API server audited it.
type AuditEvent struct {
	Verb        string
	Resource    string
	Subresource string
	Code        int
}

// RunnerRequests reads the audit log: every request the runner made so far.
func (k *Kwok) RunnerRequests(t testing.TB) []AuditEvent {
	t.Helper()
	f, err := os.Open(k.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct {
			Stage string `json:"stage"`
			User  struct {
				Username string `json:"username"`
			} `json:"user"`
			Verb      string `json:"verb"`
			ObjectRef struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit log %s: %v", k.AuditLog, err)
		}
		if ev.User.Username != KwokRunnerUser || (ev.Stage != "ResponseComplete" && ev.Stage != "Panic") {
			continue
		}
		out = append(out, AuditEvent{Verb: ev.Verb, Resource: ev.ObjectRef.Resource, Subresource: ev.ObjectRef.Subresource, Code: ev.ResponseStatus.Code})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func writeKubeconfig(t testing.TB, env *envtest.Environment, u envtest.User, path string) {
	t.Helper()
	user, err := env.ControlPlane.AddUser(u, nil)
	if err != nil {
		t.Fatalf("add user %s: %v", u.Name, err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(kc))
}

func setContextNamespace(t testing.TB, path, ns string) {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Contexts {
		c.Namespace = ns
	}
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startDaemon runs a control-plane process for the rest of the test, its
// output in DIR/NAME.log, and stops it (SIGTERM, then SIGKILL) after, or
// earlier when the test calls the returned stop (which waits until it is
// gone; later calls do nothing).
func startDaemon(t testing.TB, dir, name, bin string, args ...string) (stop func()) {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a stop reaches whatever it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan error, 1)
	var reaper conc.WaitGroup
	reaper.Go(func() { done <- cmd.Wait() })
	var once sync.Once
	stop = func() {
		once.Do(func() {
			defer logf.Close()
			select {
			case err := <-done:
				t.Logf("%s exited early: %v (log %s)", name, err, logPath)
				reaper.Wait()
				return
			default:
			}
			syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-done
			}
			reaper.Wait()
		})
	}
	t.Cleanup(stop)
	return stop
}
