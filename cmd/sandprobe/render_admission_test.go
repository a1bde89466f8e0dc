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
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runApp(t, "", "render", "--format", "admission", "--policy", c.policy)
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
		})
	}
}
