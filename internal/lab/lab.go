package lab

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Marker marks a directory as a lab's (down removes only such a one).
const Marker = ".sandprobe-lab"

const etcNetns = "/etc/netns"

// Lab is the network lab kept in Dir.
type Lab struct {
	Dir string
	// SourceHash is what `up` records as the version of the lab that is up.
	SourceHash string
	// Log gets the lab's one-line progress messages (nil: none).
	Log io.Writer
	// Bin is the lab program the daemons run from (copied into Dir/bin at up).
	Bin string
}

// DefaultDir is where the lab lives: $SANDPROBE_LAB_DIR or /run/sandprobe-lab.
func DefaultDir() string {
	if d := os.Getenv("SANDPROBE_LAB_DIR"); d != "" {
		return d
	}
	return "/run/sandprobe-lab"
}

func (l *Lab) say(format string, a ...any) {
	if l.Log != nil {
		fmt.Fprintf(l.Log, "lab: "+format+"\n", a...)
	}
}

func (l *Lab) bin() string { return filepath.Join(l.Dir, "bin", "sandprobe-lab") }

// Check refuses to work as non-root or on a directory that is not a lab's.
func (l *Lab) Check() error {
	if os.Geteuid() != 0 {
		return errors.New("must run as root")
	}
	if !filepath.IsAbs(l.Dir) {
		return fmt.Errorf("SANDPROBE_LAB_DIR must be an absolute path (got '%s')", l.Dir)
	}
	if slices.Contains([]string{"/", "/run", "/tmp", "/etc", "/usr", "/var", "/root", "/home"}, filepath.Clean(l.Dir)) {
		return fmt.Errorf("refusing LAB_DIR=%s", l.Dir)
	}
	if ents, err := os.ReadDir(l.Dir); err == nil && len(ents) > 0 && !exists(filepath.Join(l.Dir, Marker)) {
		return fmt.Errorf("%s exists, is not empty and is not a lab dir (no %s); refusing to use it", l.Dir, Marker)
	}
	for _, t := range []string{"ip", "nft", "dnsmasq", "tinyproxy", "ss"} {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("missing tool: %s", t)
		}
	}
	return nil
}

// Lock serialises lab commands on Dir.lock (one lab at a time); the
// returned function lets go.
func (l *Lab) Lock() (func(), error) {
	if err := os.MkdirAll(filepath.Dir(l.Dir), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(l.Dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			return func() { f.Close() }, nil
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another lab command holds %s.lock", l.Dir)
		}
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func nsExists(ns string) bool { return exists("/run/netns/" + ns) }

func anyNamespace() bool { return slices.ContainsFunc(Namespaces, nsExists) }

// IsUp tells whether the router exists and Dir is a lab's.
func (l *Lab) IsUp() bool { return nsExists(NSRouter) && exists(filepath.Join(l.Dir, Marker)) }

func (l *Lab) requireUp() error {
	if !l.IsUp() {
		return errors.New("lab is not up (run: lab up)")
	}
	return nil
}

// run runs a command and returns its error with its output.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// runIn feeds stdin to a command.
func runIn(stdin, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ---- state

func (l *Lab) statePath(name string) string { return filepath.Join(l.Dir, "state", name) }

// Broken lists what is broken, in the order it was broken
// ("flush-rule:NAME" for a flushed rule).
func (l *Lab) Broken() []string {
	b, _ := os.ReadFile(l.statePath("broken"))
	return strings.Fields(string(b))
}

func (l *Lab) setBroken(states []string) error {
	s := strings.Join(states, "\n")
	if s != "" {
		s += "\n"
	}
	return os.WriteFile(l.statePath("broken"), []byte(s), 0o644)
}

func (l *Lab) isBroken(s string) bool { return slices.Contains(l.Broken(), s) }

// AttachMode is how a cluster is attached: "" (not), "sandbox" or "engine".
func (l *Lab) AttachMode() string {
	if !exists(l.statePath("attached")) {
		return ""
	}
	b, err := os.ReadFile(l.statePath("attach-mode"))
	if m := strings.TrimSpace(string(b)); err == nil && m != "" {
		return m
	}
	return "sandbox"
}

func (l *Lab) applyNft() error {
	rs := Ruleset(nftState{broken: l.Broken(), attachMode: l.AttachMode()})
	f := filepath.Join(l.Dir, "run", "sp_cni.nft")
	if err := os.WriteFile(f, []byte(rs), 0o644); err != nil {
		return err
	}
	return run("ip", "netns", "exec", NSRouter, "nft", "-f", f)
}

// BinPath is the lab's copy of its program, which its daemons run from
// (and whose clients, dns and sweep, the selftest runs inside the lab).
func (l *Lab) BinPath() string { return l.bin() }
