package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/kube"
)

// kubeFlags are the kube backend's flags, shared by run and serve: the
// CronJob runs `sandprobe run --backend kube` with them.
type kubeFlags struct {
	kubeconfig, context, namespace, probeImage, pullPolicy string
	perNode, drift                                         bool
	unschedulableGrace, driftTimeout                       time.Duration
}

func (k *kubeFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "kube: the cluster's kubeconfig (default $KUBECONFIG, ~/.kube/config, or the pod's service account inside a cluster)")
	fs.StringVar(&k.context, "context", "", "kube: the kubeconfig context to use")
	fs.StringVarP(&k.namespace, "namespace", "n", "", "kube: put every probe pod in this namespace instead of each of the policy's spec.namespaces (it is then governed by this namespace's egress policies, not the sandboxes')")
	fs.StringVar(&k.probeImage, "probe-image", "", "kube: the sandprobe image, with the static binaries at /sandprobe and /sandprobe-probe (default: spec.probe.image)")
	fs.StringVar(&k.pullPolicy, "image-pull-policy", "", "kube: Always, IfNotPresent or Never for the probe pod's images (default IfNotPresent)")
	fs.BoolVar(&k.perNode, "per-node", false, "kube: one probe pod on each node that can host sandboxes, in parallel (CNI agents roll out node by node)")
	fs.BoolVar(&k.drift, "drift", true, "kube: also compare the live sandboxes and their egress policies with the policy, in the same cycle")
	fs.DurationVar(&k.unschedulableGrace, "unschedulable-grace", kube.DefaultUnschedulableGrace, "kube: how long a probe pod may stay unschedulable (or unable to create its container) before the run fails closed")
	fs.DurationVar(&k.driftTimeout, "drift-timeout", 5*time.Minute, "kube: bound on the drift phase")
}

// kubeCycle is what the kube backend adds to a cycle: the cluster's
// address for errors, and the drift phase.
type kubeCycle struct {
	host     string
	backend  *kube.Backend
	driftAPI drift.KubeAPI
	flags    kubeFlags
	logger   *slog.Logger
}

// backend builds the kube backend and the drift client from the flags.
// A kubeconfig that cannot be loaded, or a policy that says nowhere to put
// the probe, is bad input; a cluster that does not answer is found out by
// the cycle (exit 3).
func (k *kubeFlags) backend(a *app, cf *cycleFlags, p *policy.Policy, logger *slog.Logger) (*kubeCycle, func(), error) {
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
	cfg, err := kube.RESTConfig(k.kubeconfig, k.context)
	if err != nil {
		return nil, nil, err
	}
	api, err := kube.NewAPI(cfg)
	if err != nil {
		return nil, nil, err
	}
	kc := &kubeCycle{host: cfg.Host, flags: *k, logger: logger}
	// The same client reads the egress policies for parity (every run)
	// and the live objects for drift.
	dcfg := rest.CopyConfig(cfg)
	dcfg.QPS, dcfg.Burst = 50, 100
	if kc.driftAPI, err = drift.NewKubeAPI(dcfg); err != nil {
		return nil, nil, err
	}
	pr := newProgress(a.stderr, isTerminal(a.stderr), logger)
	kc.backend = &kube.Backend{
		API: api, Namespace: k.namespace, ProbeImage: k.probeImage, PullPolicy: corev1.PullPolicy(k.pullPolicy),
		RuntimeClass: cf.docker.runtimeClass, PerNode: k.perNode, UnschedulableGrace: k.unschedulableGrace, Policies: kc.driftAPI,
		Progress: pr.show, Logger: logger,
	}
	return kc, pr.done, nil
}

// reach asks the API server for the pods of the first probe namespace
// once, briefly, so an unreachable cluster is one clear error instead of
// one per phase.
func (kc *kubeCycle) reach(ctx context.Context, spec runner.ProbeSpec) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ns := kc.backend.Namespaces(spec)[0]
	_, err := kc.backend.API.ListPods(ctx, ns, metav1.ListOptions{Limit: 1})
	var status apierrors.APIStatus
	switch {
	case err == nil:
		return nil
	case errors.As(err, &status):
		// It answered, but not as asked: credentials or RBAC.
		return fmt.Errorf("the cluster at %s refused to list pods in %s: %s", kc.host, ns, oneLineErr(err))
	}
	return fmt.Errorf("cannot reach the cluster at %s: %s", kc.host, oneLineErr(err))
}

// driftPhase compares the live cluster with the policy and adds the
// findings, the sandbox count and the phase's time to the run. A cluster
// that cannot be listed is an error finding, never a clean phase.
func (kc *kubeCycle) driftPhase(ctx context.Context, p *policy.Policy, run *report.Run) {
	start := time.Now()
	engine, err := drift.NewEngine(p)
	col := drift.NewCollector()
	if err == nil {
		dctx, cancel := context.WithTimeout(ctx, kc.flags.driftTimeout)
		scan := &drift.KubeScan{API: kc.driftAPI, Engine: engine, Source: "the cluster at " + kc.host, Logger: kc.logger}
		err = scan.Run(dctx, col)
		cancel()
	}
	if err != nil {
		kc.logger.Error("drift could not run", "err", oneLineErr(err))
		col.AddError("drift", "list", err)
	}
	if col.Scanned == 0 && err == nil {
		col.Note("no sandbox found: nothing carries the labels %s%s", strings.Join(selectorPairs(p), ","), namespacesText(p))
	}
	col.Summary(p)
	run.Findings = append(run.Findings, col.Findings...)
	run.Notes = append(run.Notes, col.Notes...)
	run.Scanned += col.Scanned
	if run.Phases == nil {
		run.Phases = map[string]float64{}
	}
	run.Phases["drift"] = time.Since(start).Seconds()
	run.Seconds += run.Phases["drift"]
}

// unreachable is the run of a cycle whose cluster did not answer.
func (kc *kubeCycle) unreachable(spec runner.ProbeSpec, err error, start time.Time) report.Run {
	p := spec.Policy
	cnr := &runner.CouldNotRun{Target: kc.backend.Target(spec), Reason: runner.ReasonLaunch, Detail: err.Error()}
	return report.Run{
		Policy: p.Metadata.Name, Version: probes.Version(), Backend: "kube", StartedAt: start.UTC(), Seconds: time.Since(start).Seconds(),
		Findings: []report.Finding{cnr.Finding()},
	}
}
