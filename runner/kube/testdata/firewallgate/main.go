// Command firewallgate stands in for /sandprobe-probe in the probe image of
// runner/kube's node-by-node regression on the real cluster. kube-router
// programs a pod's firewall only once the API shows the pod's address, and
// under load the kubelet posts it after a gVisor probe has started
// dialling: the probe's first attempts then answer
// (hack/cluster/README.md, "A new pod's first moments are not covered").
// That window is kube-router's, the same on every node, and not what the
// test is about, so the probe waits for the engine's own effect: until the
// sentinel destination in /firewallgate.target — one the pod's
// NetworkPolicy denies, a live listener that answers when nothing blocks it
// — stops answering, for at most the duration on its second line. Where a
// node-local fault keeps egress open, the sentinel never stops answering:
// the probe starts when the wait runs out, and finds egress open.
//
// The control vantage (`probe --control`) and every other subcommand start
// at once. It prints nothing: the pod's log is the probe's result.
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
	if len(args) > 0 && args[0] == "probe" && !slices.Contains(args, "--control") {
		if raw, err := os.ReadFile("/firewallgate.target"); err == nil {
			target, limit, _ := strings.Cut(strings.TrimSpace(string(raw)), "\n")
			max, err := time.ParseDuration(strings.TrimSpace(limit))
			if err != nil {
				max = 10 * time.Second
			}
			wait(strings.TrimSpace(target), max)
		}
	}
	err := syscall.Exec(real, append([]string{real}, args...), os.Environ())
	os.Stderr.WriteString("firewallgate: exec " + real + ": " + err.Error() + "\n")
	os.Exit(3)
}

// wait returns once target no longer completes a TCP handshake (refused,
// unreachable or silent: the firewall is in place), or after max.
func wait(target string, max time.Duration) {
	end := time.Now().Add(max)
	for time.Now().Before(end) {
		c, err := net.DialTimeout("tcp", target, 300*time.Millisecond)
		if err != nil {
			var ne net.Error
			if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || (errors.As(err, &ne) && ne.Timeout()) {
				return
			}
		} else {
			c.Close()
		}
		time.Sleep(100 * time.Millisecond)
	}
}
