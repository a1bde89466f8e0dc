// Command probe is the only program in the test cluster's local images.
//
//	probe pause             wait for SIGTERM/SIGINT (the pod sandbox "pause" image)
//	probe report            print a JSON report of the process' sandbox (uid,
//	                        capabilities, seccomp, read-only root, kernel, ...)
//	                        to stdout and to /dev/termination-log, exit 0
//	probe connect ADDR...   try a TCP connection to each host:port (3 s timeout)
//	                        and print one JSON line per address; exit 0
//	probe listen ADDR       accept TCP connections on ADDR until killed,
//	                        printing one JSON line per connection
//
// It is static (CGO_ENABLED=0) so an image is just this file in an otherwise
// empty rootfs.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	mode := "report"
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	switch mode {
	case "pause":
		pause()
	case "report":
		report()
	case "connect":
		connect(os.Args[2:])
	case "listen":
		if len(os.Args) != 3 {
			fatal("usage: probe listen HOST:PORT")
		}
		listen(os.Args[2])
	default:
		fatal("unknown mode %q (want pause, report, connect or listen)", mode)
	}
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "probe: "+format+"\n", args...)
	os.Exit(2)
}

func pause() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	// As PID 1 of the sandbox we also reap zombies of shared-PID pods.
	signal.Notify(c, syscall.SIGCHLD)
	for s := range c {
		if s == syscall.SIGCHLD {
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}

// statusFields returns selected lines of /proc/self/status.
func statusFields(keys ...string) map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		for _, want := range keys {
			if k == want {
				out[k] = strings.TrimSpace(v)
			}
		}
	}
	return out
}

func report() {
	r := map[string]any{
		"probe": "sandprobe-cluster-smoke",
		"uid":   os.Getuid(),
		"euid":  os.Geteuid(),
		"gid":   os.Getgid(),
	}
	r["groups"], _ = os.Getgroups()
	r["hostname"], _ = os.Hostname()
	st := statusFields("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
	r["status"] = st
	if b, err := os.ReadFile("/proc/version"); err == nil {
		r["kernel"] = strings.TrimSpace(string(b))
	}
	// A write to / must fail with EROFS under readOnlyRootFilesystem.
	if f, err := os.Create("/.probe-write-test"); err == nil {
		f.Close()
		os.Remove("/.probe-write-test")
		r["rootfs_writable"] = true
	} else {
		r["rootfs_writable"] = false
		r["rootfs_write_error"] = err.Error()
	}
	// Network interfaces and their addresses, as the sandbox sees them.
	ifaces := map[string][]string{}
	if list, err := net.Interfaces(); err == nil {
		for _, ifc := range list {
			addrs, _ := ifc.Addrs()
			var as []string
			for _, a := range addrs {
				as = append(as, a.String())
			}
			ifaces[ifc.Name] = as
		}
	}
	r["interfaces"] = ifaces
	var uts syscall.Utsname
	if syscall.Uname(&uts) == nil {
		r["uname_release"] = cstr(uts.Release[:])
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	// The kubelet reads this file into status.containerStatuses[].state
	// .terminated.message; it is a bind mount, so it stays writable even
	// with a read-only root filesystem.
	if err := os.WriteFile("/dev/termination-log", append(b, '\n'), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "probe: termination-log: %v\n", err)
	}
}

func cstr(b []int8) string {
	var s []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

func connect(addrs []string) {
	for _, a := range addrs {
		start := time.Now()
		res := map[string]any{"addr": a}
		c, err := net.DialTimeout("tcp", a, 3*time.Second)
		switch {
		case err == nil:
			res["result"] = "connected"
			c.Close()
		case errors.Is(err, syscall.ECONNREFUSED):
			res["result"] = "refused"
		case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
			res["result"] = "unreachable"
		case isTimeout(err):
			res["result"] = "timeout"
		default:
			res["result"] = "error"
		}
		if err != nil {
			res["error"] = err.Error()
		}
		res["ms"] = time.Since(start).Milliseconds()
		b, _ := json.Marshal(res)
		fmt.Println(string(b))
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func listen(addr string) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fatal("listen %s: %v", addr, err)
	}
	fmt.Printf("{\"listening\":%q}\n", l.Addr().String())
	for {
		c, err := l.Accept()
		if err != nil {
			fatal("accept: %v", err)
		}
		fmt.Printf("{\"accepted_from\":%q}\n", c.RemoteAddr().String())
		c.Close()
	}
}
