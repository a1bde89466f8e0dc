package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
