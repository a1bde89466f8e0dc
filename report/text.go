package report

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Text writes a compact terminal summary: one line per finding that is not a
// pass, with its fix underneath, and a count of the passes per target.
type Text struct {
	Color   bool // ANSI colours (a terminal without NO_COLOR)
	Verbose bool // list passing findings too
}

const (
	ansiRed    = "\x1b[31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiDim    = "\x1b[2m"
	ansiBold   = "\x1b[1m"
	ansiReset  = "\x1b[0m"
)

func (t Text) paint(color, s string) string {
	if !t.Color {
		return s
	}
	return color + s + ansiReset
}

// Write prints one block per target, in order of first appearance: one
// pass over the findings for the column width and one per target block,
// linear in the findings whatever holds them (a Spool for a big drift).
func (t Text) Write(w io.Writer, run Run) error {
	set := run.Set()
	b := bufio.NewWriterSize(w, 64<<10)
	fmt.Fprintf(b, "%s  policy %s", t.paint(ansiBold, "sandprobe"), run.Policy)
	if run.Backend != "" {
		fmt.Fprintf(b, "  backend %s", run.Backend)
	}
	fmt.Fprintf(b, "  %.2fs\n", run.Seconds)
	width := min(set.NameWidth(), 48)
	// Each target's block is formatted on every core, written in order.
	// The pieces (hundreds of KB each) go straight to w.
	if err := b.Flush(); err != nil {
		return err
	}
	err := writeGroups(w, set, func(x []byte, gi int, fs []Finding) ([]byte, error) {
		return t.appendBlock(x, set.Groups()[gi].Target, width, fs), nil
	})
	if err != nil {
		return err
	}
	for _, n := range run.Notes {
		fmt.Fprintf(b, "\nnote: %s\n", n)
	}
	if un := run.Unprobed(); len(un) > 0 {
		fmt.Fprintf(b, "\n%s %s\n", t.paint(ansiYellow, "unprobed:"), unprobedLine(un))
	}
	c := set.Counts()
	code := exitCode(c)
	verdict := map[int]string{
		ExitOK:            t.paint(ansiGreen, "CONFORMANT"),
		ExitNonConformant: t.paint(ansiRed, "NOT CONFORMANT"),
		ExitCouldNotRun:   t.paint(ansiYellow, "COULD NOT CHECK"),
	}[code]
	fmt.Fprintf(b, "\n%d findings: %d pass, %d fail, %d inconclusive, %d error, %d skipped — %s (exit %d)\n",
		c.Total(), c.Pass, c.Fail, c.Inconclusive, c.Error, c.Skip, verdict, code)
	return b.Flush()
}

// appendBlock appends one target's block: a line per finding that is not a
// pass (with its fix underneath), then how many passed.
func (t Text) appendBlock(x []byte, target string, width int, fs []Finding) []byte {
	if target == "" {
		target = "(no target)"
	}
	x = append(x, '\n')
	x = append(x, t.paint(ansiBold, target)...)
	x = append(x, '\n')
	passed := 0
	for _, i := range worstFirst(fs) {
		f := &fs[i]
		if f.Status == Pass && !t.Verbose {
			passed++
			continue
		}
		mark, color := statusMark(f.Status)
		name := f.Name()
		msg := ExpectedActual(*f)
		if f.Status == Pass {
			msg = f.Actual
			if f.Evidence != "" {
				msg += t.paint(ansiDim, " · "+f.Evidence)
			}
		}
		if f.Class != "" && f.Status != Pass {
			msg += " [" + f.Class + "]"
		}
		if f.Deny == DenyUnproven {
			msg += " [deny unproven" + controlText(*f) + "]"
		}
		// "  %s %-*s  %s\n": the name padded to width runes.
		x = append(x, "  "...)
		x = append(x, t.paint(color, mark)...)
		x = append(x, ' ')
		if f.Severity != "" {
			x = append(x, severityColumn(f.Severity)...)
		}
		x = append(x, name...)
		for n := utf8.RuneCountInString(name); n < width; n++ {
			x = append(x, ' ')
		}
		x = append(x, "  "...)
		x = append(x, oneLine(msg)...)
		x = append(x, '\n')
		if f.Fix != "" && f.Status != Pass && f.Status != Skip {
			x = append(x, "       "...)
			x = append(x, t.paint(ansiDim, "fix:")...)
			x = append(x, ' ')
			x = append(x, oneLine(f.Fix)...)
			if f.File != "" {
				x = append(x, t.paint(ansiDim, " ("+f.File+":"+strconv.Itoa(f.Line)+")")...)
			}
			x = append(x, '\n')
		}
		x = t.appendAffects(x, f)
	}
	if passed > 0 {
		x = append(x, "  "...)
		x = append(x, t.paint(ansiGreen, "ok  ")...)
		x = append(x, ' ')
		x = strconv.AppendInt(x, int64(passed), 10)
		x = append(x, " passed\n"...)
	}
	return x
}

// textAffects is how many of a shared object's sandboxes the text report
// names; the JSON report lists them all (up to MaxAffects).
const textAffects = 5

// appendAffects names the sandboxes a shared object's finding (an egress
// policy's) applies to: the first few, then how many.
func (t Text) appendAffects(x []byte, f *Finding) []byte {
	if len(f.Affects) == 0 || f.Status == Pass {
		return x
	}
	x = append(x, "       "...)
	x = append(x, t.paint(ansiDim, "affects:")...)
	x = append(x, ' ')
	x = append(x, oneLine(strings.Join(f.Affects[:min(len(f.Affects), textAffects)], ", "))...)
	if more := len(f.Affects) - textAffects; more > 0 {
		x = append(x, " and "...)
		x = strconv.AppendInt(x, int64(more), 10)
		if len(f.Affects) >= MaxAffects {
			x = append(x, '+') // the evidence has the count
		}
		x = append(x, " more"...)
	}
	x = append(x, '\n')
	return x
}

// worstFirst orders a target's findings for the text report: what did not
// pass before what passed, the worst severity first, otherwise as found.
func worstFirst(fs []Finding) []int {
	idx := make([]int, len(fs))
	sorted := true
	for i := range idx {
		idx[i] = i
		if i > 0 && textRank(&fs[i]) < textRank(&fs[i-1]) {
			sorted = false
		}
	}
	if !sorted {
		slices.SortStableFunc(idx, func(a, b int) int { return textRank(&fs[a]) - textRank(&fs[b]) })
	}
	return idx
}

// textRank is a finding's place in its block: by severity, a pass with
// the findings that carry none (after low), in the order found.
func textRank(f *Finding) int {
	if f.Status == Pass {
		return Severity("").Rank()
	}
	return f.Severity.Rank()
}

// severityColumn is the severity padded to the longest one ("critical").
func severityColumn(s Severity) string {
	const width = len("critical ")
	if len(s) >= width {
		return string(s) + " "
	}
	return string(s) + "         "[:width-len(s)]
}

// unprobedLine says which nodes of the pool went without a verdict (the
// first ten by name, then how many more): on a fleet, one line a page
// reader can act on, instead of one error among thousands of passes.
func unprobedLine(un []Unprobed) string {
	nodes := map[string]bool{}
	var named []string
	for _, u := range un {
		nodes[u.Node] = true
		if len(named) < 10 {
			where := u.Node
			if u.Namespace != "" {
				where += " in " + u.Namespace
			}
			named = append(named, where+" ("+u.Reason+")")
		}
	}
	line := fmt.Sprintf("%d node(s) of the sandbox pool got no verdict this run, so this run is not a pass for them: %s", len(nodes), strings.Join(named, ", "))
	if more := len(un) - len(named); more > 0 {
		line += fmt.Sprintf(" and %d more", more)
	}
	return line
}

// nameExtra is how much longer Name is than Check.
func nameExtra(f *Finding) int {
	if f.Subject == "" {
		return 0
	}
	return 1 + len(f.Subject)
}

func statusMark(s Status) (string, string) {
	switch s {
	case Pass:
		return "ok  ", ansiGreen
	case Fail:
		return "FAIL", ansiRed
	case Skip:
		return "skip", ansiDim
	case Inconclusive:
		return "INCO", ansiYellow
	}
	return "ERR ", ansiYellow
}

// oneLine joins s's words with single spaces (strings.Fields: any
// Unicode space splits them).
func oneLine(s string) string {
	// Most messages are one line already: ASCII, no space but single
	// spaces between words.
	plain := len(s) == 0 || (s[0] != ' ' && s[len(s)-1] != ' ')
	for i := 0; plain && i < len(s); i++ {
		switch c := s[i]; {
		case c >= utf8.RuneSelf, c == '\t', c == '\n', c == '\v', c == '\f', c == '\r':
			plain = false
		case c == ' ' && s[i+1] == ' ':
			plain = false
		}
	}
	if plain {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}
