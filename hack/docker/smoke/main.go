// Command smoke is a tiny static probe used by hack/docker/up.sh to check that
// the private dockerd and its runtimes (runc, runsc, runsc-nonet) really run
// containers, and by hack/docker/README.md's measurements to show how runc and
// gVisor differ under the sandbox constraints. It only reads and reports; it
// never touches the network.
//
// It prints "key: value" lines:
//
//	kernel:       first line of /proc/version
//	uid:          real uid
//	status.X:     the NoNewPrivs, Seccomp, Seccomp_filters, CapEff lines of /proc/self/status ("absent" if missing)
//	statvfs./:    mount flags of / as reported by statvfs
//	write.PATH:   "ok" or the errno name of creating a file in PATH
//	netifs:       network interfaces seen inside the container
package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	fmt.Printf("kernel: %s\n", firstLine("/proc/version"))
	fmt.Printf("uid: %d\n", os.Getuid())

	status := readStatus()
	for _, k := range []string{"NoNewPrivs", "Seccomp", "Seccomp_filters", "CapEff"} {
		v, ok := status[k]
		if !ok {
			v = "absent"
		}
		fmt.Printf("status.%s: %s\n", k, v)
	}

	fmt.Printf("statvfs./: %s\n", statvfsFlags("/"))

	for _, dir := range []string{"/", "/tmp", "/workspace"} {
		fmt.Printf("write.%s: %s\n", dir, tryWrite(dir))
	}

	fmt.Printf("netifs: %s\n", netifs())
}

func firstLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "error: " + err.Error()
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return line
}

func readStatus() map[string]string {
	out := map[string]string{}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// statvfsFlags names the ST_* bits of statvfs(path).f_flag. Linux reports
// them in Statfs_t.Flags (f_flags, kernel >= 2.6.36).
func statvfsFlags(path string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return "error: " + errnoName(err)
	}
	names := []struct {
		bit  int64
		name string
	}{
		{0x1, "ST_RDONLY"}, {0x2, "ST_NOSUID"}, {0x4, "ST_NODEV"}, {0x8, "ST_NOEXEC"},
		{0x10, "ST_SYNCHRONOUS"}, {0x400, "ST_NOATIME"}, {0x800, "ST_NODIRATIME"}, {0x1000, "ST_RELATIME"},
	}
	var set []string
	for _, n := range names {
		if st.Flags&n.bit != 0 {
			set = append(set, n.name)
		}
	}
	if len(set) == 0 {
		return fmt.Sprintf("none (f_flag=%#x)", st.Flags)
	}
	return fmt.Sprintf("%s (f_flag=%#x)", strings.Join(set, ","), st.Flags)
}

func tryWrite(dir string) string {
	p := filepath.Join(dir, fmt.Sprintf(".smoke-%d", os.Getpid()))
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return errnoName(err)
	}
	f.Close()
	os.Remove(p)
	return "ok"
}

func errnoName(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EROFS:
			return "EROFS"
		case syscall.EACCES:
			return "EACCES"
		case syscall.EPERM:
			return "EPERM"
		case syscall.ENOENT:
			return "ENOENT"
		}
		return fmt.Sprintf("errno %d (%v)", int(errno), errno)
	}
	return err.Error()
}

func netifs() string {
	ifs, err := net.Interfaces()
	if err != nil {
		return "error: " + err.Error()
	}
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	return strings.Join(names, ",")
}
