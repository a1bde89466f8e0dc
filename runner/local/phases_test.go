package local_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner/local"
)

const phasesPolicy = `apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: phases-test}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  identity: {uid: 65532, gid: 65532}
  filesystem: {readOnlyRoot: true, writable: [/workspace, /tmp]}
  image: {tools: [{name: git, args: [--version]}]}
  phases: {workspace: /workspace, baseline: /run/phase/baseline.json}
`

// sharedWorkspace is what the trusted step leaves before the first phase:
// a clone whose repository commits its own hooks (.githooks, named by
// core.hooksPath), owned by the sandbox's uid, and its baseline sealed
// outside the volume. It returns the volume and the baseline file.
func sharedWorkspace(t *testing.T) (string, string) {
	t.Helper()
	ws := filepath.Join(t.TempDir(), "workspace")
	os.MkdirAll(filepath.Join(ws, ".githooks"), 0o755)
	os.WriteFile(filepath.Join(ws, "README.md"), []byte("# app\n"), 0o644)
	os.WriteFile(filepath.Join(ws, ".githooks/pre-commit"), []byte("#!/bin/sh\ntest -n \"$(git diff --cached --name-only)\"\n"), 0o755)
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"commit", "-qm", "app"}, {"config", "core.hooksPath", ".githooks"}} {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...)
		cmd.Dir = ws
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if out, err := exec.Command("chown", "-R", "65532:65532", ws).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v\n%s", err, out)
	}
	scan, err := probes.ScanWorkspace(t.Context(), ws, "/workspace")
	if err != nil || len(scan.Problems) > 0 {
		t.Fatalf("seal: %v %+v", err, scan)
	}
	raw, _ := json.Marshal(probes.NewWorkspaceBaseline(scan, time.Now()))
	base := filepath.Join(t.TempDir(), "baseline.json")
	if err := os.WriteFile(base, raw, 0o444); err != nil {
		t.Fatal(err)
	}
	return ws, base
}

func phaseSandbox(p *policy.Policy, ws, base string) local.Sandbox {
	sb := local.SandboxFor(p, "")
	sb.Volumes = append(sb.Volumes, local.Volume{Source: ws, Target: "/workspace", Writable: true})
	sb.Mounts = append(sb.Mounts, local.Mount{Source: base, Target: "/run/phase/baseline.json"})
	return sb
}

// TestPhasesPlantAndNext: two runs share one workspace. The first is a
// phase that plants a hook, a core.hooksPath and a .bashrc line (the
// plant-* sabotages, as the sandbox's own uid); the second, a clean phase,
// fails naming each, with expected, actual and fix.
func TestPhasesPlantAndNext(t *testing.T) {
	testenv.RequireRoot(t)
	p, raw := load(t, phasesPolicy)
	ws, base := sharedWorkspace(t)

	first := phaseSandbox(p, ws, base)
	if err := first.Sabotage("plant-hook,plant-hooks-path,plant-bashrc"); err != nil {
		t.Fatal(err)
	}
	if _, err := runSandbox(t, p, raw, first, nil, time.Minute); err != nil {
		t.Fatalf("the planting phase: %v", err)
	}
	for _, f := range []string{".git/hooks/post-checkout", ".bashrc"} {
		if _, err := os.Stat(filepath.Join(ws, f)); err != nil {
			t.Fatalf("the first phase did not leave %s: %v", f, err)
		}
	}

	run, err := runSandbox(t, p, raw, phaseSandbox(p, ws, base), nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"/workspace/.git/hooks/post-checkout": false, "/workspace/.git/config core.hooksPath": false, "/workspace/.bashrc": false}
	for _, f := range run.Findings {
		if f.Check != probes.CheckPersistence {
			if f.Status != report.Pass {
				t.Errorf("%s: %s — %s", f.Name(), f.Status, report.ExpectedActual(f))
			}
			continue
		}
		if _, ok := want[f.Subject]; !ok || f.Status != report.Fail {
			t.Errorf("unexpected %s %s: %s", f.Status, f.Name(), report.ExpectedActual(f))
			continue
		}
		want[f.Subject] = true
		if f.Expected == "" || f.Actual == "" || f.Fix == "" {
			t.Errorf("%s: a failure needs expected, actual and fix: %+v", f.Name(), f)
		}
		t.Logf("%s: %s", f.Name(), f.Actual)
	}
	for s, seen := range want {
		if !seen {
			t.Errorf("the second phase does not name %s", s)
		}
	}
	if run.ExitCode() != report.ExitNonConformant {
		t.Errorf("exit %d, want 1", run.ExitCode())
	}
}

// TestPhasesCleanRuns: with the repository's own hooks sealed in the
// baseline, clean phases that do real work on the shared workspace (edit,
// commit: the committed pre-commit hook runs) pass 20 runs in a row.
func TestPhasesCleanRuns(t *testing.T) {
	testenv.RequireRoot(t)
	p, raw := load(t, phasesPolicy)
	ws, base := sharedWorkspace(t)
	const runs = 20
	start := time.Now()
	for i := 1; i <= runs; i++ {
		sb := phaseSandbox(p, ws, base)
		sb.Phase = []string{
			"cd /workspace",
			fmt.Sprintf("echo 'change %d' >> notes.txt", i),
			"git add notes.txt",
			fmt.Sprintf("git -c user.name=agent -c user.email=agent@example.invalid commit -qm 'phase %d'", i),
		}
		run, err := runSandbox(t, p, raw, sb, nil, time.Minute)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		var persist int
		for _, f := range run.Findings {
			if f.Status != report.Pass {
				t.Fatalf("run %d of %d: %s %s — %s (%s)", i, runs, f.Status, f.Name(), report.ExpectedActual(f), f.Evidence)
			}
			if f.Check == probes.CheckPersistence {
				persist++
				if i == runs {
					t.Logf("run %d: %s: %s (%s)", i, f.Name(), f.Actual, f.Evidence)
				}
			}
		}
		if persist != 1 || run.ExitCode() != report.ExitOK {
			t.Fatalf("run %d: %d phase.persistence findings, exit %d", i, persist, run.ExitCode())
		}
	}
	out, _ := exec.Command("git", "-C", ws, "-c", "safe.directory=*", "rev-list", "--count", "HEAD").Output()
	if strings.TrimSpace(string(out)) != fmt.Sprint(runs+1) {
		t.Errorf("the phases did not commit: %s commits", out)
	}
	t.Logf("%d clean phases in a row passed in %s", runs, time.Since(start).Round(time.Millisecond))
}

// TestPhasesCache: a package cache mounted read-only passes; mounted
// read-write (cache-writable), owned by another uid on a read-write mount
// (EACCES is not read-only), or read-only with a read-write mount under it,
// it fails.
func TestPhasesCache(t *testing.T) {
	testenv.RequireRoot(t)
	doc := strings.Replace(phasesPolicy, "phases: {workspace: /workspace, baseline: /run/phase/baseline.json}", "phases: {caches: [/cache]}", 1)
	p, raw := load(t, doc)
	cache := t.TempDir()
	os.MkdirAll(filepath.Join(cache, "_cacache/content-v2"), 0o755)
	os.Chmod(cache, 0o777)
	cases := []struct {
		name    string
		volumes []local.Volume
		sabot   string
		status  report.Status
		actual  string
	}{
		{"read-only", []local.Volume{{Source: cache, Target: "/cache"}}, "", report.Pass, "read-only mount"},
		{"read-write", []local.Volume{{Source: cache, Target: "/cache"}}, "cache-writable", report.Fail, "writable: a file was created"},
		{"another uid's, read-write", []local.Volume{{Source: filepath.Join(cache, "_cacache"), Target: "/cache", Writable: true}}, "", report.Fail, "permission error"},
		{"a read-write mount under it", []local.Volume{{Source: cache, Target: "/cache"}, {Source: t.TempDir(), Target: "/cache/_cacache/content-v2", Writable: true}}, "", report.Fail, "a read-write mount under the cache: /cache/_cacache/content-v2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sb := local.SandboxFor(p, "")
			sb.Volumes = c.volumes
			if err := sb.Sabotage(c.sabot); err != nil {
				t.Fatal(err)
			}
			run, err := runSandbox(t, p, raw, sb, nil, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			var hit *report.Finding
			for i, f := range run.Findings {
				if f.Check == "phase.cache-readonly" {
					hit = &run.Findings[i]
				} else if f.Status != report.Pass {
					t.Errorf("%s: %s — %s", f.Name(), f.Status, report.ExpectedActual(f))
				}
			}
			if hit == nil || hit.Status != c.status || !strings.Contains(hit.Actual, c.actual) || hit.Subject != "/cache" {
				t.Fatalf("want %s %q, got %+v", c.status, c.actual, hit)
			}
			if c.status == report.Fail && hit.Fix == "" {
				t.Errorf("a failure without a fix")
			}
			t.Logf("%s: %s (%s)", hit.Name(), hit.Actual, hit.Evidence)
		})
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 1 {
		t.Errorf("the checks left files in the cache: %v", entries)
	}
}

// TestCredsInReach: a sidecar of the sandbox's uid holding a key in its
// environment, and git's stored credentials in HOME, each fail by name;
// the planted value is in no output.
func TestCredsInReach(t *testing.T) {
	testenv.RequireRoot(t)
	p, raw := load(t, testPolicy)
	for _, c := range []struct{ sabotage, check, say string }{
		{"sidecar-secret", "creds.proc-environ", "AWS_SECRET_ACCESS_KEY"},
		{"git-credentials", "creds.files", "git's stored credentials"},
	} {
		t.Run(c.sabotage, func(t *testing.T) {
			sb := local.SandboxFor(p, "")
			if err := sb.Sabotage(c.sabotage); err != nil {
				t.Fatal(err)
			}
			run, err := runSandbox(t, p, raw, sb, nil, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			var hit *report.Finding
			for i, f := range run.Findings {
				if f.Check == c.check && f.Status == report.Fail {
					hit = &run.Findings[i]
				} else if f.Status != report.Pass {
					t.Errorf("%s: %s — %s", f.Name(), f.Status, report.ExpectedActual(f))
				}
			}
			if hit == nil || !strings.Contains(hit.Actual, c.say) || hit.Fix == "" {
				t.Fatalf("%s does not fail naming %q: %v", c.check, c.say, names(run.Findings))
			}
			t.Logf("%s: %s (%s)", hit.Name(), hit.Actual, hit.Evidence)
			for name, w := range map[string]report.Writer{"json": report.JSON{}, "junit": report.JUnit{}, "text": report.Text{Verbose: true}} {
				var buf strings.Builder
				if err := w.Write(&buf, run); err != nil {
					t.Fatal(err)
				}
				if strings.Contains(buf.String(), local.SabotageSecret) {
					t.Errorf("the %s output holds the planted credential", name)
				}
			}
		})
	}
}
