package report

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
)

// Writer renders a Run in one output format.
type Writer interface {
	Write(w io.Writer, run Run) error
}

// JUnit writes JUnit XML: a testsuite per target (a probe's node, a drifted
// object), a testcase per finding. Failures carry "expected X, actual Y" as
// their message and the evidence and fix as their body; skipped and
// inconclusive findings are skipped; could-not-check findings are errors.
type JUnit struct{}

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

func (JUnit) Write(w io.Writer, run Run) error {
	doc := junitSuites{Name: "sandprobe " + run.Policy, Time: secs(run.Seconds)}
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
			tc := junitTestCase{Name: f.Name(), Classname: "sandprobe." + Area(f.Check), Time: secs(f.Seconds), File: f.File, Line: f.Line}
			total += f.Seconds
			switch f.Status {
			case Pass:
				tc.SystemOut = passBody(f)
			case Fail:
				tc.Failure = &junitProblem{Message: ExpectedActual(f), Type: f.Check, Body: problemBody(f)}
				suite.Failures++
			case Skip, Inconclusive:
				msg := string(f.Status)
				if f.Actual != "" {
					msg += ": " + f.Actual
				}
				tc.Skipped = &junitSkipped{Message: msg}
				tc.SystemOut = evidenceBody(f)
				suite.Skipped++
			default:
				tc.Error = &junitProblem{Message: "could not check: " + f.Actual, Type: f.Check, Body: problemBody(f)}
				suite.Errors++
			}
			suite.Cases = append(suite.Cases, tc)
			suite.Tests++
		}
		suite.Time = secs(total)
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

// ExpectedActual is the one-line failure message.
func ExpectedActual(f Finding) string {
	switch {
	case f.Expected != "" && f.Actual != "":
		return fmt.Sprintf("expected %s, actual %s", f.Expected, f.Actual)
	case f.Actual != "":
		return f.Actual
	}
	return string(f.Status)
}

func problemBody(f Finding) string {
	var b strings.Builder
	if f.Expected != "" {
		fmt.Fprintf(&b, "expected: %s\n", f.Expected)
	}
	if f.Actual != "" {
		fmt.Fprintf(&b, "actual:   %s\n", f.Actual)
	}
	b.WriteString(evidenceBody(f))
	if f.Fix != "" {
		fmt.Fprintf(&b, "fix:      %s\n", f.Fix)
	}
	return b.String()
}

// passBody is a pass's proof: its evidence and, for a network attempt,
// what stopped it.
func passBody(f Finding) string {
	if f.Attempt == nil {
		return f.Evidence
	}
	return evidenceBody(f)
}

// evidenceBody is what was seen, without the verdict's wording: the class,
// the evidence and the attempt's lines.
func evidenceBody(f Finding) string {
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
	return b.String()
}

func secs(s float64) string { return fmt.Sprintf("%.3f", s) }
