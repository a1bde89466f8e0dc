package report

import (
	"fmt"
	"io"
	"strings"
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

func (t Text) Write(w io.Writer, run Run) error {
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

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
