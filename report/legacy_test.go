package report

// The writers as they were before they streamed (issue 15), kept verbatim
// as the oracle of TestWritersMatchLegacy: the streaming writers must
// print exactly these bytes.

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"github.com/owenrumney/go-sarif/v3/pkg/report/v210/sarif"
	"io"
	"strings"
)

func legacyText(t Text, w io.Writer, run Run) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  policy %s", t.paint(ansiBold, "sandprobe"), run.Policy)
	if run.Backend != "" {
		fmt.Fprintf(&b, "  backend %s", run.Backend)
	}
	fmt.Fprintf(&b, "  %.2fs\n", run.Seconds)
	width := 0
	for _, f := range run.Findings {
		width = max(width, len(f.Name()))
	}
	width = min(width, 48)
	for _, target := range Targets(run.Findings) {
		name := target
		if name == "" {
			name = "(no target)"
		}
		fmt.Fprintf(&b, "\n%s\n", t.paint(ansiBold, name))
		passed := 0
		for _, f := range run.Findings {
			if f.Target != target {
				continue
			}
			if f.Status == Pass && !t.Verbose {
				passed++
				continue
			}
			mark, color := statusMark(f.Status)
			line := f.Name()
			msg := ExpectedActual(f)
			if f.Status == Pass {
				msg = f.Actual
				if f.Evidence != "" {
					msg += t.paint(ansiDim, " · "+f.Evidence)
				}
			}
			if f.Class != "" && f.Status != Pass {
				msg += " [" + f.Class + "]"
			}
			fmt.Fprintf(&b, "  %s %-*s  %s\n", t.paint(color, mark), width, line, oneLine(msg))
			if f.Fix != "" && f.Status != Pass && f.Status != Skip {
				fix := oneLine(f.Fix)
				if f.File != "" {
					fix += t.paint(ansiDim, fmt.Sprintf(" (%s:%d)", f.File, f.Line))
				}
				fmt.Fprintf(&b, "       %s %s\n", t.paint(ansiDim, "fix:"), fix)
			}
		}
		if passed > 0 {
			fmt.Fprintf(&b, "  %s %d passed\n", t.paint(ansiGreen, "ok  "), passed)
		}
	}
	for _, n := range run.Notes {
		fmt.Fprintf(&b, "\nnote: %s\n", n)
	}
	c := run.Counts()
	verdict := map[int]string{
		ExitOK:            t.paint(ansiGreen, "CONFORMANT"),
		ExitNonConformant: t.paint(ansiRed, "NOT CONFORMANT"),
		ExitCouldNotRun:   t.paint(ansiYellow, "COULD NOT CHECK"),
	}[run.ExitCode()]
	fmt.Fprintf(&b, "\n%d findings: %d pass, %d fail, %d inconclusive, %d error, %d skipped — %s (exit %d)\n",
		c.Total(), c.Pass, c.Fail, c.Inconclusive, c.Error, c.Skip, verdict, run.ExitCode())
	_, err := io.WriteString(w, b.String())
	return err
}

func legacyJUnit(w io.Writer, run Run) error {
	doc := junitSuites{Name: "sandprobe " + run.Policy, Time: fmt.Sprintf("%.3f", run.Seconds)}
	for _, target := range Targets(run.Findings) {
		suite := junitSuite{Name: target, Timestamp: run.StartedAt.UTC().Format("2006-01-02T15:04:05")}
		if suite.Name == "" {
			suite.Name = "sandprobe"
		}
		suite.Properties = &junitProps{Props: []junitProp{{Name: "policy", Value: run.Policy}, {Name: "version", Value: run.Version}}}
		var total float64
		for _, f := range run.Findings {
			if f.Target != target {
				continue
			}
			tc := junitTestCase{Name: f.Name(), Classname: "sandprobe." + Area(f.Check), Time: fmt.Sprintf("%.3f", f.Seconds), File: f.File, Line: f.Line}
			total += f.Seconds
			switch f.Status {
			case Pass:
				tc.SystemOut = f.Evidence
				if f.Attempt != nil {
					tc.SystemOut = legacyEvidenceBody(f)
				}
			case Fail:
				tc.Failure = &junitProblem{Message: ExpectedActual(f), Type: f.Check, Body: legacyProblemBody(f)}
				suite.Failures++
			case Skip, Inconclusive:
				msg := string(f.Status)
				if f.Actual != "" {
					msg += ": " + f.Actual
				}
				tc.Skipped = &junitSkipped{Message: msg}
				tc.SystemOut = legacyEvidenceBody(f)
				suite.Skipped++
			default:
				tc.Error = &junitProblem{Message: "could not check: " + f.Actual, Type: f.Check, Body: legacyProblemBody(f)}
				suite.Errors++
			}
			suite.Cases = append(suite.Cases, tc)
			suite.Tests++
		}
		suite.Time = fmt.Sprintf("%.3f", total)
		doc.Tests += suite.Tests
		doc.Failures += suite.Failures
		doc.Errors += suite.Errors
		doc.Skipped += suite.Skipped
		doc.Suites = append(doc.Suites, suite)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("encode junit: %w", err)
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func legacyJSON(w io.Writer, run Run) error {
	if run.Findings == nil {
		run.Findings = []Finding{}
	}
	run.Schema, run.Summary = ReportSchema, run.Summarize() // issue 23
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(run)
}

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr,omitempty"`
	Properties *junitProps     `xml:"properties,omitempty"`
	Cases      []junitTestCase `xml:"testcase"`
}

type junitProps struct {
	Props []junitProp `xml:"property"`
}

type junitProp struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitTestCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitProblem `xml:"failure,omitempty"`
	Error     *junitProblem `xml:"error,omitempty"`
	Skipped   *junitSkipped `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
	// File and Line point at the field to fix in a manifest (drift -f):
	// JUnit consumers that annotate code (GitLab, action-junit-report)
	// read them.
	File string `xml:"file,attr,omitempty"`
	Line int    `xml:"line,attr,omitempty"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Body    string `xml:",chardata"`
}

type junitSkipped struct {
	Message string `xml:"message,attr"`
}

// legacySARIF is SARIF.Write as it was before it streamed: the whole
// report as go-sarif's tree, one group per result in memory.
func legacySARIF(s SARIF, w io.Writer, run Run) error {
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
		r.AddResult(s.result(r, g))
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

// legacyProblemBody and legacyEvidenceBody are the JUnit bodies as they
// were written with fmt.
func legacyProblemBody(f Finding) string {
	var b strings.Builder
	if f.Expected != "" {
		fmt.Fprintf(&b, "expected: %s\n", f.Expected)
	}
	if f.Actual != "" {
		fmt.Fprintf(&b, "actual:   %s\n", f.Actual)
	}
	b.WriteString(legacyEvidenceBody(f))
	if f.Fix != "" {
		fmt.Fprintf(&b, "fix:      %s\n", f.Fix)
	}
	return b.String()
}

func legacyEvidenceBody(f Finding) string {
	var b strings.Builder
	if f.Class != "" {
		fmt.Fprintf(&b, "verdict:  %s\n", f.Class)
	}
	if f.Evidence != "" {
		fmt.Fprintf(&b, "evidence: %s\n", f.Evidence)
	}
	for _, l := range f.Attempt.Lines() {
		fmt.Fprintf(&b, "%s\n", l)
	}
	if f.Deny != "" {
		fmt.Fprintf(&b, "deny:     %s%s\n", f.Deny, controlText(f))
	}
	return b.String()
}
