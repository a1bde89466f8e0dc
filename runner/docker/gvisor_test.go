package docker_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/report"
)

// TestGVisorOCISeccomp proves the fix caps.seccomp gives under gVisor: runsc
// loads the container's seccomp profile inside the sandbox only with
// --oci-seccomp. The engine's runtimes cannot take that flag per container,
// so this runs runsc directly on an OCI bundle holding the static probe.
func TestGVisorOCISeccomp(t *testing.T) {
	testenv.RequireRoot(t)
	runsc, err := exec.LookPath("runsc")
	if err != nil {
		testenv.Missing(t, "runsc is not installed (apt-get install runsc)")
	}
	cases := []struct {
		flag string
		want report.Status
	}{
		{"", report.Fail},
		{"--oci-seccomp", report.Pass},
	}
	for _, c := range cases {
		t.Run("runsc "+c.flag, func(t *testing.T) {
			bundle := t.TempDir()
			rootfs := filepath.Join(bundle, "rootfs")
			if err := os.MkdirAll(filepath.Join(rootfs, "tmp"), 0o1777); err != nil {
				t.Fatal(err)
			}
			bin, err := os.ReadFile(testenv.Binary(t))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(rootfs, "sandprobe"), bin, 0o755)
			pol, _ := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "fixtures", "scratch-policy.yaml"))
			os.WriteFile(filepath.Join(rootfs, "policy.yaml"), pol, 0o644)
			spec := exec.Command(runsc, "spec", "--", "/sandprobe", "probe", "--policy", "/policy.yaml", "--only", "caps.seccomp,runtime", "--runtime-class", "runsc-nonet")
			spec.Dir = bundle
			if out, err := spec.CombinedOutput(); err != nil {
				t.Fatalf("runsc spec: %v: %s", err, out)
			}
			var cfg map[string]any
			raw, _ := os.ReadFile(filepath.Join(bundle, "config.json"))
			json.Unmarshal(raw, &cfg)
			cfg["process"].(map[string]any)["terminal"] = false
			// Allow everything but one call: any filter at all shows as mode 2.
			cfg["linux"].(map[string]any)["seccomp"] = map[string]any{
				"defaultAction": "SCMP_ACT_ALLOW", "architectures": []string{"SCMP_ARCH_X86_64"},
				"syscalls": []any{map[string]any{"names": []string{"kexec_load"}, "action": "SCMP_ACT_ERRNO"}},
			}
			raw, _ = json.Marshal(cfg)
			os.WriteFile(filepath.Join(bundle, "config.json"), raw, 0o644)

			state := filepath.Join(bundle, "state")
			args := []string{"--root", state, "--platform=ptrace", "--network=none"}
			if c.flag != "" {
				args = append(args, c.flag)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			id := "sandprobe-oci-seccomp-" + strings.TrimPrefix(c.flag, "--")
			run := exec.CommandContext(ctx, runsc, append(args, "run", id)...)
			run.Dir = bundle
			out, _ := run.Output() // the probe exits 1 on a failing check
			t.Cleanup(func() { exec.Command(runsc, "--root", state, "delete", "-force", id).Run() })
			var res report.ProbeResult
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("probe output: %v: %s", err, out)
			}
			for _, f := range res.Findings {
				if f.Check == "runtime.isolation" && f.Status != report.Pass {
					t.Errorf("not gVisor: %s", report.ExpectedActual(f))
				}
				if f.Check == "caps.seccomp" {
					if f.Status != c.want {
						t.Errorf("caps.seccomp %s, want %s: %s (%s)", f.Status, c.want, f.Actual, f.Evidence)
					}
					if c.want == report.Fail && !strings.Contains(f.Fix, "--oci-seccomp") {
						t.Errorf("fix %q does not name --oci-seccomp", f.Fix)
					}
				}
			}
		})
	}
}
