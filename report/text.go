package report

import (
	"bufio"
	"fmt"
	"io"
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
	var line []byte // one finding's lines, written at once (fmt per line was a third of the writer)
	for gi, g := range set.Groups() {
		name := g.Target
		if name == "" {
			name = "(no target)"
		}
		fmt.Fprintf(b, "\n%s\n", t.paint(ansiBold, name))
		passed := 0
		err := set.EachIn(gi, func(f *Finding) error {
			if f.Status == Pass && !t.Verbose {
				passed++
				return nil
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
			line = append(line[:0], "  "...)
			line = append(line, t.paint(color, mark)...)
			line = append(line, ' ')
			line = append(line, name...)
			for n := utf8.RuneCountInString(name); n < width; n++ {
				line = append(line, ' ')
			}
			line = append(line, "  "...)
			line = append(line, oneLine(msg)...)
			line = append(line, '\n')
			if f.Fix != "" && f.Status != Pass && f.Status != Skip {
				line = append(line, "       "...)
				line = append(line, t.paint(ansiDim, "fix:")...)
				line = append(line, ' ')
				line = append(line, oneLine(f.Fix)...)
				if f.File != "" {
					line = append(line, t.paint(ansiDim, " ("+f.File+":"+strconv.Itoa(f.Line)+")")...)
				}
				line = append(line, '\n')
			}
			_, err := b.Write(line)
			return err
		})
		if err != nil {
			return err
		}
		if passed > 0 {
			fmt.Fprintf(b, "  %s %d passed\n", t.paint(ansiGreen, "ok  "), passed)
		}
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
