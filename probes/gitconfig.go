package probes

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// gitConfigEntry is one `key = value` of a git config file. Section and
// Key are lower-cased (git compares them so); Subsection keeps its case,
// as git does for the `[section "sub"]` form.
type gitConfigEntry struct {
	Section, Subsection, Key string
	Value                    string
	HasValue                 bool // false for a bare `key` (boolean true)
	Line                     int
}

// FullKey is "section.subsection.key" as git names it.
func (e gitConfigEntry) FullKey() string {
	if e.Subsection == "" {
		return e.Section + "." + e.Key
	}
	return e.Section + "." + e.Subsection + "." + e.Key
}

// parseGitConfig reads a git config file the way git does (sections,
// subsections, quoting, escapes, comments, continuation lines). It is
// written here rather than taken from a library: the probe links only the
// standard library, and it needs the keys alone, never to run anything.
func parseGitConfig(r io.Reader) ([]gitConfigEntry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var p gitConfigParser
	for sc.Scan() {
		p.lineNo++
		line := sc.Text()
		if p.lineNo == 1 {
			line = strings.TrimPrefix(line, "\ufeff")
		}
		var err error
		if p.cont {
			err = p.continued(line)
		} else {
			err = p.line(line)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if p.cont {
		return nil, fmt.Errorf("line %d: the value continues past the end of the file", p.start)
	}
	return p.out, nil
}

// gitConfigParser is parseGitConfig's state between lines.
type gitConfigParser struct {
	out           []gitConfigEntry
	section, sub  string
	lineNo, start int
	pending       strings.Builder // a value continued on the next line
	cont          bool
	entry         gitConfigEntry
}

// continued reads a line that continues the pending value.
func (p *gitConfigParser) continued(line string) error {
	v, more, err := gitConfigValue(line)
	if err != nil {
		return fmt.Errorf("line %d: %w", p.lineNo, err)
	}
	p.pending.WriteString(v)
	if p.cont = more; !p.cont {
		p.entry.Value = p.pending.String()
		p.out = append(p.out, p.entry)
	}
	return nil
}

// line reads a line of its own: comments, section headers, then a key.
func (p *gitConfigParser) line(line string) error {
	rest := strings.TrimLeft(line, " \t")
	for rest != "" {
		switch rest[0] {
		case '#', ';':
			return nil
		case '[':
			var err error
			p.section, p.sub, rest, err = gitConfigSection(rest)
			if err != nil {
				return fmt.Errorf("line %d: %w", p.lineNo, err)
			}
			rest = strings.TrimLeft(rest, " \t")
			continue
		}
		return p.key(rest)
	}
	return nil
}

// key reads "key", "key = value" or the start of a continued value.
func (p *gitConfigParser) key(rest string) error {
	if p.section == "" {
		return fmt.Errorf("line %d: a key outside any section", p.lineNo)
	}
	n := 0
	for n < len(rest) && (isAlnum(rest[n]) || rest[n] == '-') {
		n++
	}
	if n == 0 {
		return fmt.Errorf("line %d: not a key", p.lineNo)
	}
	p.entry = gitConfigEntry{Section: p.section, Subsection: p.sub, Key: strings.ToLower(rest[:n]), Line: p.lineNo}
	p.start = p.lineNo
	after := strings.TrimLeft(rest[n:], " \t")
	if after == "" || after[0] == '#' || after[0] == ';' {
		p.out = append(p.out, p.entry)
		return nil
	}
	if after[0] != '=' {
		return fmt.Errorf("line %d: want = after the key", p.lineNo)
	}
	p.entry.HasValue = true
	v, more, err := gitConfigValue(after[1:])
	if err != nil {
		return fmt.Errorf("line %d: %w", p.lineNo, err)
	}
	if more {
		p.pending.Reset()
		p.pending.WriteString(v)
		p.cont = true
	} else {
		p.entry.Value = v
		p.out = append(p.out, p.entry)
	}
	return nil
}

// gitConfigSection parses `[section]`, `[section "sub"]` or the old
// `[section.sub]` at the start of s and returns what follows.
func gitConfigSection(s string) (section, sub, rest string, err error) {
	end := -1
	inQuote := false
	for i := 1; i < len(s); i++ {
		switch {
		case inQuote && s[i] == '\\' && i+1 < len(s):
			i++
		case s[i] == '"':
			inQuote = !inQuote
		case !inQuote && s[i] == ']':
			end = i
		}
		if end >= 0 {
			break
		}
	}
	if end < 0 {
		return "", "", "", fmt.Errorf("unterminated section header")
	}
	head := s[1:end]
	rest = s[end+1:]
	if name, q, ok := strings.Cut(head, " "); ok {
		q = strings.TrimLeft(q, " \t")
		if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
			return "", "", "", fmt.Errorf("bad subsection in [%s]", head)
		}
		var b strings.Builder
		for i := 1; i < len(q)-1; i++ {
			if q[i] == '\\' && i+1 < len(q)-1 {
				i++
			}
			b.WriteByte(q[i])
		}
		return strings.ToLower(name), b.String(), rest, nil
	}
	name, old, ok := strings.Cut(head, ".")
	if ok {
		return strings.ToLower(name), strings.ToLower(old), rest, nil
	}
	return strings.ToLower(head), "", rest, nil
}

// gitConfigValue parses a value: quotes, escapes, a comment after it, and
// whether a trailing backslash continues it on the next line.
func gitConfigValue(s string) (v string, more bool, err error) {
	var b strings.Builder
	inQuote := false
	space := 0 // spaces seen outside quotes, kept only if more follows
	s = strings.TrimLeft(s, " \t")
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 == len(s) {
				return b.String(), true, nil
			}
			i++
			switch s[i] {
			case 'n':
				c = '\n'
			case 't':
				c = '\t'
			case 'b':
				c = '\b'
			case '\\', '"':
				c = s[i]
			default:
				return "", false, fmt.Errorf("bad escape \\%c", s[i])
			}
		case c == '"':
			inQuote = !inQuote
			continue
		case !inQuote && (c == '#' || c == ';'):
			return b.String(), false, nil
		case !inQuote && (c == ' ' || c == '\t'):
			space++
			continue
		}
		for ; space > 0; space-- {
			b.WriteByte(' ')
		}
		b.WriteByte(c)
	}
	if inQuote {
		return "", false, fmt.Errorf("unterminated quote")
	}
	return b.String(), false, nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
