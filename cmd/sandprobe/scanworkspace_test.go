package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const wsSecret = "npm_PLANTEDtoken5f3a9c0e1d2b"

// gitRepo makes a small repository in a new directory: a commit, a
// committed hooks directory that core.hooksPath names (as husky sets it).
func gitRepo(t *testing.T) string {
	t.Helper()
	ws := filepath.Join(t.TempDir(), "ws")
	os.MkdirAll(filepath.Join(ws, ".githooks"), 0o755)
	os.WriteFile(filepath.Join(ws, "README.md"), []byte("# x\n"), 0o644)
	os.WriteFile(filepath.Join(ws, ".githooks/pre-commit"), []byte("#!/bin/sh\nexit 0\n"), 0o755)
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"commit", "-qm", "x"}, {"config", "core.hooksPath", ".githooks"}} {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...)
		cmd.Dir = ws
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return ws
}

// TestScanWorkspace: seal after the clone, compare between phases; a clean
// workspace exits 0, a planted hook, hooksPath and .bashrc line exit 1
// named by path and key, with no planted secret in any format.
func TestScanWorkspace(t *testing.T) {
	ws := gitRepo(t)
	out := t.TempDir()
	base := filepath.Join(out, "baseline.json")
	code, stdout, stderr := runApp(t, "", "scan-workspace", ws, "--seal", base, "--mount-path", "/workspace")
	if code != 0 || !strings.Contains(stdout, "sealed "+ws) || !strings.Contains(stdout, "sha256:") {
		t.Fatalf("seal: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runApp(t, "", "scan-workspace", ws, "--baseline", base, "--mount-path", "/workspace")
	if code != 0 || !strings.Contains(stdout, "1 pass") {
		t.Fatalf("clean: exit %d\n%s%s", code, stdout, stderr)
	}

	// What a phase leaves behind.
	os.WriteFile(filepath.Join(ws, ".git/hooks/post-checkout"), []byte("#!/bin/sh\necho "+wsSecret+"\n"), 0o755)
	f, _ := os.OpenFile(filepath.Join(ws, ".git/config"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("[core]\n\thooksPath = /tmp/" + wsSecret + "\n")
	f.Close()
	os.WriteFile(filepath.Join(ws, ".bashrc"), []byte("export NPM_TOKEN="+wsSecret+"\n"), 0o644)

	junit, jsonFile := filepath.Join(out, "r.xml"), filepath.Join(out, "r.json")
	for _, format := range []string{"text", "json", "junit"} {
		code, stdout, stderr = runApp(t, "", "scan-workspace", ws, "--baseline", base, "--mount-path", "/workspace", "-o", format, "--junit", junit, "--json", jsonFile)
		if code != 1 {
			t.Fatalf("-o %s: exit %d, want 1\n%s%s", format, code, stdout, stderr)
		}
		for _, want := range []string{"/workspace/.git/hooks/post-checkout", "/workspace/.git/config core.hooksPath", "/workspace/.bashrc"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("-o %s does not name %s:\n%s", format, want, stdout)
			}
		}
		for name, s := range map[string]string{"stdout": stdout, "stderr": stderr, "junit": readFile(t, junit), "json": readFile(t, jsonFile)} {
			if strings.Contains(s, wsSecret) {
				t.Errorf("-o %s: %s holds the planted secret", format, name)
			}
		}
	}
	var run struct {
		Findings []struct{ Check, Subject, Status, Fix string }
	}
	if err := json.Unmarshal([]byte(readFile(t, jsonFile)), &run); err != nil || len(run.Findings) != 3 {
		t.Fatalf("json report: %v %+v", err, run)
	}
	for _, f := range run.Findings {
		if f.Check != "phase.persistence" || f.Status != "fail" || f.Fix == "" {
			t.Errorf("%+v", f)
		}
	}
}

// TestScanWorkspaceBadInput: one line naming the field, exit 2, nothing written.
func TestScanWorkspaceBadInput(t *testing.T) {
	ws := gitRepo(t)
	out := t.TempDir()
	bad := filepath.Join(out, "bad.json")
	os.WriteFile(bad, []byte(`{"schema":"sandprobe.dev/workspace-baseline/v1","items":[{"path":"x","kind":"rootkit","digest":"00"}]}`), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"scan-workspace"}, "want DIR"},
		{[]string{"scan-workspace", filepath.Join(out, "nope")}, "DIR: " + filepath.Join(out, "nope") + ": no such file or directory"},
		{[]string{"scan-workspace", ws, "--seal", filepath.Join(ws, "baseline.json")}, "--seal: " + filepath.Join(ws, "baseline.json") + " is inside " + ws},
		{[]string{"scan-workspace", ws, "--baseline", filepath.Join(ws, ".git", "b.json")}, "--baseline: "},
		{[]string{"scan-workspace", ws, "--baseline", bad}, `--baseline: ` + bad + `: items[0].kind: unknown kind "rootkit"`},
		{[]string{"scan-workspace", ws, "--baseline", bad, "--seal", filepath.Join(out, "s.json")}, "give one"},
		{[]string{"scan-workspace", ws, "--mount-path", "workspace"}, `--mount-path: want a clean absolute path, got "workspace"`},
		{[]string{"scan-workspace", ws, "-o", "yaml"}, "-o: want text, json or junit"},
	}
	for _, c := range cases {
		code, stdout, stderr := runApp(t, "", c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v: exit %d, stderr %q (want one line with %q), stdout %q", c.args, code, stderr, c.want, stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "baseline.json")); err == nil {
		t.Error("a refused seal wrote its file")
	}
	if entries, _ := os.ReadDir(out); len(entries) != 1 {
		t.Errorf("files left behind: %v", entries)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
