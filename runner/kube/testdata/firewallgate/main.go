// Command firewallgate stands in for /sandprobe-probe in the probe image of
// runner/kube's node-by-node regression on the real cluster. kube-router
// programs a pod's firewall only once the API shows the pod's address, and
// under load the kubelet posts it after a gVisor probe has started
// dialling (hack/cluster/README.md, "A new pod's first moments are not
// covered"): its first attempts answer. That window is kube-router's, the
// same on every node, and not what the test is about, so each vantage
// waits for the
// engine's own effect on the sentinel in /firewallgate.target (a lab
// listener that answers when nothing blocks it; the pod's NetworkPolicy
// denies it), for at most the duration on its second line:
//
//   - the probe (`probe`): until the sentinel is refused — kube-router's
//     REJECT, so its firewall is in place. Where a node-local fault keeps
//     egress open, the sentinel keeps answering: the probe starts when the
//     wait runs out and finds egress open.
//   - the control vantage (`probe --control`, no policy selects it): until
//     the sentinel answers (its path to the lab works).
//
// Every other subcommand starts at once. It prints nothing: the pod's log
// is the probe's result.
package main

import (
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

const real = "/sandprobe-probe.real"

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "probe" {
		if raw, err := os.ReadFile("/firewallgate.target"); err == nil {
			target, limit, _ := strings.Cut(strings.TrimSpace(string(raw)), "\n")
			max, err := time.ParseDuration(strings.TrimSpace(limit))
			if err != nil {
				max = 10 * time.Second
			}
			wait(strings.TrimSpace(target), max, slices.Contains(args, "--control"))
		}
	}
	err := syscall.Exec(real, append([]string{real}, args...), os.Environ())
	os.Stderr.WriteString("firewallgate: exec " + real + ": " + err.Error() + "\n")
	os.Exit(3)
}

// wait returns once a TCP handshake with target is refused (answered, for
// the control), or after max.
func wait(target string, max time.Duration, control bool) {
	end := time.Now().Add(max)
	for time.Now().Before(end) {
		c, err := net.DialTimeout("tcp", target, 300*time.Millisecond)
		switch {
		case err == nil:
			c.Close()
			if control {
				return
			}
		case !control && errors.Is(err, syscall.ECONNREFUSED):
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
