package policy

import (
	"errors"
	"fmt"
	"io"
)

// LoadPath loads the policy a command names with --policy: a file, or "-"
// for stdin (read up to MaxPolicyBytes). Both binaries (sandprobe and
// sandprobe-probe) load policies through it and print its problems with
// WriteProblems, so a bad policy reads the same whichever ran.
func LoadPath(path string, stdin io.Reader) (*Policy, []byte, error) {
	if path == "-" {
		raw, err := io.ReadAll(io.LimitReader(stdin, MaxPolicyBytes+1))
		if err != nil {
			return nil, nil, fmt.Errorf("read the policy from stdin: %w", err)
		}
		p, err := Load(raw)
		return p, raw, err
	}
	return LoadFile(path)
}

// WriteProblems prints every problem of a failed load, one a line, as
// PATH:LINE: field: message (PATH: err when it holds no field problems).
func WriteProblems(w io.Writer, path string, err error) {
	if fe := (*FileError)(nil); errors.As(err, &fe) {
		fmt.Fprintln(w, fe.Error()) // FILE: message, once
		return
	}
	probs := Problems(err)
	if len(probs) == 0 {
		fmt.Fprintf(w, "%s: %v\n", path, err)
		return
	}
	for _, p := range probs {
		loc := path
		if p.Line > 0 {
			loc = fmt.Sprintf("%s:%d", path, p.Line)
		}
		field := p.Path
		if field == "" {
			field = "policy"
		}
		fmt.Fprintf(w, "%s: %s: %s\n", loc, field, p.Msg)
	}
}
