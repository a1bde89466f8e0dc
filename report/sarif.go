package report

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/owenrumney/go-sarif/v3/pkg/report/v210/sarif"
)

// SARIFRule describes one rule to code-scanning tools.
type SARIFRule struct {
	ID      string // "drift.pod.privileged"
	Proves  string // what a clean result proves: the rule's short description
	Fix     string // the usual fix: the rule's help
	HelpURI string
}

// SARIF writes a run as SARIF 2.1.0, the format code-scanning tools
// (GitHub code scanning, GitLab, Sonar, IDE viewers) read, so a pull request
// that adds a privileged sandbox pod gets an annotation on the line. Failing
// findings are results of level error, inconclusive ones warnings; a finding
// that could not be checked is a tool execution notification and marks the
// invocation unsuccessful (it is not a result about the code). Passing and
// skipped findings are left out: SARIF lists problems.
//
// A finding with File and Line (drift -f) points at that line. Findings on
// the same field of the same object (a NetworkPolicy that opens the world to
// ten pods) are one result naming every sandbox it affects.
type SARIF struct {
	Rules []SARIFRule
	// BaseDir is the directory file paths are written relative to (the
	// repository root, normally the working directory), as code-scanning
	// uploads expect. A file outside it is written as a file:// URI.
	BaseDir string
}

// sarifGroup is one result: a finding and every target it was reported for.
type sarifGroup struct {
	f       Finding
	targets []string
	seen    map[string]bool // targets, so a group of 100,000 pods stays linear
}

func (s SARIF) Write(w io.Writer, run Run) error {
	rep := sarif.NewReport()
	r := sarif.NewRunWithInformationURI("sandprobe", "https://github.com/sandprobe/sandprobe")
	r.Tool.Driver.WithVersion(orDash(run.Version))
	known := map[string]bool{}
	for _, rule := range s.Rules {
		s.addRule(r, rule)
		known[rule.ID] = true
	}

	inv := sarif.NewInvocation().WithExecutionSuccessful(run.ExitCode() != ExitCouldNotRun)
	var groups []*sarifGroup
	byKey := map[string]*sarifGroup{}
	// Read through the FindingSet: a drift over 100,000 pods spools its
	// findings; the groups (one per result) are what stays in memory.
	err := run.Set().Each(func(fp *Finding) error {
		f := *fp
		switch f.Status {
		case Fail, Inconclusive:
		case Pass, Skip:
			return nil
		default:
			// Could not check: about the run, not about a line of code.
			inv.AddToolExecutionNotification(sarif.NewNotification().
				WithLevel(sarif.LevelError).
				WithMessage(sarif.NewTextMessage(fmt.Sprintf("%s %s: could not check: %s", f.Name(), f.Target, f.Actual))))
			return nil
		}
		key := strings.Join([]string{f.Check, string(f.Status), f.File, fmt.Sprint(f.Line), f.Namespace, f.Subject, f.Expected, f.Actual}, "\x00")
		g := byKey[key]
		if g == nil {
			g = &sarifGroup{f: f, seen: map[string]bool{}}
			byKey[key] = g
			groups = append(groups, g)
		}
		if f.Target != "" && !g.seen[f.Target] {
			g.seen[f.Target] = true
			g.targets = append(g.targets, f.Target)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, g := range groups {
		if !known[g.f.Check] {
			s.addRule(r, SARIFRule{ID: g.f.Check})
			known[g.f.Check] = true
		}
		s.addResult(r, g)
	}
	r.AddInvocation(inv)
	for _, n := range run.Notes {
		inv.AddToolExecutionNotification(sarif.NewNotification().WithLevel(sarif.LevelNote).WithMessage(sarif.NewTextMessage(n)))
	}
	rep.AddRun(r)
	if err := rep.PrettyWrite(w); err != nil {
		return err
	}
	_, err = io.WriteString(w, "\n")
	return err
}

func (s SARIF) addRule(r *sarif.Run, rule SARIFRule) {
	d := r.AddRule(rule.ID).
		WithDefaultConfiguration(sarif.NewReportingConfiguration().WithLevel(sarif.LevelError)).
		WithProperties(sarif.NewPropertyBag().WithTags([]string{"security", "sandbox"}))
	if rule.Proves != "" {
		d.WithShortDescription(sarif.NewMultiformatMessageString().WithText(rule.Proves))
	}
	if rule.Fix != "" {
		d.WithHelp(sarif.NewMultiformatMessageString().WithText("Fix: " + rule.Fix))
	}
	if rule.HelpURI != "" {
		d.WithHelpURI(rule.HelpURI)
	}
}

func (s SARIF) addResult(r *sarif.Run, g *sarifGroup) {
	f := g.f
	level := sarif.LevelError
	if f.Status == Inconclusive {
		level = sarif.LevelWarning
	}
	msg := fmt.Sprintf("expected %s, actual %s", orDash(f.Expected), orDash(f.Actual))
	if f.Subject != "" {
		msg = f.Subject + ": " + msg
	}
	if f.Fix != "" {
		msg += ". Fix: " + f.Fix
	}
	if len(g.targets) > 0 {
		msg += ". Affects " + strings.Join(g.targets, ", ")
	}
	res := r.CreateResultForRule(f.Check).
		WithLevel(level).
		WithMessage(sarif.NewTextMessage(msg))
	loc := sarif.NewLocation()
	if f.File != "" {
		region := sarif.NewRegion().WithStartLine(max(f.Line, 1))
		loc.WithPhysicalLocation(sarif.NewPhysicalLocation().
			WithArtifactLocation(sarif.NewSimpleArtifactLocation(s.uri(f.File))).
			WithRegion(region))
	}
	for _, t := range g.targets {
		loc.AddLogicalLocation(sarif.NewLogicalLocation().WithFullyQualifiedName(t).WithKind("resource"))
	}
	res.AddLocation(loc)
	// A fingerprint without the line, so a result keeps its identity when
	// lines above it move.
	sum := sha256.Sum256([]byte(strings.Join([]string{f.Check, s.uri(f.File), f.Namespace, f.Subject, f.Expected, f.Actual}, "\x00")))
	res.WithPartialFingerprints(map[string]string{"sandprobeFinding/v1": hex.EncodeToString(sum[:16])})
	props := sarif.NewPropertyBag()
	for _, kv := range [][2]string{{"expected", f.Expected}, {"actual", f.Actual}, {"fix", f.Fix}, {"evidence", f.Evidence}, {"namespace", f.Namespace}} {
		if kv[1] != "" {
			props.Add(kv[0], kv[1])
		}
	}
	res.WithProperties(props)
}

// uri is the artifact URI of a file: relative to BaseDir with forward
// slashes when it is inside it, else an absolute file:// URI.
func (s SARIF) uri(file string) string {
	if file == "" {
		return ""
	}
	abs := file
	if !filepath.IsAbs(abs) && s.BaseDir != "" {
		abs = filepath.Join(s.BaseDir, file)
	}
	if s.BaseDir != "" {
		if rel, err := filepath.Rel(s.BaseDir, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return filepath.ToSlash(rel)
		}
	}
	if filepath.IsAbs(abs) {
		return "file://" + filepath.ToSlash(abs)
	}
	return filepath.ToSlash(filepath.Clean(file))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
