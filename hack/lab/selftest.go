package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/sandprobe/sandprobe/internal/lab"
)

// The lab's self-test: brings the lab up (timed, cold and over a running
// lab), asserts from inside sp-sandbox that allowed things answer and
// must-fail things fail with their intended flavour, that every broken state
// opens exactly what it should and heal restores it, and that no lab
// namespace has a path to the machine's real interfaces (route lookups only:
// no packet is ever sent to an address outside the lab). Then takes the lab
// down (timed) and checks nothing is left. Prints a PASS/FAIL table; fails
// on any failure. A lab that was up before is brought up again at the end.

type selftestRun struct {
	l            *lab.Lab
	bin          string // this program, for the clients run inside the lab
	results      []string
	passes, fail int
	sweep        map[string]string
	rnd          string // a random name, asked once per run
}

func (s *selftestRun) record(ok bool, name, detail string) {
	status := "PASS"
	if ok {
		s.passes++
	} else {
		status = "FAIL"
		s.fail++
	}
	s.results = append(s.results, fmt.Sprintf("%-4s  %-46s %s", status, name, detail))
	if os.Getenv("VERBOSE") != "" {
		fmt.Fprintln(os.Stderr, s.results[len(s.results)-1])
	}
}

func (s *selftestRun) check(name, want, got string) {
	if want == got {
		s.record(true, name, got)
	} else {
		s.record(false, name, fmt.Sprintf("want [%s] got [%s]", want, got))
	}
}

func (s *selftestRun) checkMatch(name, re, got string) {
	if regexp.MustCompile(re).MatchString(got) {
		s.record(true, name, trunc(got, 60))
	} else {
		s.record(false, name, fmt.Sprintf("want /%s/ got [%s]", re, trunc(got, 120)))
	}
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// out runs a command and returns its output, trimmed (errors included:
// what a check compares is what a person would have seen).
func out(name string, args ...string) string {
	b, _ := exec.Command(name, args...).CombinedOutput()
	return strings.TrimSpace(string(b))
}

func sbx(args ...string) string {
	return out("ip", append([]string{"netns", "exec", lab.NSSandbox}, args...)...)
}

// op runs a lab command the way `lab CMD` does (checks, lock).
func (s *selftestRun) op(name string, fn func() error) {
	if err := locked(s.l, fn); err != nil {
		s.record(false, "lab "+name, err.Error())
	}
}

func (s *selftestRun) brk(state, name string) {
	s.op("break "+state+" "+name, func() error { return s.l.Break(state, name) })
}

func (s *selftestRun) heal(state, name string) {
	s.op("heal "+state+" "+name, func() error { return s.l.Heal(state, name) })
}

func (s *selftestRun) up() (time.Duration, error) {
	t0 := time.Now()
	err := locked(s.l, func() error { return s.l.Up(context.Background()) })
	return time.Since(t0), err
}

func selftest(l *lab.Lab, args []string) error {
	fs := flag.NewFlagSet("selftest", flag.ContinueOnError)
	full := fs.Bool("full", false, "flush-rule every named rule one by one (slower)")
	keep := fs.Bool("keep", false, "leave the lab up at the end")
	if err := fs.Parse(args); err != nil {
		return exitError{2, ""}
	}
	if os.Geteuid() != 0 {
		return errors.New("selftest: must run as root")
	}
	l.Log = nil
	s := &selftestRun{l: l, bin: l.Bin}
	wasUp := l.IsUp()
	if wasUp {
		s.op("down", l.Down) // so that the first timed up is a cold one
	}
	cold, err := s.up()
	if err != nil {
		return fmt.Errorf("selftest: lab up failed: %w", err)
	}
	again, err := s.up()
	s.record(true, "lab up (cold)", fmt.Sprintf("%.2fs", cold.Seconds()))
	s.record(err == nil, "lab up (over a running lab)", fmt.Sprintf("%.2fs %v", again.Seconds(), orEmpty(err)))
	s.bin = l.BinPath()
	s.safety()
	s.dns()
	s.proxy()
	s.sweeps()
	s.brokenStates(*full)
	downT := s.down()
	if *keep || wasUp {
		s.up()
	}
	fmt.Printf("\nsandprobe lab selftest\n----------------------\n%s\n\n", strings.Join(s.results, "\n"))
	fmt.Printf("timings: lab up %.2fs (cold), %.2fs (over a running lab); lab down %.2fs\n", cold.Seconds(), again.Seconds(), downT.Seconds())
	fmt.Printf("selftest: %d passed, %d failed\n", s.passes, s.fail)
	if s.fail > 0 {
		return exitError{1, ""}
	}
	return nil
}

func orEmpty(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
