package main

import (
	"strings"
	"testing"
)

// TestDriftWouldRefuseFiles: `drift --would-refuse -f` names the pods the
// admission policy would refuse, with its message and a fix that points at
// the controller's template; bad combinations are one-line bad input. (The
// live half, against a real API server and real Deny admission, is in
// admission/apiserver_test.go.)
func TestDriftWouldRefuseFiles(t *testing.T) {
	const pods = "testdata/would-refuse-pods.yaml"
	cases := []struct {
		name   string
		args   []string
		code   int
		stdout []string
		absent []string
		stderr string
	}{
		{name: "two refused", args: []string{"--policy", "../../fixtures/policy.yaml", "-f", pods}, code: 1, stdout: []string{
			"pod/sandboxes/agent-unset", "runtimeClassName unset is not allowed for a sandbox pod (labels sandbox=true): SandboxPolicy agent-sandbox allows only kata, gvisor",
			"pod/sandboxes/agent-runc", "runtimeClassName runc is not allowed", "in the pod template of ReplicaSet/agents-5c8d",
			"2 of 3 pods with labels sandbox=true in the files would be refused",
		}, absent: []string{"agent-gvisor", "builder"}},
		{name: "no source", args: []string{"--policy", "../../fixtures/policy.yaml"}, code: 2, stderr: "nothing to check: give --kubeconfig or -f FILE"},
		{name: "inspect files", args: []string{"--policy", "../../fixtures/policy.yaml", "--inspect", "x.json"}, code: 2, stderr: "not --docker or --inspect"},
		{name: "no runtime class", args: []string{"--policy", "../../fixtures/lab-policy.yaml", "-f", pods}, code: 2, stderr: "--would-refuse: spec.runtime.classNames is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", "")
			t.Setenv("KUBERNETES_SERVICE_HOST", "")
			code, stdout, stderr := runApp(t, "", append([]string{"drift", "--would-refuse"}, c.args...)...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, c.code, stdout, stderr)
			}
			for _, want := range c.stdout {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
			for _, no := range c.absent {
				if strings.Contains(stdout, no) {
					t.Errorf("stdout names %q, which would be admitted or is not looked at:\n%s", no, stdout)
				}
			}
			if c.stderr != "" && (!strings.Contains(stderr, c.stderr) || strings.Count(stderr, "\n") != 1) {
				t.Errorf("stderr %q, want one line with %q", stderr, c.stderr)
			}
		})
	}
}
