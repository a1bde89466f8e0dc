package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

// --proxy-log mistakes are one line naming the flag, exit 2, before any
// probe runs.
func TestProxyLogFlagErrors(t *testing.T) {
	dir := t.TempDir()
	withProxy, _ := usageFiles(t)
	noProxy := filepath.Join(dir, "noproxy.yaml")
	os.WriteFile(noProxy, []byte(strings.Replace(usagePolicy, "    proxy: http://10.99.31.28:3128\n", "", 1)), 0o644)
	log := filepath.Join(dir, "access.log")
	os.WriteFile(log, nil, 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--policy", noProxy, "--proxy-log", log}, "--proxy-log: the policy declares no spec.egress.proxy"},
		{[]string{"--policy", withProxy, "--proxy-log", filepath.Join(dir, "missing.log")}, "--proxy-log " + filepath.Join(dir, "missing.log") + ": no such file or directory"},
		{[]string{"--policy", withProxy, "--proxy-log", dir}, "is a directory"},
		{[]string{"--policy", withProxy, "--proxy-log", log, "--proxy-log-format", "hubble"}, "--proxy-log-format: hubble flows are no proxy's record"},
		{[]string{"--policy", withProxy, "--proxy-log", log, "--proxy-log-format", "nginx"}, "--proxy-log-format: unknown log format"},
		{[]string{"--policy", withProxy, "--proxy-log", "pod/sandbox-system/egress-proxy"}, "a pod's log is read with --backend kube"},
		{[]string{"--policy", withProxy, "--backend", "kube", "--proxy-log", "pod/sandbox-system"}, "want pod/NAMESPACE/POD[/CONTAINER]"},
	} {
		code, out, errb := runApp(t, "", append([]string{"run"}, tc.args...)...)
		if code != 2 || !strings.Contains(errb, tc.want) || strings.Count(strings.TrimSpace(errb), "\n") > 0 || out != "" {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errb, tc.want)
		}
	}
}

// TestRunEgressLog: a run given the long record shows each allowance's use
// beside its verdict (metrics, page) without a verdict of its own: the
// record says nothing about the sandbox, so the exit code is the probe's.
func TestRunEgressLog(t *testing.T) {
	testenv.RequireRoot(t)
	_, log := usageFiles(t)
	raw, err := os.ReadFile(localPolicy)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	os.WriteFile(pol, append(raw, []byte("  egress:\n    allow:\n      - {host: api.lab.test, port: 443, reason: \"the model API\"}\n      - {host: git.lab.test, port: 443, reason: \"git fetch for the 2024 migration\"}\n")...), 0o644)
	metrics, html := filepath.Join(dir, "m.prom"), filepath.Join(dir, "page.html")
	code, stdout, stderr := runAppBin(t, "run", "--policy", pol, "--no-network", "--egress-log", log, "--metrics-file", metrics, "--html", html)
	if code != 0 {
		t.Fatalf("exit %d, want 0 (an unused allowance is no verdict of the run)\n%s\n%s", code, stdout, stderr)
	}
	got := fileSamples(t, metrics)
	for k, want := range map[string]float64{`sandprobe_egress_allowance_requests{allowance="api.lab.test:443"}`: 41, "sandprobe_egress_allowances_unused": 1} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
	page, _ := os.ReadFile(html)
	if !strings.Contains(string(page), `id="record"`) || !strings.Contains(string(page), "UNUSED") {
		t.Errorf("the page does not show the record beside the verdicts")
	}
	code, _, stderr = runApp(t, "", "run", "--policy", pol, "--egress-log", filepath.Join(dir, "missing.log"))
	if code != 2 || !strings.Contains(stderr, "--egress-log "+filepath.Join(dir, "missing.log")+": no such file or directory") {
		t.Errorf("a missing --egress-log: exit %d, %q", code, stderr)
	}
}
