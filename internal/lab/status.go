package lab

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// Status writes what is up, what runs and what is broken.
func (l *Lab) Status(w io.Writer, thisSource string) {
	if !anyNamespace() && !exists(filepath.Join(l.Dir, Marker)) {
		fmt.Fprintln(w, "lab: down")
		return
	}
	state := "up"
	var present []string
	for _, ns := range Namespaces {
		if nsExists(ns) {
			present = append(present, ns)
		} else {
			state = "partial (missing " + ns + ")"
		}
	}
	fmt.Fprintf(w, "lab: %s   dir: %s\n", state, l.Dir)
	recorded := "unknown"
	if b, err := os.ReadFile(filepath.Join(l.Dir, "source-hash")); err == nil {
		recorded = strings.TrimSpace(string(b))
	}
	fmt.Fprintf(w, "source: %s (this checkout: %s)\n", recorded, thisSource)
	fmt.Fprintf(w, "namespaces: %s \n", strings.Join(present, " "))
	fmt.Fprintln(w, "processes:")
	fmt.Fprintln(w, "proxy: "+l.ProxyFlavour())
	for _, n := range []string{"dnsmasq", l.ProxyFlavour(), "srv-api", "srv-git", "srv-ext", "srv-meta", "authority"} {
		if pid := l.pidOf(n); pidInLab(pid) {
			fmt.Fprintf(w, "  %-10s pid %-7d running\n", n, pid)
		} else {
			fmt.Fprintf(w, "  %-10s %-11s stopped\n", n, "")
		}
	}
	if exec.Command("ip", "netns", "exec", NSRouter, "nft", "list", "table", "inet", "sp_cni").Run() == nil {
		fmt.Fprintf(w, "nft: %s in %s, chain %s: %d named rules\n", NftTable, NSRouter, NftChain, len(l.liveRuleNames()))
	} else {
		fmt.Fprintf(w, "nft: %s MISSING\n", NftTable)
	}
	attached, _ := os.ReadFile(l.statePath("attached"))
	switch l.AttachMode() {
	case "":
		fmt.Fprintln(w, "cluster: not attached")
	case "engine":
		fmt.Fprintf(w, "cluster: %s attached, engine mode (the lab only routes it; the cluster's NetworkPolicy engine filters)\n", strings.TrimSpace(string(attached)))
	default:
		fmt.Fprintf(w, "cluster: %s attached, sandbox mode (under the sandbox's rules)\n", strings.TrimSpace(string(attached)))
	}
	if b := l.Broken(); len(b) > 0 {
		for i := range b {
			b[i] = strings.Replace(b[i], "flush-rule:", "flush-rule ", 1)
		}
		fmt.Fprintln(w, "broken: "+strings.Join(b, ", "))
	} else {
		fmt.Fprintln(w, "broken: none (healthy)")
	}
}

var counted = regexp.MustCompile(`^\s*(.*) counter packets (\d+) bytes \d+ (.*)comment "([^"]*)"`)

// Rules writes the named rules of the sandbox's chain with their packet
// counters.
func (l *Lab) Rules(w io.Writer) error {
	if err := l.requireUp(); err != nil {
		return err
	}
	out, err := exec.Command("ip", "netns", "exec", NSRouter, "nft", "list", "chain", "inet", "sp_cni", NftChain).Output()
	if err != nil {
		return fmt.Errorf("nft list chain %s %s: %w", NftTable, NftChain, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if m := counted.FindStringSubmatch(line); m != nil {
			fmt.Fprintf(w, "%-28s %-10s %s\n", m[4], m[2]+" pkts", m[1]+" "+m[3])
		}
	}
	return nil
}
