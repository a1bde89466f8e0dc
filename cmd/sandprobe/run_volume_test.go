package main

import (
	"strings"
	"testing"
)

// TestRunVolumeBadInput: a bad --volume is one line naming the flag, exit 2.
func TestRunVolumeBadInput(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{
		"/nonexistent/ws:/workspace": "--volume: SRC /nonexistent/ws: no such file or directory",
		dir:                          "--volume: want SRC:DST[:ro|rw]",
		dir + ":workspace":           `--volume: DST must be a clean absolute path other than /, got "workspace"`,
		dir + ":/workspace:rx":       `got mode "rx"`,
	}
	for v, want := range cases {
		code, _, stderr := runApp(t, "", "run", "--policy", "../../fixtures/local-policy.yaml", "--volume", v)
		if code != 2 || !strings.Contains(stderr, want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("--volume %s: exit %d, stderr %q, want one line with %q", v, code, stderr, want)
		}
	}
}
