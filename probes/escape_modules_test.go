package probes

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandprobe/sandprobe/result"
)

// TestModuleLoad: this machine's kernel has no module support, so the
// failing case is a /proc that says the kernel takes modules.
func TestModuleLoad(t *testing.T) {
	proc := func(modules bool, disabled string) string {
		d := t.TempDir()
		if modules {
			os.WriteFile(filepath.Join(d, "modules"), []byte("overlay 151552 0 - Live 0x0\n"), 0o444)
		}
		if disabled != "" {
			os.MkdirAll(filepath.Join(d, "sys", "kernel"), 0o755)
			os.WriteFile(filepath.Join(d, "sys", "kernel", "modules_disabled"), []byte(disabled+"\n"), 0o644)
		}
		return d
	}
	cases := []struct {
		name     string
		proc     string
		cap, gvr bool
		want     result.Status
	}{
		{"modules, CAP_SYS_MODULE", proc(true, "0"), true, false, result.Fail},
		{"modules, no capability", proc(true, "0"), false, false, result.Pass},
		{"modules disabled", proc(true, "1"), true, false, result.Pass},
		{"no module support", proc(false, ""), true, false, result.Pass},
		{"gVisor", proc(true, "0"), true, true, result.Pass},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if f := judgeModuleLoad(c.proc, c.cap, c.gvr); f.Status != c.want || f.Evidence == "" {
				t.Errorf("%s %q, want %s (%s)", f.Status, f.Actual, c.want, f.Evidence)
			}
		})
	}
}
