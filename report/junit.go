package report

import (
	"bufio"
	"encoding/xml"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
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

// Write streams the document: each suite's tallies come from the
// FindingSet's groups, so a suite is written as its findings are read,
// one pass per target, without building the tree (a drift over 100,000
// pods has half a million testcases). The bytes are those encoding/xml
// writes for the junitSuites tree with two-space indentation
// (TestWritersMatchLegacy holds that).
func (JUnit) Write(w io.Writer, run Run) error {
	set := run.Set()
	groups := set.Groups()
	var total Counts
	for _, g := range groups {
		total.Pass += g.Counts.Pass
		total.Fail += g.Counts.Fail
		total.Skip += g.Counts.Skip
		total.Inconclusive += g.Counts.Inconclusive
		total.Error += g.Counts.Error
	}
	b := bufio.NewWriterSize(w, 64<<10)
	x := make([]byte, 0, 4096)
	x = append(x, xml.Header...)
	x = append(x, "<testsuites"...)
	x = xmlAttr(x, "name", "sandprobe "+run.Policy)
	x = xmlSuiteTallies(x, total)
	x = xmlAttr(x, "time", secs(run.Seconds))
	x = append(x, '>')
	stamp := run.StartedAt.UTC().Format("2006-01-02T15:04:05")
	if _, err := b.Write(x); err != nil {
		return err
	}
	// Each suite is formatted on every core, written in order.
	// The pieces (hundreds of KB each) go straight to w.
	if err := b.Flush(); err != nil {
		return err
	}
	err := writeGroups(w, set, func(x []byte, gi int, fs []Finding) ([]byte, error) {
		return appendSuite(x, run, stamp, groups[gi], fs), nil
	})
	if err != nil {
		return err
	}
	x = x[:0]
	if len(groups) > 0 {
		x = append(x, '\n')
	}
	x = append(x, "</testsuites>\n"...)
	if _, err := b.Write(x); err != nil {
		return err
	}
	return b.Flush()
}

// appendSuite appends one target's testsuite: a testcase per finding.
func appendSuite(x []byte, run Run, stamp string, g Group, fs []Finding) []byte {
	name := g.Target
	if name == "" {
		name = "sandprobe"
	}
	x = append(x, "\n  <testsuite"...)
	x = xmlAttr(x, "name", name)
	x = xmlSuiteTallies(x, g.Counts)
	x = xmlAttr(x, "time", secs(g.Seconds))
	if stamp != "" {
		x = xmlAttr(x, "timestamp", stamp)
	}
	x = append(x, ">\n    <properties>\n      <property"...)
	x = xmlAttr(x, "name", "policy")
	x = xmlAttr(x, "value", run.Policy)
	x = append(x, "></property>\n      <property"...)
	x = xmlAttr(x, "name", "version")
	x = xmlAttr(x, "value", run.Version)
	// The build, when it was stamped (internal/version).
	for _, p := range [...][2]string{{"commit", run.Commit}, {"build_date", run.BuildDate}} {
		if p[1] != "" {
			x = append(x, "></property>\n      <property"...)
			x = xmlAttr(x, "name", p[0])
			x = xmlAttr(x, "value", p[1])
		}
	}
	x = append(x, "></property>\n    </properties>"...)
	for i := range fs {
		x = appendTestcase(x, &fs[i])
	}
	return append(x, "\n  </testsuite>"...)
}

// appendTestcase appends f's testcase.
func appendTestcase(x []byte, f *Finding) []byte {
	// name (f.Name()), classname and time, appended without the
	// strings built for them (a space or a dot between two
	// escaped parts escapes as the whole does).
	x = append(x, "\n    <testcase name=\""...)
	x = xmlEscape(x, f.Check)
	if f.Subject != "" {
		x = append(x, ' ')
		x = xmlEscape(x, f.Subject)
	}
	x = append(x, "\" classname=\"sandprobe."...)
	x = xmlEscape(x, Area(f.Check))
	x = append(x, "\" time=\""...)
	x = strconv.AppendFloat(x, f.Seconds, 'f', 3, 64)
	x = append(x, '"')
	if f.File != "" {
		x = xmlAttr(x, "file", f.File)
	}
	if f.Line != 0 {
		x = xmlAttr(x, "line", strconv.Itoa(f.Line))
	}
	if f.Severity != "" {
		x = xmlAttr(x, "severity", string(f.Severity))
	}
	x = append(x, '>')
	children := false
	var out string
	switch f.Status {
	case Pass:
		out = passBody(*f)
	case Fail:
		x, children = xmlProblem(x, "failure", f, ExpectedActual(*f)), true
	case Skip, Inconclusive:
		msg := string(f.Status)
		if f.Actual != "" {
			msg += ": " + f.Actual
		}
		x = append(x, "\n      <skipped"...)
		x = xmlAttr(x, "message", msg)
		x = append(x, "></skipped>"...)
		children = true
		out = evidenceBody(*f)
	default:
		x, children = xmlProblem(x, "error", f, "could not check: "+f.Actual), true
	}
	if out != "" {
		x = append(x, "\n      <system-out>"...)
		x = xmlEscape(x, out)
		x = append(x, "</system-out>"...)
		children = true
	}
	if children {
		x = append(x, "\n    "...)
	}
	return append(x, "</testcase>"...)
}

func xmlSuiteTallies(x []byte, c Counts) []byte {
	x = xmlAttr(x, "tests", strconv.Itoa(c.Total()))
	x = xmlAttr(x, "failures", strconv.Itoa(c.Fail))
	x = xmlAttr(x, "errors", strconv.Itoa(c.Error))
	return xmlAttr(x, "skipped", strconv.Itoa(c.Skip+c.Inconclusive))
}

// xmlProblem appends a failure or error element: msg, f's check as its
// type, and f's expected, actual, evidence and fix as its body.
func xmlProblem(x []byte, elem string, f *Finding, msg string) []byte {
	x = append(x, "\n      <"...)
	x = append(x, elem...)
	x = xmlAttr(x, "message", msg)
	x = xmlAttr(x, "type", f.Check)
	x = append(x, '>')
	x = appendProblemBody(x, f)
	x = append(x, "</"...)
	x = append(x, elem...)
	return append(x, '>')
}

// appendProblemBody appends a problem's body, escaped: its expected,
// actual, evidence and fix lines. Escaped a part at a time: every part
// ends in a newline, so that writes what escaping the whole body would
// (TestWritersMatchLegacy).
func appendProblemBody(x []byte, f *Finding) []byte {
	line := func(label, v string) {
		x = append(x, label...)
		x = xmlEscape(x, v)
		x = append(x, "&#xA;"...)
	}
	if f.Expected != "" {
		line("expected: ", f.Expected)
	}
	if f.Actual != "" {
		line("actual:   ", f.Actual)
	}
	x = xmlEscape(x, evidenceBody(*f))
	if f.Fix != "" {
		line("fix:      ", f.Fix)
	}
	return x
}

func xmlAttr(x []byte, name, value string) []byte {
	x = append(x, ' ')
	x = append(x, name...)
	x = append(x, '=', '"')
	x = xmlEscape(x, value)
	return append(x, '"')
}

// xmlEscape escapes s as encoding/xml does for attributes and character
// data: the five entities, tab, newline and carriage return as character
// references, and anything outside XML's character range as U+FFFD.
func xmlEscape(x []byte, s string) []byte {
	last := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf && xmlPlain[c] {
			i++ // plain ASCII, the most of it
			continue
		}
		r, width := utf8.DecodeRuneInString(s[i:])
		i += width
		var esc string
		switch r {
		case '"':
			esc = "&#34;"
		case '\'':
			esc = "&#39;"
		case '&':
			esc = "&amp;"
		case '<':
			esc = "&lt;"
		case '>':
			esc = "&gt;"
		case '\t':
			esc = "&#x9;"
		case '\n':
			esc = "&#xA;"
		case '\r':
			esc = "&#xD;"
		default:
			if !xmlChar(r) || (r == utf8.RuneError && width == 1) {
				esc = "\uFFFD"
				break
			}
			continue
		}
		x = append(x, s[last:i-width]...)
		x = append(x, esc...)
		last = i
	}
	return append(x, s[last:]...)
}

// xmlPlain are the ASCII bytes xmlEscape writes as they are.
var xmlPlain = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\'' && c != '&' && c != '<' && c != '>'
	}
	return t
}()

func xmlChar(r rune) bool {
	return r == 0x09 || r == 0x0A || r == 0x0D ||
		r >= 0x20 && r <= 0xD7FF ||
		r >= 0xE000 && r <= 0xFFFD ||
		r >= 0x10000 && r <= 0x10FFFF
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
		b.WriteString("verdict:  ")
		b.WriteString(f.Class)
		b.WriteString("\n")
	}
	if f.Evidence != "" {
		b.WriteString("evidence: ")
		b.WriteString(f.Evidence)
		b.WriteString("\n")
	}
	for _, l := range f.Attempt.Lines() {
		b.WriteString(l)
		b.WriteString("\n")
	}
	if f.Deny != "" {
		b.WriteString("deny:     ")
		b.WriteString(f.Deny)
		b.WriteString(controlText(f))
		b.WriteString("\n")
	}
	return b.String()
}

// controlText is what the control vantage saw, for a deny line.
func controlText(f Finding) string {
	if f.Control == "" {
		return ""
	}
	return " (the control got " + f.Control + ")"
}

// secs is %.3f.
func secs(s float64) string { return strconv.FormatFloat(s, 'f', 3, 64) }
