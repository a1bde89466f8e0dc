package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

func runApp(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := newApp(strings.NewReader(stdin), &out, &errb).Run(context.Background(), args)
	return code, out.String(), errb.String()
}

// TestValidateBadPolicies: every malformed policy exits 2 with a one-line
// problem naming its YAML path, on stderr.
func TestValidateBadPolicies(t *testing.T) {
	files, _ := filepath.Glob("../../policy/testdata/invalid-*.yaml")
	if len(files) < 20 {
		t.Fatalf("want ≥ 20 invalid policies, have %d", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, _ := os.ReadFile(f)
			want := ""
			for _, line := range strings.Split(string(data), "\n") {
				if w, ok := strings.CutPrefix(line, "# want: "); ok {
					want, _, _ = strings.Cut(w, ":")
				}
			}
			code, stdout, stderr := runApp(t, "", "validate", "-f", f)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr %s", code, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout should be empty, got %q", stdout)
			}
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr does not name %q:\n%s", want, stderr)
			}
			for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
				if !strings.HasPrefix(line, f) {
					t.Errorf("problem line does not start with the file name: %q", line)
				}
			}
		})
	}
}

func TestValidateGoodPolicies(t *testing.T) {
	for _, f := range []string{"../../fixtures/policy.yaml", "../../fixtures/local-policy.yaml"} {
		code, stdout, stderr := runApp(t, "", "validate", "-f", f)
		if code != 0 || !strings.Contains(stdout, "valid SandboxPolicy") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", f, code, stdout, stderr)
		}
	}
	data, _ := os.ReadFile("../../fixtures/policy.yaml")
	if code, _, stderr := runApp(t, string(data), "validate", "-f", "-"); code != 0 {
		t.Errorf("stdin: exit %d: %s", code, stderr)
	}
}

// TestValidateWarnings: a valid policy that cannot prove its verdicts says
// so (exit 0: it is valid, but a run would be inconclusive or cut short).
func TestValidateWarnings(t *testing.T) {
	head := "apiVersion: sandprobe.dev/v1alpha1\nkind: SandboxPolicy\nmetadata: {name: t}\nspec:\n  selector: {matchLabels: {sandbox: \"true\"}}\n  identity: {uid: 65532, gid: 65532}\n"
	cases := []struct{ name, egress, want string }{
		{"only wildcard allowances", `  egress: {allow: [{host: "*.github.com", reason: git}], mustFail: {ips: [192.0.2.1]}}`, "warning: spec.egress.allow: no concrete allowed target to probe"},
		{"deadline shorter than the egress bound", `  egress: {allow: [{host: api.example.com, reason: x}], mustFail: {ips: [192.0.2.1, 192.0.2.2, 192.0.2.3]}, concurrency: 1, timeout: 30s}
  probe: {deadline: 1m}`, "warning: spec.probe.deadline: 1m0s is shorter than the egress run can take"},
		{"docker network none with a proxy", `  docker: {network: none}
  egress: {proxy: "http://proxy:3128", allow: [{host: api.example.com, reason: x}], mustFail: {ips: [192.0.2.1]}}`, "warning: spec.docker.network: none, but spec.egress.proxy is declared"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runApp(t, head+c.egress+"\n", "validate", "-f", "-")
			if code != 0 || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, c.want)
			}
		})
	}
}

// TestValidateEffective: every policy we ship prints with every default
// filled in and leaves no weakening implicit; the output is itself a valid
// policy meaning the same; a weakening a policy does not write fails it.
func TestValidateEffective(t *testing.T) {
	files, _ := filepath.Glob("../../fixtures/*.yaml")
	files = append(files, "../../manifests/policy.yaml", "../../hack/e2e/overlay/policy.yaml")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			code, stdout, stderr := runApp(t, "", "validate", "--effective", "-f", f)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if strings.Contains(stdout, "NOT WRITTEN") || stderr != "" {
				t.Errorf("implicit weakening:\n%s%s", stdout, stderr)
			}
			for _, want := range []string{"uid: ", "readOnlyRoot: ", "requireDigest: ", "classNames:", "arbitraryNames: ", "# weakenings"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("effective policy lacks %q", want)
				}
			}
			// The printed policy loads, and prints the same again.
			code, again, stderr := runApp(t, stdout, "validate", "--effective", "-f", "-")
			if code != 0 {
				t.Fatalf("effective policy does not validate: exit %d: %s", code, stderr)
			}
			// The same policy; only the weakenings' line numbers differ.
			_, body, _ := strings.Cut(stdout, "\n")
			_, body2, _ := strings.Cut(again, "\n")
			body, _, _ = strings.Cut(body, "# weakenings")
			body2, _, _ = strings.Cut(body2, "# weakenings")
			if body != body2 {
				t.Errorf("effective of effective differs:\n%s\n---\n%s", body, body2)
			}
		})
	}
	t.Run("runtime left out", func(t *testing.T) {
		doc := "apiVersion: sandprobe.dev/v1alpha1\nkind: SandboxPolicy\nmetadata: {name: t}\nspec:\n  selector: {matchLabels: {sandbox: \"true\"}}\n"
		code, stdout, stderr := runApp(t, doc, "validate", "--effective", "-f", "-")
		if code != 2 || !strings.Contains(stderr, "spec.runtime.classNames") || !strings.Contains(stdout, "NOT WRITTEN") {
			t.Errorf("exit %d, stdout:\n%s\nstderr: %s", code, stdout, stderr)
		}
		// Without --effective it is a warning, not a refusal.
		code, _, stderr = runApp(t, doc, "validate", "-f", "-")
		if code != 0 || !strings.Contains(stderr, "warning: spec.runtime.classNames") {
			t.Errorf("plain validate: exit %d, stderr %s", code, stderr)
		}
	})
	t.Run("weakening written", func(t *testing.T) {
		doc := "apiVersion: sandprobe.dev/v1alpha1\nkind: SandboxPolicy\nmetadata: {name: t}\nspec:\n  selector: {matchLabels: {sandbox: \"true\"}}\n  runtime: {classNames: []}\n  identity: {uid: 0, gid: 0, allowRoot: true}\n  filesystem: {readOnlyRoot: false}\n"
		code, stdout, stderr := runApp(t, doc, "validate", "--effective", "-f", "-")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		for _, want := range []string{"spec.identity.allowRoot: true", "written at line 7", "spec.filesystem.readOnlyRoot: false", "written at line 8", "uid: 0"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("lacks %q:\n%s", want, stdout)
			}
		}
	})
}

func TestUsageErrorsExit2(t *testing.T) {
	cases := [][]string{
		{},
		{"frobnicate"},
		{"run", "--no-such-flag"},
		{"run"},
		{"run", "--policy", "../../fixtures/policy.yaml", "--backend", "moon"},
		{"run", "--policy", "../../fixtures/policy.yaml", "-o", "yaml"},
		{"run", "--policy", "../../fixtures/local-policy.yaml", "--sabotage", "everything"},
		{"validate", "-f", "/nonexistent/policy.yaml"},
		{"validate", "-f", "../../fixtures/policy.yaml", "extra-arg"},
		{"checks", "-o", "xml"},
		{"probe", "--policy", "../../policy/testdata/invalid-negative-uid.yaml"},
	}
	for _, args := range cases {
		if code, _, _ := runApp(t, "", args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// TestDocsChecksUpToDate: docs/checks.md is generated from the catalogue.
func TestDocsChecksUpToDate(t *testing.T) {
	code, out, _ := runApp(t, "", "checks", "-o", "markdown")
	if code != 0 {
		t.Fatal(code)
	}
	have, err := os.ReadFile("../../docs/checks.md")
	if err != nil || string(have) != out {
		t.Fatalf("docs/checks.md is stale: run `make docs`")
	}
}

// TestRunWritesReportsAtomically: the JUnit and JSON files appear whole, and
// a report that cannot be written makes the run exit 3 without leaving a
// partial file behind.
func TestRunWritesReportsAtomically(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	junitPath, jsonPath := filepath.Join(dir, "r.xml"), filepath.Join(dir, "r.json")
	code, stdout, stderr := runAppBin(t, "run", "--policy", "../../fixtures/local-policy.yaml", "--junit", junitPath, "--json", jsonPath)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, p := range []string{junitPath, jsonPath} {
		if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", p, err)
		}
	}
	bad := filepath.Join(dir, "no-such-dir", "r.xml")
	code, _, stderr = runAppBin(t, "run", "--policy", "../../fixtures/local-policy.yaml", "--junit", bad)
	// Found before the run, as a mistake on the command line: exit 2,
	// "FLAG FILE: message".
	if code != 2 || !strings.HasPrefix(stderr, "sandprobe run: --junit "+bad+": cannot write: ") {
		t.Fatalf("unwritable report: exit %d, stderr %q", code, stderr)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("unexpected files: %v", entries)
	}
}

// runAppBin runs the real binary (the local backend re-executes itself).
func runAppBin(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return testenv.Exec(t, testenv.Binary(t), args...)
}

// TestValidatePortZeroAndEffective: a port written as 0 is an error on its
// line (not silently 443); --effective fills the defaults the probe and the
// runners apply later — a must-fail target's port, the probe image, the
// isolation each runtime class is held to — says what an empty placement
// does, and the plain summary names each weakening the policy declares.
func TestValidatePortZeroAndEffective(t *testing.T) {
	code, _, stderr := runApp(t, "", "validate", "-f", "../../policy/testdata/invalid-port-zero.yaml")
	if code != 2 || !strings.Contains(stderr, "invalid-port-zero.yaml:11: spec.egress.allow[0].port: must be 1–65535, got 0") ||
		!strings.Contains(stderr, "spec.egress.mustFail.hosts[0].port: must be 1–65535, got 0") || strings.Count(stderr, "\n") != 2 {
		t.Errorf("port 0: exit %d, stderr %q; want 2 and one line per zero port", code, stderr)
	}

	code, out, stderr := runApp(t, "", "validate", "--effective", "-f", fx+"policy.yaml")
	if code != 0 {
		t.Fatalf("--effective: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"        - target: example.com\n          port: 443\n",
		"        - target: 1.1.1.1\n          port: 443\n",
		"    image: ghcr.io/sandprobe/sandprobe:latest\n",
		"    isolation:\n      gvisor: gvisor\n      kata: vm\n",
		"  # default: the sandbox node pool",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--effective lacks %q:\n%s", want, out)
		}
	}

	code, out, stderr = runApp(t, "", "validate", "-f", fx+"local-policy.yaml")
	if code != 0 || !strings.Contains(out, "2 weakening(s) declared (spec.runtime.classNames: []; spec.image.requireDigest: false)") {
		t.Errorf("summary: exit %d, %q; want the weakening named", code, out)
	}
	if strings.Contains(stderr, "spec.probe.image") {
		t.Errorf("a policy without requireDigest is warned about its probe image: %s", stderr)
	}
	// requireDigest (the default) and no pinned probe image: said now, not
	// when render refuses it.
	code, _, stderr = runApp(t, "", "validate", "-f", fx+"policy.yaml")
	if code != 0 || !strings.Contains(stderr, "warning: spec.probe.image: spec.image.requireDigest is set but the probe image ghcr.io/sandprobe/sandprobe:latest (the default) is not pinned by digest") {
		t.Errorf("unpinned probe image: exit %d, stderr %s", code, stderr)
	}
}

// TestCronJobStreams: run as the CronJob runs it (the kube backend, -o
// text, --log-format json) keeps the report on stdout and only JSON log
// records on stderr, also when it cannot reach the cluster: the container
// runtime's log files keep each line's stream, so a log pipeline reads
// the records and a person the report.
func TestCronJobStreams(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600)
	code, stdout, stderr := runApp(t, "", "run", "--backend=kube", "--kubeconfig", kc, "--policy=../../manifests/policy.yaml", "--control-namespace=sandprobe-system",
		"--per-node", "--probe-image=ghcr.io/sandprobe/sandprobe@sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae", "-o=text", "--log-format=json")
	if code != 3 || !strings.Contains(stdout, "COULD NOT CHECK (exit 3)") || strings.Contains(stdout, `{"time"`) {
		t.Fatalf("exit %d, stdout:\n%s", code, stdout)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec["msg"] == nil {
			t.Errorf("stderr line is no JSON log record: %q", l)
		}
	}
	if !strings.Contains(stderr, "cannot reach the cluster") {
		t.Errorf("the reason is not logged: %q", stderr)
	}
}
