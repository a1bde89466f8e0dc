// Command enforcers tells which component enforced each egress verdict of
// one e2e run (hack/e2e.sh).
//
// The probe only sees its own side: a refused connection looks the same
// whoever refused it. This joins the run's JUnit (the verdicts) with what the
// node saw of the probe pod's packets: hack/e2e.sh's witness table (nft table
// inet sandprobe_e2e_witness) records each new connection from a pod at three
// points of the forward hook:
//
//	pre   priority -30: before anything on the node filters it
//	mid   priority  -5: after the cluster's safety net (inet sandprobe_cluster, -10)
//	post  priority +10: after kube-router's iptables (ip filter FORWARD, 0)
//
// so a connection in mid but not in post was stopped by kube-router's
// NetworkPolicy, one in pre but not in mid by the safety net, and one in post
// left the node for the lab (where, in engine mode, nothing filters it: the
// proxy and the targets themselves answer).
//
//	go run ./hack/e2e/enforcers --junit RUN.xml --witness WITNESS.json --lab-json lab.json \
//	    --probe-ip IP [--probe-ip IP] [--expect healthy]
//
// --expect healthy: exit 1 unless every must-fail verdict passed and was
// enforced by what the e2e cluster promises (direct attempts by kube-router,
// attempts through the proxy by the proxy's deny, arbitrary names by the
// resolver; with --cilium-events, direct attempts by Cilium's policy drops
// and arbitrary names by its DNS proxy).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("enforcers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	junit := fs.String("junit", "", "the run's JUnit report")
	witness := fs.String("witness", "", "nft -j list table of the witness")
	labJSON := fs.String("lab-json", "", "the lab's lab.json")
	expect := fs.String("expect", "", `"healthy": fail unless every verdict was enforced as the e2e cluster promises`)
	ciliumEvents := fs.String("cilium-events", "", "the agent's events of the run (cilium-dbg monitor --type drop --type l7 -j): Cilium enforces")
	nodeIP := fs.String("node-ip", "10.250.0.1", "the node's address (its kubelet is a neighbour)")
	var probeIPs list
	fs.Var(&probeIPs, "probe-ip", "a probe pod's address (repeat)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *junit == "" || *witness == "" || *labJSON == "" || (*expect != "" && *expect != "healthy") {
		fmt.Fprintln(stderr, "enforcers: --junit, --witness and --lab-json are required; --expect takes only healthy")
		return 2
	}
	sets, err := witnessSets(*witness)
	if err != nil {
		fmt.Fprintln(stderr, "enforcers:", err)
		return 2
	}
	lab, err := labAddresses(*labJSON)
	if err != nil {
		fmt.Fprintln(stderr, "enforcers:", err)
		return 2
	}
	cases, err := verdicts(*junit)
	if err != nil {
		fmt.Fprintln(stderr, "enforcers:", err)
		return 2
	}
	ips := map[string]bool{}
	for _, ip := range probeIPs {
		ips[ip] = true
	}
	j := judge{sets: sets, ips: ips, lab: lab, nodeIP: *nodeIP}
	if *ciliumEvents != "" {
		if j.cilium, err = readCiliumEvents(*ciliumEvents); err != nil {
			fmt.Fprintln(stderr, "enforcers:", err)
			return 2
		}
	}
	bad := report(stdout, cases, j, *expect == "healthy")
	if len(bad) > 0 {
		fmt.Fprintln(stderr, "not enforced as the e2e cluster promises:")
		for _, b := range bad {
			fmt.Fprintln(stderr, "  "+b)
		}
		return 1
	}
	return 0
}
