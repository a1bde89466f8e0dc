package kube

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/render"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// collect turns an ended pod into a trusted result or the reason there is
// none. The result comes from the log; when the log cannot be read (no
// kubelet connection, a node without an address), from the termination
// message, which holds the compact form of the same result.
func (a *attempt) collect(p, admitted *corev1.Pod) (report.ProbeResult, error) {
	var res report.ProbeResult
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), collectTimeout)
	defer cancel()
	if a.node == "" && p.Spec.NodeName != "" {
		a.place(p.Spec.NodeName)
	}
	if err := a.podProblem(p); err != nil {
		return res, err
	}
	st := containerStatus(p.Status.ContainerStatuses, render.ProbeContainer)
	if st == nil || st.State.Terminated == nil {
		return res, a.cannot(runner.ReasonLaunch, "pod %s/%s %s without its probe container having run: %s", a.ns, a.name, p.Status.Phase, both(p.Status.Reason, p.Status.Message))
	}
	term := st.State.Terminated
	a.times.containerStarted = term.StartedAt.Time
	switch term.Reason {
	case "OOMKilled":
		return res, a.cannot(runner.ReasonOOM, "the probe container was killed for exceeding its memory limit %s (exit %d)", memoryLimit(p), term.ExitCode)
	case "ContainerCannotRun", "StartError":
		return res, a.cannot(runner.ReasonLaunch, "the runtime could not start the probe container: %s: %s%s", term.Reason, term.Message, missingProbeBinary(term.Message))
	}

	out, stderr, logErr := a.logs(ctx)
	if logErr != nil {
		a.b.log().Debug("probe log unavailable; using the termination message", "pod", a.ns+"/"+a.name, "err", logErr)
		// With TerminationMessageFallbackToLogsOnError a probe that died
		// before writing its result leaves the tail of its output here.
		if !looksLikeResult(term.Message) {
			stderr = term.Message
		}
	}
	if err := runner.ExitProblem(a.target, int(term.ExitCode), stderr); err != nil {
		return res, a.located(err)
	}
	var doc []byte
	switch {
	case out.overflow:
		return res, a.cannot(runner.ReasonGarbled, "the probe printed more than %d bytes", maxStdout)
	case len(out.docs) > 1:
		return res, a.cannot(runner.ReasonGarbled, "the probe's log holds %d JSON documents, want exactly one result", len(out.docs))
	case len(out.docs) == 1:
		doc = out.docs[0]
	case strings.TrimSpace(term.Message) != "":
		var err error
		if doc, _, err = report.DecodeTerminationMessage(term.Message); err != nil {
			return res, a.cannot(runner.ReasonGarbled, "the termination message of pod %s/%s: %v", a.ns, a.name, err)
		}
	case logErr != nil:
		return res, a.cannot(runner.ReasonLogsUnavailable, "cannot read the log of pod %s/%s (%s) and it left no termination message", a.ns, a.name, oneLine(logErr))
	case strings.TrimSpace(stderr) != "":
		// Something printed, but no result: a wrapper's chatter, a probe
		// that never got to its verdict.
		return res, a.cannot(runner.ReasonGarbled, "the probe's log holds no JSON result%s", runner.StderrTail(stderr))
	}
	res, err := a.parse(doc, int(term.ExitCode))
	if err != nil {
		return res, err
	}
	if a.pl.control {
		if res.Vantage != probes.VantageControl {
			return res, a.cannot(runner.ReasonGarbled, "the control pod %s/%s reported a probe's result, not a control's", a.ns, a.name)
		}
	} else {
		if res.Vantage != "" {
			return res, a.cannot(runner.ReasonGarbled, "probe pod %s/%s reported a %s result", a.ns, a.name, res.Vantage)
		}
		// A stray's probe checks egress only: its runtime is drift's to judge.
		if a.stray == nil {
			a.kernelCheck(ctx, p, &res)
		}
		admitted.Spec.NodeName = p.Spec.NodeName
		a.parity(ctx, admitted, &res)
	}
	// The namespace is half of where the probe stood: the same node can
	// host sandbox namespaces under different policies.
	for i := range res.Findings {
		res.Findings[i].Namespace = a.ns
	}
	return res, nil
}

// parse reads the probe's result and checks its exit code; the result and
// every could-not-run say where the probe stood.
func (a *attempt) parse(doc []byte, exitCode int) (report.ProbeResult, error) {
	res, err := runner.ParseResult(a.target, doc, a.r.spec.Nonce)
	if err != nil {
		return res, a.located(err)
	}
	if err := runner.CheckExit(a.target, exitCode, res); err != nil {
		return res, a.located(err)
	}
	res.Target, res.Where = a.target, a.where
	return res, nil
}

// podProblem names a pod that ended without its probe having run to the
// end: the kubelet's deadline, an eviction, a failed init container.
func (a *attempt) podProblem(p *corev1.Pod) error {
	switch p.Status.Reason {
	case "DeadlineExceeded":
		return a.cannot(runner.ReasonDeadline, "the kubelet killed probe pod %s/%s at its activeDeadlineSeconds (%s): %s", a.ns, a.name, a.r.deadline, p.Status.Message)
	case "Evicted":
		return a.cannot(runner.ReasonCrashed, "the kubelet evicted probe pod %s/%s: %s", a.ns, a.name, p.Status.Message)
	}
	for _, st := range p.Status.InitContainerStatuses {
		t := st.State.Terminated
		if t == nil || t.ExitCode == 0 {
			continue
		}
		if t.Reason == "OOMKilled" {
			return a.cannot(runner.ReasonOOM, "init container %s was killed for exceeding its memory limit %s", st.Name, memoryLimit(p))
		}
		return a.cannot(runner.ReasonCrashed, "init container %s (copies the probe into the sandbox image) exited %d: %s%s", st.Name, t.ExitCode, both(t.Reason, t.Message), missingProbeBinary(t.Message))
	}
	return nil
}

// probeOutput is the probe's stdout as recovered from the log.
type probeOutput struct {
	docs     [][]byte // lines that hold a JSON document: the result
	overflow bool
}

// logs reads the probe container's log. The API interleaves stdout and
// stderr, so lines that start with "{" are the result (the probe prints
// it as one line) and the rest is stderr: log lines, a panic.
func (a *attempt) logs(ctx context.Context) (probeOutput, string, error) {
	var out probeOutput
	limit := int64(maxLog)
	rc, err := a.r.podLog(ctx, a.ns, func() (io.ReadCloser, error) {
		return a.b.API.PodLogs(ctx, a.ns, a.name, &corev1.PodLogOptions{Container: render.ProbeContainer, LimitBytes: &limit})
	})
	if err != nil {
		return out, "", fmt.Errorf("read the log of pod %s/%s: %w", a.ns, a.name, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxLog+1))
	if err != nil {
		return out, "", fmt.Errorf("read the log of pod %s/%s: %w", a.ns, a.name, err)
	}
	var stderr strings.Builder
	stdoutBytes := 0
	for line := range bytes.Lines(data) {
		t := bytes.TrimSpace(line)
		if len(t) == 0 {
			continue
		}
		if t[0] == '{' {
			out.docs = append(out.docs, t)
			stdoutBytes += len(t)
			continue
		}
		stderr.Write(line)
	}
	out.overflow = stdoutBytes > maxStdout || len(data) > maxLog
	return out, stderr.String(), nil
}

// kernelCheck adds the runner's half of runtime.isolation: the node's
// kernel from outside against the probe's from inside.
func (a *attempt) kernelCheck(ctx context.Context, p *corev1.Pod, res *report.ProbeResult) {
	class := ""
	if p.Spec.RuntimeClassName != nil {
		class = *p.Spec.RuntimeClassName
	}
	pol := a.r.spec.Policy
	node, err := a.r.nodes.get(ctx, p.Spec.NodeName)
	if err != nil {
		runner.CrossCheckKernel(pol, class, "", fmt.Errorf("cannot read node %s: %s", p.Spec.NodeName, oneLine(err)), res)
		return
	}
	runner.CrossCheckKernel(pol, class, node.Status.NodeInfo.KernelVersion, nil, res)
}

func containerStatus(ss []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range ss {
		if ss[i].Name == name {
			return &ss[i]
		}
	}
	return nil
}

func memoryLimit(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
			return q.String()
		}
	}
	return "(none set)"
}

// looksLikeResult tells a result in a termination message (compact JSON,
// or the whole result compressed) from the tail of a crashed probe's output.
func looksLikeResult(s string) bool {
	s = strings.TrimSpace(s)
	return strings.HasPrefix(s, "{") || strings.HasPrefix(s, report.GzipPrefix)
}

func metaOf(o runtime.Object) (metav1.Object, error) { return meta.Accessor(o) }

// oneLine flattens an error onto one line for details and logs.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// both joins two optional texts.
func both(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + ": " + b
}

// missingProbeBinary explains a start failure on a probe image that holds
// no /sandprobe-probe (one built before the probe had its own binary).
func missingProbeBinary(msg string) string {
	if strings.Contains(msg, render.ImageProbeBinary) && strings.Contains(msg, "no such file") {
		return " (the probe image holds no " + render.ImageProbeBinary + ": build it with both static binaries, /sandprobe and /sandprobe-probe, as make build makes them; docs/probe.md)"
	}
	return ""
}
