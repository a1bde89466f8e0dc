// Command misbehave stands in for the sandprobe binary in the real-cluster
// tests of runner/kube: installed as /sandprobe in an image, it ignores the
// probe's arguments and does what /misbehave.mode in the image says, so
// each way a probe can fail is provoked for real in a real pod.
//
//	exit N      exit with code N
//	segv        die of a real SIGSEGV (a fault with the default action)
//	sleep D     sleep for duration D, then exit 0
//	eat         allocate and touch memory until the OOM killer ends it
//	print TEXT  print TEXT on stdout, exit 0
//	stale       run the real probe (/sandprobe.real) with a stale nonce
//	settle D    sleep for duration D, then run the real probe
//	            (/sandprobe-probe.real) as asked: a probe that lets the
//	            NetworkPolicy engine program its pod first
//	newkernel V exit 1 with glibc's "FATAL: kernel too old" when the
//	            kernel release is older than V (as a binary built for a
//	            newer kernel does under gVisor's 4.4.0), else exit 0
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	raw, err := os.ReadFile("/misbehave.mode")
	if err != nil {
		fmt.Fprintln(os.Stderr, "misbehave:", err)
		os.Exit(2)
	}
	mode, arg, _ := strings.Cut(strings.TrimSpace(string(raw)), " ")
	if mode != "newkernel" { // it says what glibc says, and nothing else
		fmt.Fprintf(os.Stderr, "misbehave: %s %s\n", mode, arg)
	}
	switch mode {
	case "exit":
		n, _ := strconv.Atoi(arg)
		os.Exit(n)
	case "segv":
		segv()
	case "sleep":
		d, _ := time.ParseDuration(arg)
		time.Sleep(d)
	case "eat":
		eat()
	case "print":
		fmt.Println(arg)
	case "stale":
		stale()
	case "newkernel":
		newKernel(arg)
	case "settle":
		d, _ := time.ParseDuration(arg)
		time.Sleep(d)
		args := append([]string{"/sandprobe-probe.real"}, os.Args[1:]...)
		err := syscall.Exec(args[0], args, os.Environ())
		fmt.Fprintln(os.Stderr, "misbehave: exec:", err)
		os.Exit(2)
	}
}

// segv restores the default action for SIGSEGV (the Go runtime turns
// faults into panics) and faults. A fault is forced even on a PID 1, which
// ignores signals sent to it, so the process really dies of signal 11.
func segv() {
	var act [4]uint64 // sa_handler = SIG_DFL, flags, restorer, mask
	if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(syscall.SIGSEGV), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0); e != 0 {
		fmt.Fprintln(os.Stderr, "misbehave: rt_sigaction:", e)
		os.Exit(2)
	}
	p := (*int)(unsafe.Pointer(uintptr(8)))
	*p = 42
}

func eat() {
	var keep [][]byte
	for {
		b := make([]byte, 8<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
	}
}

// stale runs the real probe with its arguments, but echoing an old nonce:
// a complete, genuine result that belongs to another run.
func stale() {
	args := append([]string{"/sandprobe.real"}, os.Args[1:]...)
	for i := range args {
		if args[i] == "--nonce" && i+1 < len(args) {
			args[i+1] = "5ta1e5ta1e5ta1e5ta1e5ta1"
		}
	}
	err := syscall.Exec(args[0], args, os.Environ())
	fmt.Fprintln(os.Stderr, "misbehave: exec:", err)
	os.Exit(2)
}

// newKernel exits 1 as glibc does when the running kernel is older than
// the one it was built for ("FATAL: kernel too old"), else 0.
func newKernel(want string) {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		fmt.Fprintln(os.Stderr, "misbehave: uname:", err)
		os.Exit(2)
	}
	var b []byte
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	if older(string(b), want) {
		fmt.Fprintln(os.Stderr, "FATAL: kernel too old")
		os.Exit(1)
	}
	fmt.Println("kernel " + string(b))
}

// older compares the major.minor of two kernel releases.
func older(release, want string) bool {
	num := func(s string) (int, int) {
		major, rest, _ := strings.Cut(s, ".")
		minor, _, _ := strings.Cut(rest, ".")
		a, _ := strconv.Atoi(major)
		b, _ := strconv.Atoi(strings.TrimRightFunc(minor, func(r rune) bool { return r < '0' || r > '9' }))
		return a, b
	}
	ra, rb := num(release)
	wa, wb := num(want)
	return ra < wa || (ra == wa && rb < wb)
}
