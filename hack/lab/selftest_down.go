package main

import (
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/sandprobe/sandprobe/internal/lab"
)

func itoa(i int) string { return strconv.Itoa(i) }

// down: with a stray process left in the sandbox (down must kill it too),
// takes the lab down (timed) and checks nothing is left.
func (s *selftestRun) down() time.Duration {
	stray := exec.Command("ip", "netns", "exec", lab.NSSandbox, "sleep", "300")
	stray.Start()
	time.Sleep(100 * time.Millisecond)
	t0 := time.Now()
	err := locked(s.l, s.l.Down)
	took := time.Since(t0)
	s.record(err == nil, "lab down", took.Round(10*time.Millisecond).String()+" "+orEmpty(err))
	left := ""
	for _, ns := range lab.Namespaces {
		if exists("/run/netns/" + ns) {
			left += " netns:" + ns
		}
		if exists("/etc/netns/" + ns) {
			left += " /etc/netns/" + ns
		}
	}
	for _, p := range []string{s.l.Dir, s.l.Dir + ".lock"} {
		if exists(p) {
			left += " " + p
		}
	}
	if len(labRootLinks()) > 0 {
		left += " root-links"
	}
	s.check("down leaves nothing (netns, files, links)", "", left)
	done := make(chan error, 1)
	go func() { done <- stray.Wait() }()
	select {
	case <-done:
		s.check("down killed processes in lab namespaces", "", "")
	case <-time.After(2 * time.Second):
		stray.Process.Kill()
		s.check("down killed processes in lab namespaces", "", "sleep 300 still runs")
	}
	s.check("lab down again is harmless", "<nil>", orNil(locked(s.l, s.l.Down)))
	s.check("lab status after down", "lab: down", out(s.l.Bin, "status"))
	return took
}

func orNil(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }
