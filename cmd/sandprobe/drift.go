package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/cache"
	"github.com/sandprobe/sandprobe/drift"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// driftOptions are the flags of `sandprobe drift`.
type driftOptions struct {
	policyPath  string
	kubeconfig  string
	kubeContext string
	docker      bool
	dockerHost  string
	files       stringList
	recursive   bool
	namespace   string
	nsLabels    namespaceLabelsFlag
	ciliumName  string
	inspect     stringList
	pageSize    int64
	timeout     time.Duration
	wouldRefuse bool
	out         outputs
	lf          logFlags
	cache       driftCacheFlags
}

func (a *app) cmdDrift(fs *pflag.FlagSet) runFunc {
	var o driftOptions
	o.register(fs)
	return func(ctx context.Context, _ []string) int { return a.runDrift(ctx, &o) }
}

// register adds drift's flags to fs.
func (o *driftOptions) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.policyPath, "policy", "", "the SandboxPolicy file")
	fs.StringVar(&o.ciliumName, "cilium-cluster", "", "the Cilium cluster name (io.cilium.k8s.policy.cluster) policies may select on (default: default, Cilium's own)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "bound on the whole drift run")
	fs.BoolVar(&o.wouldRefuse, "would-refuse", false, "instead of drift: list the live pods (or the pods in -f files) that the sandbox admission policy (render --format admission) would refuse if its binding said Deny, with why; exit 1 when there is one")
	group(fs, groupFiles, func() {
		fs.VarP(&o.files, "filename", "f", "check manifests in this file or directory (multi-document YAML or JSON, Lists unpacked; - for stdin); repeatable")
		fs.BoolVarP(&o.recursive, "recursive", "R", false, "-f: read the subdirectories of a directory too, as kubectl -R does (without it, a note names the ones not read)")
		fs.StringVarP(&o.namespace, "namespace", "n", "", "-f: the namespace of objects that name none, as kubectl apply -n does (default: default)")
		fs.Var(&o.nsLabels, "namespace-labels", "-f: the labels of a namespace whose Namespace object is not in the files (admin network policies and Cilium select on them; without them such a verdict is inconclusive), as NS=KEY=VALUE,KEY=VALUE (NS= for none); repeatable, one per namespace")
	})
	group(fs, groupKube, func() {
		fs.StringVar(&o.kubeconfig, "kubeconfig", "", "check this cluster (default $KUBECONFIG, or in-cluster config, when no other source is given)")
		fs.StringVar(&o.kubeContext, "context", "", "the kubeconfig context to use")
		fs.Int64Var(&o.pageSize, "page-size", 500, "list page size (objects per request)")
	})
	group(fs, groupDocker, func() {
		fs.BoolVar(&o.docker, "docker", false, "check the Docker engine's containers that carry the selector's labels")
		fs.StringVar(&o.dockerHost, "docker-host", "", "the Docker engine (default $DOCKER_HOST, then unix:///var/run/docker.sock)")
		fs.Var(&o.inspect, "inspect", "check containers in this docker inspect JSON file; repeatable")
	})
	o.out.register(fs)
	o.out.registerSARIF(fs, sarifRules())
	o.lf.register(fs)
	o.cache.register(fs)
}

// runDrift checks the flags and the policy, picks the sources (a cluster
// when nothing else is given and one is configured) and runs drift.
func (a *app) runDrift(ctx context.Context, o *driftOptions) int {
	if err := o.out.check(); err != nil {
		fmt.Fprintf(a.stderr, "sandprobe drift: %v\n", err)
		return report.ExitBadInput
	}
	logger, err := o.lf.logger(a.stderr)
	if err != nil {
		fmt.Fprintf(a.stderr, "sandprobe drift: %v\n", err)
		return report.ExitBadInput
	}
	p, _, ok := a.loadPolicy(o.policyPath)
	if !ok {
		return report.ExitBadInput
	}
	o.out.policy = p
	kube := o.kubeconfig != "" || o.kubeContext != ""
	if o.wouldRefuse {
		return a.driftWouldRefuse(ctx, o, p, kube, logger)
	}
	if len(o.nsLabels) > 0 && len(o.files) == 0 {
		fmt.Fprintln(a.stderr, "sandprobe drift: --namespace-labels describes namespaces for -f files: give -f")
		return report.ExitBadInput
	}
	caches, err := o.cache.jobs()
	if err != nil {
		fmt.Fprintf(a.stderr, "sandprobe drift: %v\n", err)
		return report.ExitBadInput
	}
	sandboxSource := kube || o.docker || len(o.files) > 0 || len(o.inspect) > 0
	if !sandboxSource && len(caches) == 0 {
		if os.Getenv("KUBECONFIG") == "" && os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
			fmt.Fprintln(a.stderr, "sandprobe drift: nothing to check: give --kubeconfig, --docker, -f FILE, --inspect FILE or --cache DIR")
			return report.ExitBadInput
		}
		kube = true
	}
	return a.driftSources(ctx, o, p, driftScope{kube: kube, sandboxSource: sandboxSource, caches: caches}, logger)
}

// driftScope is what one drift run reads: a cluster, and whether any
// source of sandboxes (a cluster, Docker, files) was given, and the
// package caches.
type driftScope struct {
	kube, sandboxSource bool
	caches              []*cacheJob
}

// driftSources runs drift over the sources, offline ones first, and
// writes the report.
func (a *app) driftSources(ctx context.Context, o *driftOptions, p *policy.Policy, sc driftScope, logger *slog.Logger) int {
	kube, sandboxSource, caches := sc.kube, sc.sandboxSource, sc.caches
	// Each source gets its own engine: files, a cluster and a Docker engine
	// are different worlds, and one's network policies must not explain
	// another's pods.
	newEngine := func() *drift.Engine {
		e, err := drift.NewEngine(p)
		if err != nil {
			// The policy validated; a failure here is a bug, not bad input.
			panic(fmt.Sprintf("compile policy %s: %v", p.Metadata.Name, err))
		}
		e.SetCiliumCluster(o.ciliumName)
		return e
	}
	if _, err := drift.NewEngine(p); err != nil {
		fmt.Fprintf(a.stderr, "sandprobe drift: %v\n", err)
		return report.ExitBadInput
	}

	if len(o.files) > 0 {
		defer streamingGC()()
	}
	start := time.Now()
	// Findings are spooled: past a few MB they move to an unlinked
	// temporary file, so a drift over 100,000 pods holds an index of its
	// drifted objects, not half a million findings.
	spool := report.NewSpool("", 0)
	defer spool.Close()
	col := drift.NewSpoolingCollector(spool)
	// Offline inputs first: a bad file is bad input (exit 2) and must be
	// found before anything talks to a cluster.
	if !a.driftOffline(o, p, newEngine, col) {
		return report.ExitBadInput
	}

	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var runErr error
	if kube && runErr == nil {
		runErr = a.driftKube(ctx, o, newEngine(), col, logger)
	}
	if o.docker && runErr == nil {
		runErr = a.driftDocker(ctx, o, newEngine(), col)
	}
	if runErr != nil {
		// One line a CronJob log or a terminal shows whole.
		fmt.Fprintf(a.stderr, "sandprobe drift: %s\n", oneLineErr(runErr))
		col.AddError("drift", "list", runErr)
	}
	if runErr == nil {
		runErr = driftCaches(ctx, caches, spool, col)
	}
	if col.Scanned == 0 && runErr == nil && (sandboxSource || kube) {
		col.Note("no sandbox found: nothing carries the labels %s", drift.SelectorText(p))
	}
	col.Summary(p)
	return a.driftReport(ctx, o, p, col, spool, start, logger)
}

// driftReport writes the drift run's report from what col gathered.
func (a *app) driftReport(ctx context.Context, o *driftOptions, p *policy.Policy, col *drift.Collector, spool *report.Spool, start time.Time, logger *slog.Logger) int {
	run := report.Run{
		Policy: p.Metadata.Name, Backend: "drift",
		StartedAt: start.UTC(), Seconds: time.Since(start).Seconds(),
		Scanned: col.Scanned, DeclaredNamespaces: len(p.Spec.Namespaces), Notes: col.Notes, Spooled: spool,
	}
	stampRun(&run)
	if err := spool.Err(); err != nil {
		fmt.Fprintf(a.stderr, "sandprobe drift: %v\n", err)
		return report.ExitCouldNotRun
	}
	run.Phases = map[string]float64{"drift": run.Seconds}
	logger.Debug("drift done", "scanned", col.Scanned, "drifted", col.Drifted, "findings", spool.Len(), "spilled", spool.Spilled(), "seconds", run.Seconds)
	if err := o.out.write(ctx, a, run, o.lf.verbose); err != nil {
		fmt.Fprintf(a.stderr, "sandprobe drift: %v\n", err)
		return report.ExitCouldNotRun
	}
	return run.ExitCode()
}

// sarifRules describes the drift rules to code-scanning tools.
func sarifRules() []report.SARIFRule {
	var out []report.SARIFRule
	for _, r := range drift.Rules() {
		out = append(out, report.SARIFRule{ID: r.ID, Proves: r.Proves, Fix: r.Fix, Severity: r.Severity,
			HelpURI: "https://github.com/sandprobe/sandprobe/blob/main/docs/drift.md#rules"})
	}
	for _, c := range cache.Checks() { // drift --cache
		out = append(out, report.SARIFRule{ID: c.ID, Proves: c.Proves, Fix: c.Fix, Severity: c.Severity,
			HelpURI: "https://github.com/sandprobe/sandprobe/blob/main/docs/phases.md#the-package-cache-read-only-to-sandboxes-and-sealed"})
	}
	return out
}
