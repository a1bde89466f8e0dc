package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

const ciDoc = "../../docs/ci.md"

// ciBlocks are the fenced code blocks of docs/ci.md: the YAML ones by the
// file name on their first line ("# .gitlab-ci.yml"), the shell ones under
// "sh".
func ciBlocks(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(ciDoc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fence := regexp.MustCompile("(?ms)^```(yaml|sh)\n(.*?)^```$")
	for _, m := range fence.FindAllStringSubmatch(string(data), -1) {
		key := m[1]
		if first, _, _ := strings.Cut(m[2], "\n"); key == "yaml" && strings.HasPrefix(first, "# ") {
			key = strings.TrimPrefix(first, "# ")
		}
		out[key] += m[2]
	}
	return out
}

// shellCommand is one `sandprobe …` invocation in a script.
type shellCommand struct{ args []string }

// flagsOf are a subcommand's flags as its -h lists them (Go's flag package
// or pflag), each with whether it takes a value.
func flagsOf(t testing.TB, bin, sub string) map[string]bool {
	t.Helper()
	code, stdout, stderr := testenv.Exec(t, bin, sub, "-h")
	if code != 0 {
		t.Fatalf("sandprobe %s -h: exit %d (no such command?)\n%s", sub, code, stderr)
	}
	flags := map[string]bool{}
	// "  -image string", "  -v\tverbose…" (flag) or "  -n, --namespace string   …" (pflag).
	line := regexp.MustCompile(`(?m)^\s+(?:-([A-Za-z]), )?--?([a-z0-9][a-z0-9-]*)(?: ([a-z][A-Za-z0-9]*))?(?:\t|\s{2,}|$)`)
	for _, m := range line.FindAllStringSubmatch(stdout+stderr, -1) {
		short, name, typ := m[1], m[2], m[3]
		flags[name] = typ != ""
		if short != "" {
			flags[short] = typ != ""
		}
	}
	if len(flags) == 0 {
		t.Fatalf("sandprobe %s -h lists no flags:\n%s%s", sub, stdout, stderr)
	}
	return flags
}

// sandprobeCommands finds every sandprobe invocation in a shell script:
// continued lines joined, split at ;, &&, || and |, words unquoted.
func sandprobeCommands(t *testing.T, script string) []shellCommand {
	t.Helper()
	script = strings.ReplaceAll(script, "\\\n", " ")
	var out []shellCommand
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, part := range regexp.MustCompile(`&&|\|\||;|\|`).Split(line, -1) {
			words := shellWords(t, part)
			// Skip environment assignments (CGO_ENABLED=0 sandprobe …).
			for len(words) > 0 && regexp.MustCompile(`^[A-Z_]+=`).MatchString(words[0]) {
				words = words[1:]
			}
			if len(words) > 0 && words[0] == "sandprobe" {
				out = append(out, shellCommand{args: words[1:]})
			}
		}
	}
	return out
}

// shellWords splits on blanks, honouring single and double quotes, and
// stands a value in for each variable ($IMAGE, ${{ github.sha }}).
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	s = regexp.MustCompile(`\$\{\{[^}]*\}\}|\$\{?[A-Za-z_]+\}?`).ReplaceAllString(s, "agent:test")
	var words []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		t.Fatalf("unbalanced quote in %q", s)
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// checkCommand: the subcommand exists, every word is one of its flags (or a
// flag's value), nothing is positional, and the binary itself accepts the
// whole command line (run with -h appended, so it parses every flag and
// value, then stops). It returns the flags' values.
func checkCommand(t testing.TB, bin string, c shellCommand) map[string]string {
	t.Helper()
	if len(c.args) == 0 {
		t.Fatal("a bare `sandprobe`")
	}
	sub, args := c.args[0], c.args[1:]
	known := flagsOf(t, bin, sub)
	values := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			t.Errorf("sandprobe %s: %q is positional: the recipe would not run", sub, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		takes, ok := known[name]
		switch {
		case !ok:
			t.Errorf("sandprobe %s: no flag %s", sub, a)
		case takes && !hasValue:
			if i+1 >= len(args) {
				t.Errorf("sandprobe %s: %s wants a value", sub, a)
				continue
			}
			i++
			value = args[i]
		}
		values[name] = value
	}
	code, _, stderr := testenv.Exec(t, bin, append(slices.Clone(c.args), "-h")...)
	if code != 0 {
		t.Errorf("sandprobe %s: the binary refuses the recipe's flags (exit %d): %s", strings.Join(c.args, " "), code, stderr)
	}
	return values
}

// TestCIRecipes: docs/ci.md's GitHub Actions workflow and GitLab CI job
// parse as YAML, run verify-image and drift with flags the binary has, and
// upload exactly the files those commands write: the JUnit of both, the
// SARIF of drift.
func TestCIRecipes(t *testing.T) {
	bin := testenv.Binary(t)
	blocks := ciBlocks(t)
	for _, name := range []string{".github/workflows/sandbox-image.yml", ".gitlab-ci.yml", "sh"} {
		if blocks[name] == "" {
			t.Fatalf("docs/ci.md has no %s block", name)
		}
	}

	// scripts runs every sandprobe command of the scripts and collects
	// what they write.
	scripts := func(t *testing.T, ss []string) (junit, sarif []string) {
		t.Helper()
		subs := map[string]bool{}
		for _, s := range ss {
			for _, c := range sandprobeCommands(t, s) {
				v := checkCommand(t, bin, c)
				subs[c.args[0]] = true
				if f := v["junit"]; f != "" {
					junit = append(junit, f)
				}
				if f := v["sarif"]; f != "" {
					sarif = append(sarif, f)
				}
			}
		}
		for _, want := range []string{"verify-image", "drift"} {
			if !subs[want] {
				t.Errorf("runs no sandprobe %s", want)
			}
		}
		if len(junit) == 0 || len(sarif) == 0 {
			t.Errorf("writes JUnit %v and SARIF %v: want both", junit, sarif)
		}
		return junit, sarif
	}

	t.Run("GitHub Actions", func(t *testing.T) {
		var wf struct {
			On          any               `json:"on"`
			True        any               `json:"true"` // YAML 1.1 reads the key on as true
			Permissions map[string]string `json:"permissions"`
			Jobs        map[string]struct {
				RunsOn string `json:"runs-on"`
				Steps  []struct {
					Name string            `json:"name"`
					Uses string            `json:"uses"`
					Run  string            `json:"run"`
					If   string            `json:"if"`
					With map[string]string `json:"with"`
				} `json:"steps"`
			} `json:"jobs"`
		}
		if err := yaml.Unmarshal([]byte(blocks[".github/workflows/sandbox-image.yml"]), &wf); err != nil {
			t.Fatalf("the workflow is not YAML: %v", err)
		}
		if (wf.On == nil && wf.True == nil) || len(wf.Jobs) != 1 {
			t.Fatalf("on %v, %d jobs: want triggers and one job", wf.On, len(wf.Jobs))
		}
		if wf.Permissions["security-events"] != "write" {
			t.Errorf("permissions %v: the SARIF upload needs security-events: write", wf.Permissions)
		}
		for name, job := range wf.Jobs {
			var runs []string
			var junitUp, sarifUp []string
			for _, s := range job.Steps {
				switch {
				case s.Run != "":
					runs = append(runs, s.Run)
				case strings.HasPrefix(s.Uses, "github/codeql-action/upload-sarif@"):
					sarifUp = append(sarifUp, s.With["sarif_file"])
				case strings.HasPrefix(s.Uses, "mikepenz/action-junit-report@"):
					junitUp = append(junitUp, strings.Split(s.With["report_paths"], ",")...)
				}
				if s.Uses != "" && !strings.HasPrefix(s.Uses, "actions/") && !strings.Contains(s.If, "cancelled()") && !strings.Contains(s.If, "always()") {
					t.Errorf("job %s step %q: an upload must run after a failing check (if: ${{ !cancelled() }})", name, s.Name)
				}
			}
			junit, sarif := scripts(t, runs)
			slices.Sort(junit)
			slices.Sort(junitUp)
			if !slices.Equal(junit, junitUp) || !slices.Equal(sarif, sarifUp) {
				t.Errorf("job %s uploads JUnit %v and SARIF %v; its commands write %v and %v", name, junitUp, sarifUp, junit, sarif)
			}
		}
	})

	t.Run("GitLab CI", func(t *testing.T) {
		var jobs map[string]struct {
			Script    []string `json:"script"`
			Artifacts struct {
				When    string   `json:"when"`
				Paths   []string `json:"paths"`
				Reports struct {
					JUnit []string `json:"junit"`
				} `json:"reports"`
			} `json:"artifacts"`
		}
		if err := yaml.Unmarshal([]byte(blocks[".gitlab-ci.yml"]), &jobs); err != nil {
			t.Fatalf("the GitLab CI file is not YAML of jobs: %v", err)
		}
		if len(jobs) != 1 {
			t.Fatalf("%d jobs, want 1", len(jobs))
		}
		for name, job := range jobs {
			junit, sarif := scripts(t, []string{strings.Join(job.Script, "\n")})
			if job.Artifacts.When != "always" {
				t.Errorf("job %s: artifacts when %q: a failing check must still publish its reports", name, job.Artifacts.When)
			}
			up := slices.Clone(job.Artifacts.Reports.JUnit)
			slices.Sort(up)
			slices.Sort(junit)
			if !slices.Equal(junit, up) {
				t.Errorf("job %s: reports junit %v; its commands write %v", name, up, junit)
			}
			for _, f := range sarif {
				kept := false
				for _, p := range job.Artifacts.Paths {
					kept = kept || f == p || strings.HasPrefix(f, strings.TrimSuffix(p, "/")+"/")
				}
				if !kept {
					t.Errorf("job %s: the SARIF %s is not kept (artifacts paths %v)", name, f, job.Artifacts.Paths)
				}
			}
		}
	})

	t.Run("any CI", func(t *testing.T) {
		scripts(t, []string{blocks["sh"]})
	})
}

// TestCIRecipeCheckerCatchesMistakes: a misspelt flag, a flag another
// command has, a positional word and an unknown command are each caught.
func TestCIRecipeCheckerCatchesMistakes(t *testing.T) {
	bin := testenv.Binary(t)
	for _, c := range []string{
		"sandprobe verify-image --imag x --policy p.yaml",
		"sandprobe verify-image --image x --sarif out.sarif",
		"sandprobe drift --policy p.yaml deploy/",
		"sandprobe verify --image x",
	} {
		ft := &fakeT{TB: t}
		func() {
			defer func() { recover() }()
			for _, cmd := range sandprobeCommands(t, c) {
				checkCommand(ft, bin, cmd)
			}
		}()
		if !ft.failed {
			t.Errorf("%q passed the recipe check", c)
		}
	}
}

// fakeT records failures instead of failing the test, so the checker can be
// shown to fail.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Errorf(string, ...any) { f.failed = true }
func (f *fakeT) Fatalf(string, ...any) { f.failed = true; panic("fatal") }
func (f *fakeT) Fatal(...any)          { f.failed = true; panic("fatal") }
func (f *fakeT) Helper()               {}
