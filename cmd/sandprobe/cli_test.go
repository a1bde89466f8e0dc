package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

// complete runs bash's completion of line (the cursor at its end) with the
// script `sandprobe completion bash` prints, sourced in a real bash, and
// returns the candidates. It runs in dir, for file names.
func complete(t *testing.T, bin, dir, line string) []string {
	t.Helper()
	// compopt works only inside a completion bash itself started; here it
	// would only set display options (nospace), so it is a no-op.
	script := `
PATH="$1:$PATH"
source /usr/share/bash-completion/bash_completion
source <(sandprobe completion bash)
compopt() { :; }
COMP_LINE="$2"
COMP_POINT=${#COMP_LINE}
read -r -a COMP_WORDS <<<"$COMP_LINE"
[[ $COMP_LINE == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
__start_sandprobe sandprobe "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
`
	cmd := exec.Command("bash", "--norc", "--noprofile", "-c", script, "bash", filepath.Dir(bin), line)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("complete %q: %v\n%s", line, err, out)
	}
	var got []string
	for _, w := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// With descriptions bash shows "run  (one cycle: …)" when there
		// are several; the word is what precedes the padding.
		if w, _, _ = strings.Cut(w, " "); w != "" {
			got = append(got, w)
		}
	}
	return got
}

// TestCompletionBash: the bash script completes subcommands, flags and the
// values of --backend (and of other closed-set flags) in a real bash.
func TestCompletionBash(t *testing.T) {
	if _, err := os.Stat("/usr/share/bash-completion/bash_completion"); err != nil {
		testenv.Missing(t, "bash-completion (hack/install-deps.sh)")
	}
	bin := testenv.Binary(t)
	dir := t.TempDir()
	for _, f := range []string{"policy.yaml", "pods.json", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		line      string
		want, not []string
		exactly   bool
	}{
		{line: "sandprobe ", want: []string{"run", "drift", "verify-image", "serve", "probe", "validate", "checks", "render", "copy-self", "completion", "help"}, not: []string{"install"}},
		{line: "sandprobe ver", want: []string{"verify-image", "version"}, exactly: true},
		{line: "sandprobe dr", want: []string{"drift"}, exactly: true},
		{line: "sandprobe run --backend ", want: []string{"local", "docker", "kube"}, exactly: true},
		{line: "sandprobe run --backend k", want: []string{"kube"}, exactly: true},
		{line: "sandprobe serve --policy p.yaml --backend d", want: []string{"docker"}, exactly: true},
		{line: "sandprobe run --back", want: []string{"--backend"}, exactly: true},
		{line: "sandprobe run --kube", want: []string{"--kubeconfig"}, exactly: true},
		{line: "sandprobe drift -o ", want: []string{"text", "json", "junit", "sarif"}, exactly: true},
		{line: "sandprobe run -o ", want: []string{"text", "json", "junit"}, not: []string{"sarif"}},
		{line: "sandprobe render --format ", want: []string{"yaml", "admission", "rbac", "docker", "docker-json", "proxy-allowlist"}, exactly: true},
		{line: "sandprobe help ve", want: []string{"verify-image", "version"}, exactly: true},
		{line: "sandprobe completion ", want: []string{"bash", "zsh", "fish", "powershell"}, exactly: true},
		{line: "sandprobe run --policy ", want: []string{"policy.yaml"}, exactly: true},
		{line: "sandprobe drift --policy policy.yaml -f ", want: []string{"policy.yaml", "pods.json"}, exactly: true},
		{line: "sandprobe validate -f ", want: []string{"policy.yaml"}, exactly: true},
	}
	for _, c := range cases {
		t.Run(c.line, func(t *testing.T) {
			got := complete(t, bin, dir, c.line)
			for _, w := range c.want {
				if !slices.Contains(got, w) {
					t.Errorf("want %q among %q", w, got)
				}
			}
			for _, w := range c.not {
				if slices.Contains(got, w) {
					t.Errorf("do not want %q among %q", w, got)
				}
			}
			if c.exactly && len(got) != len(c.want) {
				t.Errorf("got %q, want exactly %q", got, c.want)
			}
		})
	}
}

// TestCompletionScripts: zsh and fish get cobra's scripts too; an unknown
// shell is a usage error.
func TestCompletionScripts(t *testing.T) {
	for shell, want := range map[string]string{"zsh": "#compdef sandprobe", "fish": "complete -c sandprobe", "powershell": "Register-ArgumentCompleter"} {
		code, out, stderr := runApp(t, "", "completion", shell)
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("completion %s: exit %d, stdout lacks %q; stderr %s", shell, code, want, stderr)
		}
	}
	if code, _, stderr := runApp(t, "", "completion", "tcsh"); code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Errorf("completion tcsh: exit %d, stderr %q; want 2 and one line", code, stderr)
	}
}

// TestHelpGroupsFlags: `run -h` lists every flag once, under the section
// of the backend (or output, logging) it belongs to, in a fixed order; and
// `help run` says the same.
func TestHelpGroupsFlags(t *testing.T) {
	code, out, stderr := runApp(t, "", "run", "-h")
	if code != 0 {
		t.Fatalf("run -h: exit %d\n%s", code, stderr)
	}
	sections := []struct {
		title string
		flags []string
	}{
		{"Flags:", []string{"--policy", "--backend", "--deadline", "--no-network", "-h, --help"}},
		{"Local flags:", []string{"--netns", "--sabotage"}},
		{"Docker flags:", []string{"--image", "--runtime", "--docker-host", "--env"}},
		{"Kube flags:", []string{"--kubeconfig", "--context", "-n, --namespace", "--probe-image", "--per-node", "--drift"}},
		{"Output flags:", []string{"-o, --output", "--junit", "--json", "--metrics-file", "--pushgateway", "--html"}},
		{"Logging flags:", []string{"--log-format", "-v, --verbose"}},
	}
	rest := out
	for i, s := range sections {
		_, after, ok := strings.Cut(rest, "\n"+s.title+"\n")
		if !ok {
			t.Fatalf("no section %q after the previous one:\n%s", s.title, out)
		}
		body, _, _ := strings.Cut(after, "\n\n")
		for _, f := range s.flags {
			if !strings.Contains(body, "  "+f+" ") {
				t.Errorf("%s lacks %s:\n%s", s.title, f, body)
			}
		}
		if i+1 < len(sections) && strings.Contains(body, sections[i+1].flags[0]+" ") {
			t.Errorf("%s holds %s of the next section", s.title, sections[i+1].flags[0])
		}
		rest = after
	}
	for _, f := range []string{"--policy ", "--kubeconfig ", "--netns "} {
		if n := strings.Count(out, "  "+f); n != 1 {
			t.Errorf("%s listed %d times", f, n)
		}
	}
	if code, again, _ := runApp(t, "", "help", "run"); code != 0 || again != out {
		t.Errorf("help run: exit %d, differs from run -h:\n%s", code, again)
	}
}

// TestLegacyFlagSpellings: the command lines written for Go's flag package
// (-policy FILE, -format=docker, --o json, -v) still mean what they meant.
func TestLegacyFlagSpellings(t *testing.T) {
	const pol = "../../fixtures/policy.yaml"
	img := "example.test/sandprobe@sha256:" + strings.Repeat("ab", 32)
	cases := []struct{ old, now []string }{
		{[]string{"validate", "-policy", pol}, []string{"validate", "--policy", pol}},
		{[]string{"validate", "--f", pol}, []string{"validate", "-f", pol}},
		{[]string{"validate", "-f=" + pol, "-effective"}, []string{"validate", "--filename", pol, "--effective"}},
		{[]string{"checks", "--o", "json"}, []string{"checks", "-o", "json"}},
		{[]string{"checks", "-o=json"}, []string{"checks", "--output=json"}},
		{[]string{"checks", "-output", "markdown"}, []string{"checks", "-o", "markdown"}},
		{[]string{"render", "-policy", pol, "-format", "docker", "-name", "x", "-nonce", "-n"}, []string{"render", "--policy", pol, "--format=docker", "--name=x", "--nonce=-n"}},
		{[]string{"render", "-policy=" + pol, "-namespace", "ns1", "-probe-image", img}, []string{"render", "--policy", pol, "-n", "ns1", "--probe-image", img}},
		{[]string{"render", "--policy", pol, "--probe_image", img}, []string{"render", "--policy", pol, "--probe-image", img}},
	}
	for _, c := range cases {
		codeOld, outOld, errOld := runApp(t, "", c.old...)
		codeNow, outNow, errNow := runApp(t, "", c.now...)
		if codeOld != 0 || codeNow != 0 || outOld != outNow || errOld != errNow {
			t.Errorf("%q (exit %d) differs from %q (exit %d):\n%s%s\n---\n%s%s", c.old, codeOld, c.now, codeNow, outOld, errOld, outNow, errNow)
		}
	}
	// The same through the flags a bad value is reported under.
	for _, args := range [][]string{
		{"run", "-policy", pol, "-backend", "moon"},
		{"run", "-policy", pol, "-deadline", "soon"},
		{"run", "--policy", pol, "-v=maybe"},
	} {
		code, _, stderr := runApp(t, "", args...)
		if code != 2 || !strings.Contains(stderr, "--") || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%q: exit %d, stderr %q; want 2 and one line naming the flag", args, code, stderr)
		}
	}
}

// TestUsageErrorsOneLine: a mistake on the command line is one line on
// stderr naming the flag, command or argument, and exit 2.
func TestUsageErrorsOneLine(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"rnu"}, `did you mean "run"?`},
		{[]string{"run", "--no-such-flag"}, "--no-such-flag"},
		{[]string{"run", "-x"}, "'x'"},
		{[]string{"validate", "-nosuch"}, "'n' in -nosuch"},
		{[]string{"drift", "--timeout", "forever"}, `"--timeout"`},
		{[]string{"serve", "--history", "many"}, `"--history"`},
		{[]string{"run", "--policy"}, "--policy"},
		{[]string{"validate", "-f", "../../fixtures/policy.yaml", "extra"}, `unexpected argument "extra"`},
		{[]string{"copy-self"}, "DEST"},
		{[]string{"install"}, "DEST"},
		{[]string{"help", "frobnicate"}, `unknown help topic "frobnicate"`},
	}
	for _, c := range cases {
		code, stdout, stderr := runApp(t, "", c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || stdout != "" {
			t.Errorf("%q: exit %d, stderr %q, stdout %d bytes; want 2 and one line with %q", c.args, code, stderr, len(stdout), c.want)
		}
	}
}

// TestDocsCommandLines: every sandprobe command line in the README's and
// docs' shell blocks still parses (run with -h appended, so the binary
// reads every flag and value, then stops): the cobra CLI took no spelling
// away from them.
func TestDocsCommandLines(t *testing.T) {
	bin := testenv.Binary(t)
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	fence := regexp.MustCompile("(?ms)^```(?:sh|bash|console)\n(.*?)^```$")
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fence.FindAllStringSubmatch(string(data), -1) {
			var lines []string
			for _, line := range strings.Split(strings.ReplaceAll(m[1], "\\\n", " "), "\n") {
				line, _, _ = strings.Cut(line, " #")  // a trailing comment
				line, _, _ = strings.Cut(line, " >")  // a redirection
				line, _, _ = strings.Cut(line, " 2>") // a redirection
				line = strings.ReplaceAll(line, "<(", "")
				lines = append(lines, line)
			}
			for _, c := range sandprobeCommands(t, strings.Join(lines, "\n")) {
				if len(c.args) == 0 || slices.Contains(c.args, "<TAB>") {
					continue
				}
				n++
				if code, _, stderr := testenv.Exec(t, bin, append(slices.Clone(c.args), "-h")...); code != 0 {
					t.Errorf("%s: sandprobe %s: exit %d: %s", filepath.Base(f), strings.Join(c.args, " "), code, stderr)
				}
			}
		}
	}
	t.Logf("%d command lines", n)
	if n < 20 {
		t.Errorf("found only %d sandprobe command lines in the docs", n)
	}
}

// TestCompletionNetns: --netns completes the named network namespaces
// that exist (ip netns add puts them in /run/netns), nothing else.
func TestCompletionNetns(t *testing.T) {
	var want []string
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		want = append(want, e.Name())
	}
	code, out, _ := runApp(t, "", "__complete", "run", "--netns", "")
	got := strings.Split(strings.TrimSpace(out), "\n")
	got = got[:len(got)-1] // the directive line
	if code != 0 || !slices.Equal(got, want) {
		t.Errorf("exit %d, completions %q, want %q", code, got, want)
	}
}

// TestManifestCommandLines: every container in manifests/ that runs
// /sandprobe (the CronJob) has args the binary parses: a flag renamed or
// dropped in the CLI cannot silently break the deployed runner.
func TestManifestCommandLines(t *testing.T) {
	bin := testenv.Binary(t)
	var files []string
	err := filepath.WalkDir("../../manifests", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// containers finds every map with a command that runs /sandprobe.
	var containers func(v any, found *[][]string)
	containers = func(v any, found *[][]string) {
		switch v := v.(type) {
		case map[string]any:
			if cmd, ok := v["command"].([]any); ok && len(cmd) > 0 && cmd[0] == "/sandprobe" {
				var args []string
				for _, a := range append(cmd[1:], asList(v["args"])...) {
					args = append(args, regexp.MustCompile(`\$\([A-Z_]+\)`).ReplaceAllString(fmt.Sprint(a), "x"))
				}
				*found = append(*found, args)
			}
			for _, x := range v {
				containers(x, found)
			}
		case []any:
			for _, x := range v {
				containers(x, found)
			}
		}
	}
	var found [][]string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
			var v any
			if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
				continue // not every file is a manifest (kustomize components)
			}
			containers(v, &found)
		}
	}
	if len(found) == 0 {
		t.Fatal("no container in manifests/ runs /sandprobe")
	}
	for _, args := range found {
		if code, _, stderr := testenv.Exec(t, bin, append(args, "-h")...); code != 0 {
			t.Errorf("sandprobe %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}
