// Command lab runs sandprobe's network lab (hack/lab/README.md): network
// namespaces joined by veth pairs, an nftables "CNI", a resolver, a
// filtering forward proxy, allowed hosts, live must-fail targets and
// switchable broken states. The lab itself is internal/lab; this is its
// command line, for people and scripts (hack/lab/lab runs it):
//
//	lab up | down | status | env | json | rules | source-hash
//	lab break STATE [NAME] | lab heal [STATE [NAME]]
//	lab proxy [tinyproxy|squid]  the proxy's flavour (heal returns to tinyproxy)
//	lab exec CMD...        run CMD inside sp-sandbox
//	lab attach-cluster [--engine] [POD_CIDR] | lab detach-cluster
//	                       let a test cluster's pods (default 10.244.0.0/24) in
//	                       as a second sandbox, under the same rules; with
//	                       --engine the lab only routes them and the cluster's
//	                       own NetworkPolicy engine is what keeps them in
//	lab cluster-dns [NAME.cluster.local=ADDRESS...]
//	                       the cluster.local names the resolver (the test
//	                       cluster's DNS) answers, as for headless Services;
//	                       replaces the last set, none clears them
//	lab selftest [...]     the lab's self-test
//
// and the lab's own daemons and clients: serve, authority, dns, connect,
// sweep.
//
// Safety: no lab interface is ever created in the root namespace, sp-router
// has no default route, and the root namespace gets no route into the lab.
// No packet can leave loopback + the lab namespaces.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sandprobe/sandprobe/internal/lab"
)

const usage = `usage: lab up | down | status | env | json | rules | source-hash
       lab break STATE [NAME] | lab heal [STATE [NAME]]
       lab proxy [tinyproxy|squid]
       lab exec CMD...
       lab attach-cluster [--engine] [POD_CIDR] | lab detach-cluster
       lab cluster-dns [NAME.cluster.local=ADDRESS...]
       lab selftest [--full] [--keep]`

func main() {
	os.Exit(run(os.Args[1:]))
}

// exitError carries an exit code other than 1.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

func run(args []string) int {
	cmd := ""
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	daemons := map[string]func([]string) error{
		"serve": cmdServe, "authority": cmdAuthority, "dns": cmdDNS, "connect": cmdConnect, "sweep": cmdSweep,
	}
	var err error
	switch {
	case daemons[cmd] != nil:
		err = daemons[cmd](args)
	case cmd == "" || cmd == "help" || cmd == "-h" || cmd == "--help":
		fmt.Println(usage)
		fmt.Println("broken states: " + strings.Join(lab.BrokenStates, " "))
		return 0
	default:
		err = labCommand(cmd, args)
	}
	if err == nil {
		return 0
	}
	var e exitError
	if errors.As(err, &e) {
		if e.msg != "" {
			fmt.Fprintln(os.Stderr, e.msg)
		}
		return e.code
	}
	fmt.Fprintln(os.Stderr, "lab:", err)
	return 1
}
