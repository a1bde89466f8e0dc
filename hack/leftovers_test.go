// Package hack holds the scripts that bring up and tear down sandprobe's
// test environments; its test proves hack/leftovers.sh, the check that ends
// make test and make demo.
package hack

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

// TestLeftovers runs hack/leftovers.sh in throwaway worlds — a fresh mount,
// network and PID namespace with an empty /run — each holding one kind of
// leftover the real environments leave when a teardown is missed: it must
// name it and exit 1, exit 0 on a clean world, and count what SANDPROBE_KEEP
// names as kept. The shared lab, cluster and engine are never touched.
func TestLeftovers(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		testenv.Missing(t, "unshare (util-linux) is missing")
	}
	// A stand-in daemon: a sleep whose command line names what it is.
	daemon := func(argv0 string) string {
		return `(exec -a '` + argv0 + `' sleep 300) & sleep 0.2; `
	}
	cases := []struct {
		name, setup, keep, args string
		code                    int
		want                    string
	}{
		{"a clean world", "", "", "", 0, "nothing left"},
		{"the lab's dnsmasq still running", `mkdir -p /run/sandprobe-lab/pids; sleep 300 & echo $! > /run/sandprobe-lab/pids/dnsmasq.pid; `, "", "", 1, "lab      dnsmasq (pid"},
		{"a lab network namespace", `mkdir -p /run/netns; touch /run/netns/sp-sandbox; `, "", "", 1, "network namespace sp-sandbox"},
		{"the Docker engine's containerd", daemon("containerd --config /run/sandprobe-docker/containerd.toml"), "", "", 1, "docker   process"},
		{"the cluster's kubelet", daemon("kubelet --config=/run/sandprobe-cluster/kubelet.yaml"), "", "", 1, "cluster  process"},
		{"the cluster's nftables table", `nft add table inet sandprobe_cluster; `, "", "", 1, "nftables table inet sandprobe_cluster"},
		{"the cluster's node link", `ip link add sp-node type veth peer name sp-node-peer; `, "", "", 1, "link sp-node"},
		{"kube-router's chains", `iptables -N KUBE-ROUTER-FORWARD; `, "", "", 1, "kube-router iptables chains"},
		{"envtest's apiserver", daemon("kube-apiserver --cert-dir=/tmp/k8s_test_framework_123"), "", "", 1, "envtest  process"},
		{"kwok's controller", `mkdir -p /run/cache/kwok/bin; cp "$(command -v sleep)" /run/cache/kwok/bin/kwok; /run/cache/kwok/bin/kwok 300 & sleep 0.2; `, "", "", 1, "envtest  process"},
		{"a test's Pushgateway", daemon("prometheus-pushgateway --web.listen-address=127.0.0.1:40000 --persistence.file="), "", "", 1, "tests    process"},
		{"a test's Chromium", daemon("chromium --headless --user-data-dir=/tmp/chromedp-runner123"), "", "", 1, "tests    process"},
		{"the lab's cluster attachment", `nft add table inet sp_lab_attach; `, "", "", 1, "nftables table inet sp_lab_attach"},
		{"the lab, kept", `mkdir -p /run/netns; touch /run/netns/sp-router; `, "lab", "", 0, "kept (SANDPROBE_KEEP): network namespace sp-router"},
		{"kept with all", daemon("dockerd --host unix:///run/sandprobe-docker/docker.sock"), "all", "", 0, "kept"},
		{"keeping the lab keeps nothing else", `mkdir -p /run/netns; touch /run/netns/sp-router; ` + daemon("dockerd --host unix:///run/sandprobe-docker/docker.sock"), "lab,cluster", "", 1, "docker   process"},
		{"only the components asked for", daemon("dockerd --host unix:///run/sandprobe-docker/docker.sock"), "", "lab tests", 0, "nothing left (lab tests)"},
		{"an unknown component", "", "", "labs", 2, "unknown component labs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			script := `set -e; mount -t tmpfs tmpfs /run; ip link set lo up; ` + c.setup +
				`SANDPROBE_CACHE=/run/cache SANDPROBE_KEEP='` + c.keep + `' ./leftovers.sh ` + c.args
			cmd := exec.Command("unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc", "bash", "-c", script)
			out, err := cmd.CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.code || !strings.Contains(string(out), c.want) {
				t.Fatalf("exit %d, want %d with %q:\n%s", code, c.code, c.want, out)
			}
			if c.code == 1 && c.keep == "" && strings.Count(strings.TrimSpace(string(out)), "\n") != 1 {
				t.Errorf("want the one leftover and the summary line:\n%s", out)
			}
		})
	}
}
