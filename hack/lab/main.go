// Command lab runs sandprobe's network lab (hack/lab/README.md). So far it
// holds the lab's servers and the clients its selftest uses; hack/lab/lab
// starts them.
package main

import (
	"fmt"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cmds := map[string]func([]string) error{
		"serve": cmdServe, "authority": cmdAuthority, "dns": cmdDNS, "connect": cmdConnect, "sweep": cmdSweep,
	}
	if len(args) == 0 || cmds[args[0]] == nil {
		fmt.Fprintln(os.Stderr, "usage: lab serve|authority|dns|connect|sweep ...")
		return 2
	}
	if err := cmds[args[0]](args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "lab:", err)
		return 1
	}
	return 0
}
