// Command maxrss runs a command and prints its peak RSS (KiB) and wall time
// on stderr as "maxrss_kib=N seconds=S cpu=C" (C: user + system CPU seconds,
// steadier than wall time on a shared machine). It exists because Linux charges a
// vfork'ed child with its parent's RSS high-water mark at exec: measured
// from a big test process, every child would look as big as the test. This
// process is a few MB, so the floor it adds is negligible.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: maxrss COMMAND [ARG...]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	start := time.Now()
	err := cmd.Run()
	secs := time.Since(start).Seconds()
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, "maxrss:", err)
		os.Exit(127)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	fmt.Fprintf(os.Stderr, "maxrss_kib=%d seconds=%.3f cpu=%.3f\n", ru.Maxrss, secs, cpu)
	os.Exit(cmd.ProcessState.ExitCode())
}
