package main

import (
	"strings"
	"testing"
)

// TestRenderAdmission: `render --format admission` prints the policy
// ConfigMap, the admission policy naming the selector and the allowed
// classes, and its binding; a policy it cannot express is bad input.
func TestRenderAdmission(t *testing.T) {
	cases := []struct {
		name, policy string
		args         []string
		code         int
		stdout       []string // each must appear
		stderr       string
	}{
		{name: "reference policy", policy: "../../fixtures/policy.yaml", code: 0, stdout: []string{
			"kind: ConfigMap\n", "name: sandprobe-policy\n", "namespace: sandprobe-system\n", "metadata: {name: agent-sandbox}",
			"kind: ValidatingAdmissionPolicy\n", "name: sandprobe-sandbox-runtime\n", "sandbox: \"true\"", `in ["kata", "gvisor"]`,
			"failurePolicy: Fail", "- CREATE", "allows only kata, gvisor",
			"kind: ValidatingAdmissionPolicyBinding\n", "policyName: sandprobe-sandbox-runtime", "- Deny",
		}},
		{name: "e2e policy", policy: "../../hack/e2e/overlay/policy.yaml", code: 0, stdout: []string{`in ["gvisor"]`, "sandprobe.dev/policy: e2e-sandbox"}},
		{name: "no runtime class", policy: "../../fixtures/lab-policy.yaml", code: 2, stderr: "spec.runtime.classNames is empty"},
		{name: "audit stage", policy: "../../fixtures/policy.yaml", args: []string{"--mode", "audit"}, code: 0, stdout: []string{"validationActions:\n  - Audit\n"}},
		{name: "warn stage", policy: "../../fixtures/policy.yaml", args: []string{"--mode", "warn"}, code: 0, stdout: []string{"validationActions:\n  - Warn\n"}},
		{name: "warn and audit", policy: "../../fixtures/policy.yaml", args: []string{"--mode", "warn,audit"}, code: 0, stdout: []string{"validationActions:\n  - Warn\n  - Audit\n"}},
		{name: "deny stage", policy: "../../fixtures/policy.yaml", args: []string{"--mode", "deny"}, code: 0, stdout: []string{"validationActions:\n  - Deny\n"}},
		{name: "unknown stage", policy: "../../fixtures/policy.yaml", args: []string{"--mode", "enforce"}, code: 2, stderr: `sandprobe render: --mode: want deny, warn or audit (or warn,audit), got "enforce"`},
		{name: "deny and warn", policy: "../../fixtures/policy.yaml", args: []string{"--mode", "deny,warn"}, code: 2, stderr: "deny and warn cannot be combined"},
		{name: "stage of another format", policy: "../../fixtures/policy.yaml", args: []string{"--format", "yaml", "--mode", "audit"}, code: 2, stderr: "--mode applies to --format admission only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"render", "--format", "admission", "--policy", c.policy}, c.args...)
			code, stdout, stderr := runApp(t, "", args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstderr: %s", code, c.code, stderr)
			}
			for _, want := range c.stdout {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
			if !strings.Contains(stderr, c.stderr) {
				t.Errorf("stderr %q lacks %q", stderr, c.stderr)
			}
			if c.code == 2 && strings.Count(stderr, "\n") != 1 {
				t.Errorf("bad input must be one line, got %q", stderr)
			}
		})
	}
}

// TestRenderDockerNotes: --format docker writes Docker's units (512m, not
// 536870912), and notes on stderr a proxy the container cannot reach
// because its network is none; a policy whose network reaches the proxy
// gets no note.
func TestRenderDockerNotes(t *testing.T) {
	code, stdout, stderr := runApp(t, "", "render", "--format", "docker", "--policy", "../../fixtures/policy.yaml")
	if code != 0 || !strings.Contains(stderr, "note: spec.docker.network is unset, so the container runs with --network none, but spec.egress.proxy declares http://egress-proxy.sandbox-system:3128") ||
		strings.Count(stderr, "\n") != 1 || !strings.Contains(stdout, "--network none") || !strings.Contains(stdout, "--memory 6g") {
		t.Errorf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	code, stdout, stderr = runApp(t, "", "render", "--format", "docker", "--policy", "../../fixtures/docker-policy.yaml")
	if code != 0 || stderr != "" || !strings.Contains(stdout, "--memory 512m") || !strings.Contains(stdout, "size=64m") {
		t.Errorf("a network that reaches the proxy: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
}
