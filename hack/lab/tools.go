package main

import (
	"flag"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/sandprobe/sandprobe/internal/lab"
)

// cmdDNS: `dns NAME [A|AAAA] --server IP [--port P] [--timeout S]`: one UDP
// query; prints "RCODE addr ...", TIMEOUT or the errno.
func cmdDNS(args []string) error {
	fs := flag.NewFlagSet("dns", flag.ContinueOnError)
	server := fs.String("server", "", "resolver address")
	port := fs.Int("port", 53, "resolver port")
	timeout := fs.Float64("timeout", 2, "seconds")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 || *server == "" {
		return fmt.Errorf("usage: dns NAME [A|AAAA] --server IP [--port P] [--timeout S]")
	}
	qt := "A"
	if len(pos) == 2 {
		qt = pos[1]
	}
	t, ok := lab.QType(qt)
	if !ok {
		return fmt.Errorf("dns: unknown query type %q", qt)
	}
	fmt.Println(lab.Query(*server, *port, pos[0], t, seconds(*timeout)))
	return nil
}

// cmdConnect: `connect HOST PORT [--timeout S]`: one TCP connect; prints
// OK or the errno.
func cmdConnect(args []string) error {
	fs := flag.NewFlagSet("connect", flag.ContinueOnError)
	timeout := fs.Float64("timeout", 2, "seconds")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return fmt.Errorf("usage: connect HOST PORT [--timeout S]")
	}
	fmt.Println(lab.Connect(net.JoinHostPort(pos[0], pos[1]), seconds(*timeout)))
	return nil
}

// cmdSweep: `sweep KEY=HOST:PORT ... [--timeout S]`: every target at once;
// prints "KEY RESULT" per target, in order, RESULT being OK:<name the
// listener gave> or the errno.
func cmdSweep(args []string) error {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	timeout := fs.Float64("timeout", 2, "seconds")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	targets := make([]lab.SweepTarget, 0, len(pos))
	for _, p := range pos {
		key, hp, ok := strings.Cut(p, "=")
		i := strings.LastIndex(hp, ":")
		if !ok || i < 0 {
			return fmt.Errorf("sweep: target %q: want KEY=HOST:PORT", p)
		}
		targets = append(targets, lab.SweepTarget{Key: key, HostPort: net.JoinHostPort(strings.Trim(hp[:i], "[]"), hp[i+1:])})
	}
	for i, r := range lab.Sweep(targets, seconds(*timeout)) {
		fmt.Println(targets[i].Key, r)
	}
	return nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// parseInterspersed parses flags that may come before, between or after the
// positional arguments, and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
