package runner

import (
	"os"
	"path/filepath"
	"testing"
)

// TestProbeBeside: a backend hands the sandbox sandprobe-probe when it sits
// executable beside sandprobe, and sandprobe itself otherwise (its `probe`
// subcommand takes the same command line).
func TestProbeBeside(t *testing.T) {
	for _, c := range []struct {
		name  string
		probe os.FileMode // 0: absent; a directory when ModeDir
		want  string
	}{
		{"beside, executable", 0o755, ProbeBinaryName},
		{"absent", 0, "sandprobe"},
		{"not executable", 0o644, "sandprobe"},
		{"a directory", os.ModeDir | 0o755, "sandprobe"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "sandprobe")
			if err := os.WriteFile(bin, nil, 0o755); err != nil {
				t.Fatal(err)
			}
			small := filepath.Join(dir, ProbeBinaryName)
			switch {
			case c.probe&os.ModeDir != 0:
				os.Mkdir(small, 0o755)
			case c.probe != 0:
				if err := os.WriteFile(small, nil, c.probe); err != nil {
					t.Fatal(err)
				}
			}
			if got := ProbeBeside(bin); got != filepath.Join(dir, c.want) {
				t.Errorf("ProbeBeside = %s, want %s", got, c.want)
			}
		})
	}
}
