// Package runner puts the probe where a sandbox runs and gets its verdict
// back: a throwaway local sandbox (runner/local), a Docker container
// (runner/docker) or a Kubernetes pod (runner/kube). Every backend fails
// closed: a probe that did not report, reported garbage or echoed the wrong
// nonce is a could-not-run error with a named reason, never a pass.
package runner

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// ProbeSpec is what every backend needs to launch one probe.
type ProbeSpec struct {
	Policy      *policy.Policy
	PolicyBytes []byte // the policy file as written, handed to the probe
	Nonce       string
	// Deadline bounds the whole launch-to-result cycle.
	Deadline time.Duration
	// NoNetwork leaves out the checks that send traffic.
	NoNetwork bool
	// Only narrows the probe to some checks (its --only): a follow-up
	// round's (DNSOnlyFollowUp). Empty is every check the policy asks for.
	Only string
	// Scope, when set, narrows the cycle to some namespaces or nodes
	// (serve --watch, after a change); nil is everything. A backend that
	// cannot narrow probes everything, which is never less true.
	Scope *Scope
	// SkipAfterProbe leaves out the backend's phase after the probe (kube:
	// drift): serve --watch shows a targeted cycle's probe verdict first
	// and runs it on its own afterwards (Cycle.AfterProbe).
	SkipAfterProbe bool
}

// Backend runs one probe: it launches it, waits for a terminal state,
// collects the result and cleans up, whatever happened.
type Backend interface {
	Run(ctx context.Context, spec ProbeSpec) ([]report.ProbeResult, error)
}

// Reasons a probe could not run. They name the failure in findings, logs and
// JUnit errors so an operator knows which of them happened.
const (
	ReasonCrashed          = "crashed"
	ReasonDeadline         = "deadline-exceeded"
	ReasonGarbled          = "garbled-result"
	ReasonTruncated        = "truncated-result"
	ReasonWrongNonce       = "wrong-nonce"
	ReasonNoResult         = "no-result"
	ReasonBadPolicy        = "policy-rejected"
	ReasonLaunch           = "launch-failed"
	ReasonAdmission        = "admission-refused"
	ReasonUnschedulable    = "unschedulable"
	ReasonImagePull        = "image-pull-failed"
	ReasonImageMissing     = "image-missing"
	ReasonOOM              = "oom-killed"
	ReasonLogsUnavailable  = "logs-unavailable"
	ReasonInconsistentExit = "inconsistent-exit"
	// A node of the sandbox pool that could take no probe pod this cycle.
	ReasonNodeCordoned = "node-cordoned"
	ReasonNodeNotReady = "node-not-ready"
)

// Check is a finding the runner makes itself, not the probe: it says the
// probe could not run or report, or (kube) was not placed like the
// sandboxes it stands for. Its verdicts are never passes for a sandbox.
type Check struct {
	ID, Proves string
	Severity   report.Severity
}

// Checks lists the runner's own findings; runner/kube adds its parity and
// control checks.
func Checks() []Check {
	return []Check{
		{report.CheckProbeRun, "the probe was launched, ran and reported a complete result echoing this run's nonce (an error otherwise, naming the reason: the node was cordoned, the deadline passed, the image could not be pulled, …)", report.Medium},
		{report.CheckTruncated, "the probe's whole result fitted its termination message (an error marks a result cut short: the rest is in the pod log)", report.Medium},
	}
}

// CouldNotRun is a probe that did not produce a trustworthy result.
type CouldNotRun struct {
	Target string // "local/sandbox", "namespace/sandboxes/node/worker-1"
	// Where is the typed location behind Target, when the backend has one
	// (the Kubernetes backend's probe locations).
	Where  report.Location
	Reason string // one of the Reason constants
	Detail string
	// Fix, when the cause is known, replaces the reason's general fix.
	Fix string
}

func (e *CouldNotRun) Error() string {
	if e.Target == "" {
		return fmt.Sprintf("probe %s: %s", e.Reason, e.Detail)
	}
	return fmt.Sprintf("probe on %s %s: %s", e.Target, e.Reason, e.Detail)
}

// Finding turns the failure into the error finding that reports carry.
func (e *CouldNotRun) Finding() report.Finding {
	return report.Finding{
		Check: report.CheckProbeRun, Target: e.Target, Where: e.Where, Subject: e.Reason, Status: report.Error,
		Expected: "a complete probe result echoing this run's nonce",
		Actual:   e.Detail,
		Fix:      e.fix(),
	}
}

func (e *CouldNotRun) fix() string {
	if e.Fix != "" {
		return e.Fix
	}
	return fixFor(e.Reason)
}

func fixFor(reason string) string {
	switch reason {
	case ReasonDeadline:
		return "find what blocks the probe (a hanging check, a pod stuck pending) or raise spec.probe.deadline (on a cluster's node pool: spec.probe.runDeadline, or spec.probe.parallel)"
	case ReasonNodeCordoned:
		return "uncordon the node once its maintenance is done, or take it out of the sandbox pool (its labels) while it is drained"
	case ReasonNodeNotReady:
		return "bring the node's kubelet back to Ready, or drain it and take it out of the sandbox pool"
	case ReasonWrongNonce:
		return "the result is stale or replayed: make sure nothing caches or rewrites probe output"
	case ReasonGarbled, ReasonTruncated:
		return "make sure the probe's stdout carries only its JSON result (no wrapper script printing to stdout)"
	case ReasonAdmission:
		return "an admission policy refused the probe pod: allow it, since it looks exactly like a sandbox"
	case ReasonUnschedulable:
		return "no node of the sandbox pool can take the probe pod: check spec.placement and the pool's capacity"
	case ReasonImagePull:
		return "make the probe image (and the sandbox image) pullable from the sandbox nodes"
	case ReasonImageMissing:
		return "build or pull the image on this Docker engine first (verify-image never pulls), or correct --image"
	case ReasonOOM:
		return "the probe ran out of memory under the sandbox limits: raise spec.resources.limits.memory"
	}
	return "read the probe's stderr in the evidence and rerun with --log-format json for details"
}

// NewNonce returns a random per-run nonce.
func NewNonce() string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // the kernel's RNG does not fail
	}
	return hex.EncodeToString(b)
}

// ParseResult decodes a probe's output strictly and checks it is complete and
// belongs to this run. The target names the probe location in errors.
func ParseResult(target string, out []byte, nonce string) (report.ProbeResult, error) {
	var res report.ProbeResult
	trimmed := bytes.TrimSpace(out)
	if len(trimmed) == 0 {
		return res, &CouldNotRun{Target: target, Reason: ReasonNoResult, Detail: "the probe printed nothing"}
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		reason := ReasonGarbled
		if errors.Is(err, io.ErrUnexpectedEOF) {
			reason = ReasonTruncated
		}
		return res, &CouldNotRun{Target: target, Reason: reason, Detail: fmt.Sprintf("cannot decode the probe's result: %v (first bytes: %q)", err, clip(trimmed, 80))}
	}
	if dec.More() {
		return res, &CouldNotRun{Target: target, Reason: ReasonGarbled, Detail: "extra output after the probe's JSON result"}
	}
	if res.Schema != report.ProbeResultSchema {
		return res, &CouldNotRun{Target: target, Reason: ReasonGarbled, Detail: fmt.Sprintf("result schema %q, want %q", res.Schema, report.ProbeResultSchema)}
	}
	if res.Nonce != nonce {
		return res, &CouldNotRun{Target: target, Reason: ReasonWrongNonce, Detail: fmt.Sprintf("the probe echoed nonce %q, this run's is %q: a stale or replayed result", res.Nonce, nonce)}
	}
	if len(res.Findings) == 0 && res.OmittedPasses == 0 {
		return res, &CouldNotRun{Target: target, Reason: ReasonNoResult, Detail: "the result holds no findings"}
	}
	for i, f := range res.Findings {
		if f.Check == "" || !validStatus(f.Status) {
			return res, &CouldNotRun{Target: target, Reason: ReasonGarbled, Detail: fmt.Sprintf("finding %d has no check or an unknown status %q", i, f.Status)}
		}
	}
	res.StampRoles()
	for i, f := range res.Findings {
		// Every egress check of the probe has a role; one without is from
		// a probe older than this runner, whose denies it cannot judge.
		if f.Role == "" && report.Area(f.Check) == "egress" {
			return res, &CouldNotRun{Target: target, Reason: ReasonGarbled, Detail: fmt.Sprintf("finding %d (%s) declares no role: a probe older than this runner, whose denies it cannot judge", i, f.Check)}
		}
	}
	return res, nil
}

func validStatus(s report.Status) bool {
	switch s {
	case report.Pass, report.Fail, report.Skip, report.Inconclusive, report.Error:
		return true
	}
	return false
}

func clip(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// CheckExit cross-checks a probe's exit code with its findings: a probe that
// says "all good" with failures inside (or the reverse) is not trusted.
func CheckExit(target string, code int, res report.ProbeResult) error {
	// A result cut to fit the termination message ends with the encoder's
	// error marker, which the probe's exit code never counted.
	verdicts := slices.DeleteFunc(slices.Clone(res.Findings), func(f report.Finding) bool { return f.Check == report.CheckTruncated })
	c := report.Count(verdicts)
	want := report.ExitOK
	switch {
	case c.Error > 0:
		want = report.ExitCouldNotRun
	case c.Fail > 0 || c.Inconclusive > 0:
		want = report.ExitNonConformant
	}
	if code != want {
		return &CouldNotRun{Target: target, Reason: ReasonInconsistentExit, Detail: fmt.Sprintf("the probe exited %d but its findings call for %d", code, want)}
	}
	return nil
}

// Problems flattens a backend error into its could-not-run parts; any other
// error becomes one could-not-run with reason launch-failed.
func Problems(target string, err error) []*CouldNotRun {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*CouldNotRun
		for _, e := range j.Unwrap() {
			out = append(out, Problems(target, e)...)
		}
		return out
	}
	var cnr *CouldNotRun
	if errors.As(err, &cnr) {
		return []*CouldNotRun{cnr}
	}
	return []*CouldNotRun{{Target: target, Reason: ReasonLaunch, Detail: err.Error()}}
}

// Findings turns probe results into the run's findings: each gets its target
// and, where a compact result dropped it, the catalogue's fix.
func Findings(target string, res report.ProbeResult, fixFor func(string) string) []report.Finding {
	out := make([]report.Finding, 0, len(res.Findings))
	for _, f := range res.Findings {
		f.Target, f.Where = target, res.Where
		if f.Fix == "" && (f.Status == report.Fail || f.Status == report.Error) && fixFor != nil {
			f.Fix = fixFor(f.Check)
		}
		out = append(out, f)
	}
	return out
}
