package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/sandprobe/sandprobe/internal/lab"
)

func newLab() (*lab.Lab, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	l := &lab.Lab{Dir: lab.DefaultDir(), SourceHash: sourceHash(), Bin: self}
	if os.Getenv("LAB_QUIET") == "" {
		l.Log = os.Stderr
	}
	return l, nil
}

// locked runs fn after the root and directory checks, holding the lab's lock.
func locked(l *lab.Lab, fn func() error) error {
	if err := l.Check(); err != nil {
		return err
	}
	unlock, err := l.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	return fn()
}

func upLocked(l *lab.Lab, fn func() error) error {
	return locked(l, func() error {
		if !l.IsUp() {
			return errors.New("lab is not up (run: lab up)")
		}
		return fn()
	})
}

func labCommand(cmd string, args []string) error {
	l, err := newLab()
	if err != nil {
		return err
	}
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	switch cmd {
	case "up":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
		defer stop()
		return locked(l, func() error { return l.Up(ctx) })
	case "down":
		return locked(l, func() error {
			err := l.Down()
			if err == nil && l.Log != nil {
				fmt.Fprintln(l.Log, "lab: down")
			}
			return err
		})
	case "status":
		if err := l.Check(); err != nil {
			return err
		}
		l.Status(os.Stdout, sourceHash())
		return nil
	case "env", "json":
		return printFile(l, map[string]string{"env": "lab.env", "json": "lab.json"}[cmd])
	case "source-hash":
		fmt.Println(sourceHash())
		return nil
	case "rules":
		if err := l.Check(); err != nil {
			return err
		}
		return l.Rules(os.Stdout)
	case "break":
		return upLocked(l, func() error { return l.Break(arg(0), arg(1)) })
	case "heal":
		return upLocked(l, func() error { return l.Heal(arg(0), arg(1)) })
	case "proxy":
		return upLocked(l, func() error {
			if arg(0) == "" {
				fmt.Println(l.ProxyFlavour())
				return nil
			}
			return l.SetProxy(arg(0))
		})
	}
	return moreCommands(l, cmd, args)
}

func moreCommands(l *lab.Lab, cmd string, args []string) error {
	switch cmd {
	case "exec":
		if len(args) == 0 {
			return exitError{1, "lab: usage: lab exec CMD..."}
		}
		if _, err := os.Stat("/run/netns/" + lab.NSSandbox); err != nil {
			return errors.New("lab is not up")
		}
		ip, err := exec.LookPath("ip")
		if err != nil {
			return err
		}
		return syscall.Exec(ip, append([]string{"ip", "netns", "exec", lab.NSSandbox}, args...), os.Environ())
	case "attach-cluster":
		engine := len(args) > 0 && args[0] == "--engine"
		if engine {
			args = args[1:]
		}
		cidr := "10.244.0.0/24"
		if len(args) > 0 {
			cidr = args[0]
		}
		if strings.HasPrefix(cidr, "-") {
			return errors.New("usage: lab attach-cluster [--engine] [POD_CIDR]")
		}
		return locked(l, func() error { return l.Attach(cidr, engine) })
	case "detach-cluster":
		return locked(l, l.Detach)
	case "cluster-dns":
		return upLocked(l, func() error { return l.SetClusterRecords(args) })
	case "names":
		// what hack/leftovers.sh looks for: the root-namespace link, the
		// attach table, the router's table and the namespaces
		fmt.Printf("%s|%s|%s %s\n", lab.IfHostCluster, strings.TrimPrefix(lab.AttachNftTable, "inet "),
			strings.TrimPrefix(lab.NftTable, "inet "), strings.Join(lab.Namespaces, " "))
		return nil
	case "selftest":
		return selftest(l, args)
	}
	return exitError{2, usage}
}

func printFile(l *lab.Lab, name string) error {
	if !l.IsUp() {
		return errors.New("lab is not up (run: lab up)")
	}
	b, err := os.ReadFile(filepath.Join(l.Dir, name))
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(b)
	return err
}

// sourceHash is the version of the lab's source: what hack/lab/lab passes
// (its build cache key), else the hash of hack/lab and internal/lab found
// from the working directory. `up` records it, so a test from another
// checkout can tell the lab that is up is not its own and rebuild it.
func sourceHash() string {
	if h := os.Getenv("SANDPROBE_LAB_SOURCE_HASH"); h != "" {
		return h
	}
	root, err := moduleRoot()
	if err != nil {
		return "unknown"
	}
	var files []string
	for _, d := range []string{"hack/lab", "internal/lab"} {
		filepath.WalkDir(filepath.Join(root, d), func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			if n := e.Name(); n != "README.md" && !strings.HasSuffix(n, "_test.go") && !strings.Contains(rel, "/testdata/") {
				files = append(files, rel)
			}
			return nil
		})
	}
	slices.Sort(files)
	h := sha256.New()
	for _, f := range files {
		b, _ := os.ReadFile(filepath.Join(root, f))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func moduleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		d = filepath.Dir(d)
	}
}
