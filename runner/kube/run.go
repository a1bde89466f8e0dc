package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sourcegraph/conc"
	"github.com/sourcegraph/conc/pool"

	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// The executor: Run prepares (refuses what cannot be proven, sweeps
// leftovers, surveys the sandbox namespaces), asks the planner (plan.go)
// where every probe pod stands, fans the pods out under the run's deadline
// with the control dialling beside them, and judges the probes' verdicts
// against what the control saw.

// Run sweeps leftovers, creates one probe pod in each sandbox namespace
// (one per namespace and sandbox node with PerNode), waits for each to
// end, collects the results and deletes every pod it created.
func (b *Backend) Run(ctx context.Context, spec runner.ProbeSpec) ([]report.ProbeResult, error) {
	defer b.progress("")
	r, err := b.prepare(ctx, spec)
	if err != nil {
		return nil, err
	}
	p, err := b.plan(ctx, r)
	if err != nil {
		return nil, err
	}
	if p.nothingInScope(spec.Scope) {
		b.log().Info("watch: nothing to probe in the cycle's scope", "scope", spec.Scope.String())
		return nil, nil
	}
	// The controls dial while the probes run.
	ctl := b.startControls(ctx, r, p)
	defer ctl.cancel()
	results, errs := b.fanOut(ctx, r, p)
	ctl.wait(len(results) > 0)
	return b.judge(ctx, r, p, results, errs, ctl)
}

// prepare refuses a run that could prove nothing, learns who the runner
// is, and at once sweeps what earlier runs left and surveys what governs
// the sandbox namespaces.
func (b *Backend) prepare(ctx context.Context, spec runner.ProbeSpec) (*run, error) {
	namespaces := b.Namespaces(spec)
	if len(namespaces) == 0 {
		return nil, &runner.CouldNotRun{Target: b.Target(spec), Where: b.where(spec), Reason: runner.ReasonLaunch,
			Detail: "the policy declares no spec.namespaces: the probe runs in each sandbox namespace, so declare them (or name one with --namespace)"}
	}
	if err := b.checkRuntimeClass(spec); err != nil {
		return nil, err
	}
	if err := checkPolicySize(spec); err != nil {
		return nil, &runner.CouldNotRun{Target: b.Target(spec), Where: b.where(spec), Reason: runner.ReasonBadPolicy, Detail: err.Error()}
	}
	// Who the runner is, what is left of earlier runs, and what governs
	// the sandbox namespaces are independent: read them at once.
	me := b.whoAmI(ctx)
	b.progress("sweeping leftover probe pods, reading the sandbox namespaces' egress policies")
	var sv *survey
	prep := pool.New().WithErrors().WithMaxGoroutines(cmp.Or(b.Parallel, DefaultParallel))
	read := surveyed(namespaces, b.wantsControl(spec), b.controlNamespace())
	if !b.ImageOnly {
		prep.Go(func() error { sv = b.survey(ctx, spec.Policy, read); return nil })
	}
	for _, ns := range namespaces {
		prep.Go(func() error { return b.Sweep(ctx, ns, me) })
	}
	if err := prep.Wait(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sweep: %w", ctx.Err())
		}
		return nil, &runner.CouldNotRun{Target: b.Target(spec), Where: b.where(spec), Reason: runner.ReasonLaunch, Detail: oneLine(err)}
	}
	r := &run{id: runner.NewNonce()[:10], spec: spec, deadline: podDeadline(spec), createdBy: me, survey: sv, nodes: newNodeCache(b.API)}
	r.track = newTracker(b.progress, b.now)
	return r, nil
}

// plan reads the sandbox node pool when the plan needs it and asks the
// planner where the run's probe pods stand.
func (b *Backend) plan(ctx context.Context, r *run) (runPlan, error) {
	spec := r.spec
	in := planInput{
		namespaces: b.Namespaces(spec),
		perNode:    b.PerNode,
		scope:      spec.Scope,
		classOf:    func(ns string) string { return b.runtimeClass(r, ns) },
		maxStrays:  cmp.Or(b.MaxStrays, DefaultMaxStrays),
	}
	if needsPool(b.PerNode, spec.Scope) {
		var err error
		if in.pool, in.poolDown, err = b.sandboxNodes(ctx, spec); err != nil {
			return runPlan{}, err
		}
	}
	if r.survey != nil && r.survey.err == nil && !spec.NoNetwork {
		in.strays = r.survey.strays
	}
	p := in.plan()
	if p.outsidePool > 0 {
		b.log().Info("watch: nodes of the cycle's scope outside the sandbox pool get no probe", "scope", spec.Scope.String(), "outside", p.outsidePool)
	}
	return p, nil
}

// outcome is what one probe pod came to.
type outcome struct {
	res report.ProbeResult
	err error
}

// controlRun is a control pod of the run, dialling beside the probes.
type controlRun struct {
	pl  placement
	out outcome
}

// controls are the run's control pods: none when the run wants no
// control; one the scheduler places when no probe is pinned to a node;
// else one pinned to each node a probe is pinned to (a control proves a
// deny only for the node it dialled from: a node whose own egress is cut
// would otherwise "prove" its probe's denies with another node's
// answers), and one unpinned beside them for the probes that are not.
type controls struct {
	wanted  bool
	runs    []*controlRun
	running conc.WaitGroup
	cancel  context.CancelFunc
}

// controlPlacements are where the run's controls stand (controls).
func controlPlacements(ns string, p runPlan) []placement {
	var out []placement
	unpinned := len(p.placements) == 0
	seen := map[string]bool{}
	for _, pl := range p.placements {
		switch {
		case pl.node == "":
			unpinned = true
		case !seen[pl.node]:
			seen[pl.node] = true
			out = append(out, placement{ns: ns, control: true, node: pl.node})
		}
	}
	if unpinned {
		out = append(out, placement{ns: ns, control: true})
	}
	return out
}

// startControls starts the run's control pods when the run wants them,
// as many at a time as the run starts probes.
func (b *Backend) startControls(ctx context.Context, r *run, p runPlan) *controls {
	ctlCtx, cancel := context.WithCancel(ctx)
	c := &controls{wanted: b.wantsControl(r.spec), cancel: cancel}
	if !c.wanted {
		return c
	}
	pls := controlPlacements(b.controlNamespace(), p)
	lanes := make(chan struct{}, b.parallel(r.spec, len(pls)))
	for _, pl := range pls {
		cr := &controlRun{pl: pl}
		c.runs = append(c.runs, cr)
		c.running.Go(func() {
			select {
			case lanes <- struct{}{}:
			case <-ctlCtx.Done():
				cr.out = outcome{err: ctlCtx.Err()}
				return
			}
			defer func() { <-lanes }()
			res, err := b.probeOne(ctlCtx, r, pl)
			cr.out = outcome{res, err}
		})
	}
	return c
}

// wait waits for the controls to end. When no probe reported, what they
// saw speaks for nothing: they are cut short.
func (c *controls) wait(probesReported bool) {
	if !probesReported {
		c.cancel()
	}
	c.running.Wait()
}

// fanOut runs every placement's probe pod, at most parallel at a time.
// The fan-out as a whole has a deadline scaled with its size: a pod whose
// turn comes after it, or that it cuts short, is a could-not-run naming
// its node, never an omission. The errors start with the plan's nodes down.
func (b *Backend) fanOut(ctx context.Context, r *run, p runPlan) ([]report.ProbeResult, []error) {
	pods := len(p.placements)
	parallel := b.parallel(r.spec, pods)
	runDeadline := b.runDeadline(r.spec, pods, parallel, r.deadline)
	b.log().Info("probe fan-out", "pods", pods, "parallel", parallel, "runDeadline", runDeadline.String(), "nodesDown", p.nodesDown)
	fanCtx, fanCancel := context.WithTimeoutCause(ctx, runDeadline, errRunDeadline)
	defer fanCancel()
	fan := pool.NewWithResults[outcome]().WithMaxGoroutines(parallel)
	for _, pl := range p.placements {
		fan.Go(func() outcome {
			if fanCtx.Err() != nil && ctx.Err() == nil {
				return outcome{err: &runner.CouldNotRun{Target: pl.target(pl.node), Where: pl.location(pl.node), Reason: runner.ReasonDeadline,
					Detail: fmt.Sprintf("not probed: the run's deadline of %s (%d probe pods, %d at a time) passed before its turn", runDeadline, pods, parallel)}}
			}
			res, err := b.probeOne(fanCtx, r, pl)
			if err != nil && ctx.Err() == nil && errors.Is(context.Cause(fanCtx), errRunDeadline) {
				err = cutShort(err, pl, runDeadline, pods, parallel)
			}
			return outcome{res, err}
		})
	}
	var results []report.ProbeResult
	errs := slices.Clone(p.down)
	for _, o := range fan.Wait() {
		if o.err != nil {
			errs = append(errs, o.err)
			continue
		}
		results = append(results, o.res)
	}
	return results, errs
}

// judge counts every deny verdict only where the control on the probe's
// node got an answer, adds what each control saw as a result of its own
// (when any probe reported: else it speaks for nothing), and names the
// strays past the bound in their namespace's first result.
func (b *Backend) judge(ctx context.Context, r *run, p runPlan, results []report.ProbeResult, errs []error, ctl *controls) ([]report.ProbeResult, error) {
	var (
		judged  judgedControls
		summary []report.ProbeResult
	)
	if ctl.wanted && len(results) > 0 {
		for _, cr := range ctl.runs {
			c := b.control(r, cr.pl, cr.out.res, cr.out.err, &summary)
			judged = append(judged, judgedControl{pl: cr.pl, c: c})
			if cr.out.err != nil {
				errs = append(errs, cr.out.err)
			}
		}
	}
	if !r.spec.NoNetwork {
		b.followUps(ctx, r, p, results, judged)
		for i := range results {
			runner.ApplyControl(&results[i], judged.of(results[i].Where))
		}
	}
	if len(results) > 0 {
		results = append(results, summary...)
	}
	slices.SortFunc(results, func(a, b report.ProbeResult) int { return cmp.Compare(a.Target, b.Target) })
	for ns, f := range p.unprobed {
		if i := slices.IndexFunc(results, func(res report.ProbeResult) bool { return res.Where.Namespace == ns && !res.Where.Control }); i >= 0 {
			results[i].Findings = append(results[i].Findings, f)
		}
	}
	return results, errors.Join(errs...)
}

// judgedControl is one control as the probes are judged against it.
type judgedControl struct {
	pl placement
	c  *runner.Control
}

type judgedControls []judgedControl

// of is the control a probe reporting from where is judged against: the
// one pinned to its node, else the unpinned one (a probe the scheduler
// placed stands where a sandbox of its namespace may; the run was not
// asked to prove it node by node). A pinned probe whose node's control
// did not report is judged against that failed control: inconclusive,
// never another node's answers.
func (cs judgedControls) of(where report.Location) *runner.Control {
	var unpinned *runner.Control
	for _, jc := range cs {
		if jc.pl.node != "" && jc.pl.node == where.Node {
			return jc.c
		}
		if jc.pl.node == "" {
			unpinned = jc.c
		}
	}
	return unpinned
}

// followUps has each probe whose must-fail names its resolver stopped
// dial, in a second pod where the first stood, the addresses the control
// resolved for them (runner.DNSOnlyFollowUp): a DNS-only block is no
// network deny. Only such probes get one; a healthy run none.
func (b *Backend) followUps(ctx context.Context, r *run, p runPlan, results []report.ProbeResult, controls judgedControls) {
	fan := pool.New().WithMaxGoroutines(b.parallel(r.spec, len(results)))
	for i := range results {
		control := controls.of(results[i].Where)
		fu, ok, err := runner.DNSOnlyFollowUp(r.spec, results[i:i+1], control)
		pl, found := placedAt(p, results[i].Where)
		if err != nil || !ok || !found {
			continue // the DNS-only verdicts stay inconclusive
		}
		fr := &run{id: runner.NewNonce()[:10], spec: fu.Spec, deadline: r.deadline, createdBy: r.createdBy, track: r.track, survey: r.survey, nodes: r.nodes}
		fan.Go(func() {
			again, err := b.probeOne(ctx, fr, pl)
			runner.MergeFollowUp(&results[i], again, err, fu, control.Vantage)
		})
	}
	fan.Wait()
}

// placedAt is the placement whose probe reported from where: its
// namespace and stray, and its node when it was pinned to one.
func placedAt(p runPlan, where report.Location) (placement, bool) {
	for _, pl := range p.placements {
		l := pl.location(where.Node)
		if l.Namespace == where.Namespace && l.Stray == where.Stray && !pl.control && (pl.node == "" || pl.node == where.Node) {
			return pl, true
		}
	}
	return placement{}, false
}

// errRunDeadline is the cause of the fan-out's context when its run
// deadline passed (rather than the caller cancelling).
var errRunDeadline = errors.New("the run's deadline passed")

// cutShort names a probe the run deadline ended: what the pod itself said
// stays when it already was a could-not-run of another kind (a pod that
// never scheduled is still unschedulable), else it becomes a deadline
// could-not-run naming the pod's node.
func cutShort(err error, pl placement, runDeadline time.Duration, pods, parallel int) error {
	var cnr *runner.CouldNotRun
	where := pl.location(pl.node)
	target := where.String()
	if errors.As(err, &cnr) {
		if cnr.Reason != runner.ReasonDeadline {
			return err
		}
		target, where = cnr.Target, cnr.Where // it may know the node the scheduler picked
	}
	return &runner.CouldNotRun{Target: target, Where: where, Reason: runner.ReasonDeadline,
		Detail: fmt.Sprintf("cut short by the run's deadline of %s (%d probe pods, %d at a time): %s", runDeadline, pods, parallel, oneLine(err))}
}

// checkRuntimeClass refuses a --runtime-class the policy does not declare:
// the probe would prove nothing about the sandboxes.
func (b *Backend) checkRuntimeClass(spec runner.ProbeSpec) error {
	classes := spec.Policy.Spec.Runtime.ClassNames
	if b.RuntimeClass == "" || slices.Contains(classes, b.RuntimeClass) {
		return nil
	}
	return &runner.CouldNotRun{Target: b.Target(spec), Where: b.where(spec), Reason: runner.ReasonLaunch,
		Detail: fmt.Sprintf("runtime class %q is not one of the policy's spec.runtime.classNames %v", b.RuntimeClass, classes)}
}

// checkPolicySize refuses a policy too large to travel in an annotation.
func checkPolicySize(spec runner.ProbeSpec) error {
	if n := len(spec.PolicyBytes); n > render.MaxInlinePolicy {
		return fmt.Errorf("the policy file is %d bytes; a probe pod carries it in an annotation, which holds at most %d", n, render.MaxInlinePolicy)
	}
	return nil
}

// whoAmI asks the API server who the runner is, for AnnotationCreatedBy.
// Without an answer the pods carry no such annotation: they still run,
// but the runner-scope admission policy will not let this identity delete
// them (the kubelet's activeDeadlineSeconds still ends them).
func (b *Backend) whoAmI(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	user, err := b.API.WhoAmI(ctx)
	if err != nil {
		b.log().Warn("cannot learn the runner's identity (SelfSubjectReview); probe pods go without "+AnnotationCreatedBy, "err", oneLine(err))
		return ""
	}
	return user
}

// control turns the control pod's outcome into what the probes' denies are
// judged against, and adds the control's summary as a result of its own.
func (b *Backend) control(r *run, pl placement, res report.ProbeResult, err error, results *[]report.ProbeResult) *runner.Control {
	vantage := "namespace/" + pl.ns
	if pl.node != "" {
		vantage += " on node " + pl.node
	}
	if err != nil {
		return &runner.Control{Vantage: vantage, Err: errors.New(oneLine(err))}
	}
	c := runner.NewControl(vantage, res)
	summary := res
	summary.Findings = []report.Finding{b.controlSummary(r, res.Target, pl.ns, res, r.controlPod.Load())}
	*results = append(*results, summary)
	return c
}
