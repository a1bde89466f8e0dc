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
	var (
		out           []gitConfigEntry
		section, sub  string
		lineNo, start int
		pending       strings.Builder // a value continued on the next line
		cont          bool
		entry         gitConfigEntry
	)
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		if lineNo == 1 {
			line = strings.TrimPrefix(line, "\ufeff")
		}
		if cont {
			v, more, err := gitConfigValue(line)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", lineNo, err)
			}
			pending.WriteString(v)
			if cont = more; !cont {
				entry.Value = pending.String()
				out = append(out, entry)
			}
			continue
		}
		rest := strings.TrimLeft(line, " \t")
		for rest != "" {
			switch rest[0] {
			case '#', ';':
				rest = ""
				continue
			case '[':
				var err error
				section, sub, rest, err = gitConfigSection(rest)
				if err != nil {
					return nil, fmt.Errorf("line %d: %w", lineNo, err)
				}
				rest = strings.TrimLeft(rest, " \t")
				continue
			}
			if section == "" {
				return nil, fmt.Errorf("line %d: a key outside any section", lineNo)
			}
			n := 0
			for n < len(rest) && (isAlnum(rest[n]) || rest[n] == '-') {
				n++
			}
			if n == 0 {
				return nil, fmt.Errorf("line %d: not a key", lineNo)
			}
			entry = gitConfigEntry{Section: section, Subsection: sub, Key: strings.ToLower(rest[:n]), Line: lineNo}
			start = lineNo
			after := strings.TrimLeft(rest[n:], " \t")
			if after == "" || after[0] == '#' || after[0] == ';' {
				out = append(out, entry)
				break
			}
			if after[0] != '=' {
				return nil, fmt.Errorf("line %d: want = after the key", lineNo)
			}
			entry.HasValue = true
			v, more, err := gitConfigValue(after[1:])
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", lineNo, err)
			}
			if more {
				pending.Reset()
				pending.WriteString(v)
				cont = true
			} else {
				entry.Value = v
				out = append(out, entry)
			}
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cont {
		return nil, fmt.Errorf("line %d: the value continues past the end of the file", start)
	}
	return out, nil
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
