package report

import "github.com/sandprobe/sandprobe/result"

// The result model lives in package result (standard library only, so the
// probe links it without the writers' libraries); these names keep every
// caller of report.Finding & co. compiling unchanged. A field added to a
// model type is added in result.

type (
	// Status is result.Status.
	Status = result.Status
	// Finding is result.Finding.
	Finding = result.Finding
	// RuntimeEvidence is result.RuntimeEvidence.
	RuntimeEvidence = result.RuntimeEvidence
	// ProbeResult is result.ProbeResult.
	ProbeResult = result.ProbeResult
	// Counts is result.Counts.
	Counts = result.Counts
	// Attempt is result.Attempt.
	Attempt = result.Attempt
	// AddressAttempt is result.AddressAttempt.
	AddressAttempt = result.AddressAttempt
	// Severity is result.Severity.
	Severity = result.Severity
	// Role is result.Role.
	Role = result.Role
	// Judge is result.Judge.
	Judge = result.Judge
	// Location is result.Location.
	Location = result.Location
)

// Severities, worst first.
const (
	Critical = result.Critical
	High     = result.High
	Medium   = result.Medium
	Low      = result.Low
)

// Roles of checks (result.Role).
const (
	RoleAllowance   = result.RoleAllowance
	RoleMustFail    = result.RoleMustFail
	RoleMetadata    = result.RoleMetadata
	RoleProxyBypass = result.RoleProxyBypass
	RoleFronting    = result.RoleFronting
	RoleDNSBypass   = result.RoleDNSBypass
	RoleDNSChannel  = result.RoleDNSChannel
)

// Statuses.
const (
	Pass         = result.Pass
	Fail         = result.Fail
	Skip         = result.Skip
	Inconclusive = result.Inconclusive
	Error        = result.Error
)

// Exit codes and the probe result's constants.
const (
	ExitOK             = result.ExitOK
	ExitNonConformant  = result.ExitNonConformant
	ExitBadInput       = result.ExitBadInput
	ExitCouldNotRun    = result.ExitCouldNotRun
	ProbeResultSchema  = result.ProbeResultSchema
	TerminationMsgSize = result.TerminationMsgSize
	GzipPrefix         = result.GzipPrefix
	CheckTruncated     = result.CheckTruncated
	MaxAffects         = result.MaxAffects
)

// Values of Finding.Deny: whether a control vantage proved a deny.
const (
	DenyProven   = result.DenyProven
	DenyUnproven = result.DenyUnproven
)

// Who stopped a network attempt (Attempt.StoppedBy).
const (
	StoppedByNetwork  = result.StoppedByNetwork
	StoppedByProxy    = result.StoppedByProxy
	StoppedByResolver = result.StoppedByResolver
	StoppedByUpstream = result.StoppedByUpstream
)

// SignalClosedAtHello is result.SignalClosedAtHello.
const SignalClosedAtHello = result.SignalClosedAtHello

// Count tallies a set of findings.
func Count(fs []Finding) Counts { return result.Count(fs) }

// ExpectedActual is the one-line "expected X, actual Y" of a finding.
func ExpectedActual(f Finding) string { return result.ExpectedActual(f) }

// Targets lists the distinct targets in order of first appearance.
func Targets(fs []Finding) []string { return result.Targets(fs) }

// SortFindings orders findings by target, then check, then subject.
func SortFindings(fs []Finding) { result.SortFindings(fs) }

// Area is the first dotted component of a check ID.
func Area(check string) string { return result.Area(check) }

// DecodeTerminationMessage returns the JSON document a termination message holds.
func DecodeTerminationMessage(msg string) (doc []byte, compressed bool, err error) {
	return result.DecodeTerminationMessage(msg)
}
