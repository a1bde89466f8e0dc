package main

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/runner/kube"
)

// kubeFlags are the kube backend's flags, shared by run and serve: the
// CronJob runs `sandprobe run --backend kube` with them.
type kubeFlags struct {
	kubeconfig, context, namespace, controlNamespace, probeImage, pullPolicy string
	perNode, drift                                                           bool
	parallel                                                                 int
	unschedulableGrace, driftTimeout, runDeadline, sweepAfter                time.Duration
	// clients are what backend built, for serve --watch.
	clients *kubeClients
}

// kubeClients are the kube backend's connection and its drift client.
type kubeClients struct {
	config *rest.Config
	drift  drift.KubeAPI
}

func (k *kubeFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "kube: the cluster's kubeconfig (default $KUBECONFIG, ~/.kube/config, or the pod's service account inside a cluster)")
	fs.StringVar(&k.context, "context", "", "kube: the kubeconfig context to use")
	fs.StringVarP(&k.namespace, "namespace", "n", "", "kube: put every probe pod in this namespace instead of each of the policy's spec.namespaces (it is then governed by this namespace's egress policies, not the sandboxes')")
	fs.StringVar(&k.controlNamespace, "control-namespace", "", "kube: the namespace of the control pod, which dials every must-fail destination where no sandbox policy applies, so a deny counts only where it answered (default: the runner's own namespace: its pod's in a cluster, else the kubeconfig context's)")
	fs.StringVar(&k.probeImage, "probe-image", "", "kube: the sandprobe image, with the static binaries at /sandprobe and /sandprobe-probe (default: spec.probe.image)")
	fs.StringVar(&k.pullPolicy, "image-pull-policy", "", "kube: Always, IfNotPresent or Never for the probe pod's images (default IfNotPresent)")
	fs.BoolVar(&k.perNode, "per-node", false, "kube: one probe pod on each node that can host sandboxes, in parallel (CNI agents roll out node by node)")
	fs.IntVar(&k.parallel, "parallel", 0, fmt.Sprintf("kube: most probe pods in flight (default: spec.probe.parallel, else ceil(pods/16) between %d and %d; docs/fleet.md)", kube.DefaultParallel, kube.MaxParallel))
	fs.DurationVar(&k.runDeadline, "run-deadline", 0, "kube: bound on the whole fan-out of probe pods; nodes not probed by then are could-not-run findings (default: spec.probe.runDeadline, else ceil(pods/parallel) x (pod start + probe bound) + 1m; docs/fleet.md)")
	fs.BoolVar(&k.drift, "drift", true, "kube: also compare the live sandboxes and their egress policies with the policy, in the same cycle")
	fs.DurationVar(&k.unschedulableGrace, "unschedulable-grace", kube.DefaultUnschedulableGrace, "kube: how long a probe pod may stay unschedulable (or unable to create its container) before the run fails closed")
	fs.DurationVar(&k.driftTimeout, "drift-timeout", 5*time.Minute, "kube: bound on the drift phase")
	fs.DurationVar(&k.sweepAfter, "sweep-after", kube.DefaultSweepAfter, "kube: how long past its deadline a probe pod or ConfigMap that an earlier, killed run left behind is spared before this run's sweep deletes it (its runner may still be cleaning up until then)")
}

// backend builds the kube backend and the drift client from the flags.
// A kubeconfig that cannot be loaded, or a policy that says nowhere to put
// the probe, is bad input; a cluster that does not answer is found out by
// the cycle (exit 3).
func (k *kubeFlags) backend(a *app, cf *cycleFlags, p *policy.Policy, logger *slog.Logger) (*kube.Backend, func(), error) {
	if k.namespace == "" && len(p.Spec.Namespaces) == 0 {
		return nil, nil, fmt.Errorf("spec.namespaces is empty: the kube backend runs the probe in each sandbox namespace, so the same egress policies select it as select the sandboxes; declare them in the policy, or name one with --namespace")
	}
	switch corev1.PullPolicy(k.pullPolicy) {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return nil, nil, fmt.Errorf("--image-pull-policy: want Always, IfNotPresent or Never, got %q", k.pullPolicy)
	}
	if k.unschedulableGrace <= 0 {
		return nil, nil, fmt.Errorf("--unschedulable-grace: want a positive duration, got %s", k.unschedulableGrace)
	}
	if k.parallel < 0 {
		return nil, nil, fmt.Errorf("--parallel: want a positive count (0: scaled with the node count), got %d", k.parallel)
	}
	if k.runDeadline < 0 {
		return nil, nil, fmt.Errorf("--run-deadline: want a positive duration (0: scaled with the node count), got %s", k.runDeadline)
	}
	if k.sweepAfter <= 0 {
		return nil, nil, fmt.Errorf("--sweep-after: want a positive duration, got %s", k.sweepAfter)
	}
	cfg, err := kube.RESTConfig(k.kubeconfig, k.context)
	if err != nil {
		return nil, nil, err
	}
	api, err := kube.NewAPI(cfg)
	if err != nil {
		return nil, nil, err
	}
	// The same client reads the egress policies for parity (every run)
	// and the live objects for drift.
	dcfg := rest.CopyConfig(cfg)
	dcfg.QPS, dcfg.Burst = 50, 100
	driftAPI, err := drift.NewKubeAPI(dcfg)
	if err != nil {
		return nil, nil, err
	}
	k.clients = &kubeClients{config: cfg, drift: driftAPI}
	pr := newProgress(a.stderr, isTerminal(a.stderr), logger)
	be := &kube.Backend{
		API: api, Host: cfg.Host, Namespace: k.namespace, ProbeImage: k.probeImage, PullPolicy: corev1.PullPolicy(k.pullPolicy),
		RuntimeClass: cf.docker.runtimeClass, PerNode: k.perNode, Parallel: k.parallel, RunDeadline: k.runDeadline, UnschedulableGrace: k.unschedulableGrace, SweepAfter: k.sweepAfter, Policies: driftAPI,
		ControlNamespace: cmp.Or(k.controlNamespace, kube.OwnNamespace(k.kubeconfig, k.context)),
		Progress:         pr.show, Logger: logger,
	}
	if k.drift {
		be.Drift = &kube.DriftPhase{API: driftAPI, Timeout: k.driftTimeout}
	}
	return be, pr.done, nil
}
