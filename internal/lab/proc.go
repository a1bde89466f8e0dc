package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The lab's daemons run in their own session (a Ctrl-C aimed at a test
// run must not take them with it), inside their namespace through `ip
// netns exec` (which also bind-mounts /etc/netns/NS), with their output in
// logs/NAME.log and their pid in pids/NAME.pid.

func (l *Lab) pidFile(name string) string { return filepath.Join(l.Dir, "pids", name+".pid") }

// start runs argv in ns in the background as daemon name.
func (l *Lab) start(name, ns string, argv ...string) error {
	closeInherited()
	logf, err := os.OpenFile(filepath.Join(l.Dir, "logs", name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	// reap it if it dies while this command still runs (so "died" shows)
	go cmd.Wait()
	return os.WriteFile(l.pidFile(name), fmt.Appendf(nil, "%d\n", cmd.Process.Pid), 0o644)
}

// closeInherited marks every descriptor above stderr close-on-exec: what
// this process inherited without that flag (a caller's lock, as flock(1)
// and the demo's `exec {fd}>lock` pass one; a CI pipe) would otherwise
// outlive it in every daemon it starts, and hold that lock for as long as
// the lab runs.
func closeInherited() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

func (l *Lab) pidOf(name string) int {
	b, err := os.ReadFile(l.pidFile(name))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// pidInLab: a pid is the lab's only if it lives in one of the lab's
// namespaces (its net namespace's inode is one of /run/netns/sp-*'s).
func pidInLab(pid int) bool {
	if pid <= 0 {
		return false
	}
	var st syscall.Stat_t
	if syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) != nil {
		return false
	}
	for _, ns := range Namespaces {
		var nst syscall.Stat_t
		if syscall.Stat("/run/netns/"+ns, &nst) == nil && nst.Ino == st.Ino && nst.Dev == st.Dev {
			return true
		}
	}
	return false
}

func (l *Lab) alive(name string) bool { return pidInLab(l.pidOf(name)) }

// starting: a daemon just started may not have entered its namespace yet,
// so while waiting for it, "alive" is only "exists and is not a zombie".
func (l *Lab) starting(name string) bool {
	pid := l.pidOf(name)
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

func (l *Lab) stop(name string) {
	pid := l.pidOf(name)
	if pidInLab(pid) {
		syscall.Kill(pid, syscall.SIGTERM)
		for i := 0; i < 100 && pidInLab(pid); i++ {
			time.Sleep(20 * time.Millisecond)
		}
		if pidInLab(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			time.Sleep(50 * time.Millisecond)
		}
	}
	os.Remove(l.pidFile(name))
	os.Remove(filepath.Join(l.Dir, "run", name+".ready"))
}

func (l *Lab) died(name string) error {
	b, _ := os.ReadFile(filepath.Join(l.Dir, "logs", name+".log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	fmt.Fprintln(os.Stderr, strings.Join(lines[max(0, len(lines)-20):], "\n"))
	return fmt.Errorf("%s died", name)
}

// waitListen waits until something listens on proto/port in ns.
func (l *Lab) waitListen(ns, proto string, port int, name string) error {
	for range 250 {
		out, _ := exec.Command("ip", "netns", "exec", ns, "ss", "-Hln"+proto[:1], "sport = :"+strconv.Itoa(port)).Output()
		if len(strings.TrimSpace(string(out))) > 0 {
			return nil
		}
		if !l.starting(name) {
			return l.died(name)
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.died(name)
	return fmt.Errorf("%s does not listen on %s/%d in %s", name, proto, port, ns)
}

// waitReady waits for a daemon's ready file.
func (l *Lab) waitReady(name string) error {
	for range 250 {
		if _, err := os.Stat(filepath.Join(l.Dir, "run", name+".ready")); err == nil {
			return nil
		}
		if !l.starting(name) {
			return l.died(name)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready", name)
}
