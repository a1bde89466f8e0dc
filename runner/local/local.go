// Package local runs the probe in a throwaway sandbox built on this machine
// from Linux namespaces: a private mount namespace whose root is read-only,
// a fresh tmpfs for each writable path, its own PID, UTS and IPC namespaces,
// a new network namespace or a named one (a lab's), the policy's uid and gid,
// every capability set emptied including the bounding set, no_new_privs and
// a seccomp filter. It needs root. Tests break one property at a time by
// editing the Sandbox before running it.
package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sourcegraph/conc"
	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
)

// InitCommand is the hidden subcommand the sandbox's first process runs.
const InitCommand = "__sandbox-init"

// ProbePath is where the probe binary appears inside the sandbox.
const ProbePath = "/run/sandprobe/bin/sandprobe"

// Sandbox is what the throwaway sandbox looks like.
type Sandbox struct {
	UID, GID     uint32
	Groups       []uint32
	ReadOnlyRoot bool
	Writable     []string          // each a fresh tmpfs, mode 1777
	SizeLimit    string            // tmpfs size option, e.g. "64m"
	Files        map[string]string // written before the root turns read-only
	Env          []string
	NoNewPrivs   bool
	Seccomp      bool
	KeepCaps     CapSets  // capabilities deliberately left in (sabotage)
	Binds        []string // host files made visible read-only at the same path (a CA bundle)
	Mounts       []Mount  // host files or directories mounted read-only elsewhere (a declared credential)
	// Volumes are host directories that outlive the sandbox, bound at their
	// target: the workspace the phases of an attempt share (read-write), a
	// node's package cache (read-only).
	Volumes []Volume
	// Workspace is where the shared workspace is (the policy's
	// spec.phases.workspace): the plant-* sabotages write there.
	Workspace string
	// Phase is a shell script (lines) the sandbox runs as its own uid,
	// with its own privileges, before the probe: a phase's work, or what a
	// malicious phase leaves for the next one (the plant-* sabotages).
	Phase    []string
	NetNS    string // named network namespace (/run/netns/NAME); "" means a new, empty one
	Hostname string

	// Escape preconditions, for sabotage only (the escape checks must see them).
	HostPID      bool     // no PID namespace of its own: the host's processes are visible
	Sockets      []string // a listening socket at each path, mode 0666: a stand-in for a runtime's API socket
	Devices      []string // host device nodes bound into the sandbox at the same path
	HostRoot     string   // the host's root filesystem bound (read-only, not its submounts) at this path
	WritableProc bool     // /proc/sys and /proc/sysrq-trigger stay read-write (runc makes them read-only)
	WritableSys  bool     // /sys, its cgroup tree included, is bound read-write
}

// Mount is a read-only bind of a host path at another path in the sandbox.
type Mount struct {
	Source string `json:"source"`
	Target string `json:"target"`
}

// Volume is a host directory (or file) bound into the sandbox at Target,
// writable or not.
type Volume struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	Writable bool   `json:"writable,omitempty"`
}

// CapSets names capabilities to leave in each set.
type CapSets struct {
	Bounding    []string `json:"bounding,omitempty"`
	Inheritable []string `json:"inheritable,omitempty"`
	Ambient     []string `json:"ambient,omitempty"`
}

// SandboxFor builds the conformant sandbox a policy declares.
func SandboxFor(p *policy.Policy, netns string) Sandbox {
	s := p.Spec
	sb := Sandbox{
		UID: uint32(s.Identity.UID), GID: uint32(s.Identity.GID),
		ReadOnlyRoot: s.Filesystem.ReadOnlyRoot,
		Writable:     append([]string(nil), s.Filesystem.Writable...),
		SizeLimit:    "64m",
		NoNewPrivs:   s.NoNewPrivs(),
		Seccomp:      s.Seccomp != policy.SeccompUnconfined,
		NetNS:        netns,
		Hostname:     "sandbox",
		Workspace:    s.Phases.Workspace,
		Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"},
	}
	for _, g := range s.Identity.SupplementalGroups {
		sb.Groups = append(sb.Groups, uint32(g))
	}
	if s.Identity.FSGroup != nil {
		sb.Groups = append(sb.Groups, uint32(*s.Identity.FSGroup))
	}
	home := "/tmp"
	if len(sb.Writable) > 0 && !s.Filesystem.WritableFor("/tmp") {
		home = sb.Writable[0]
	}
	sb.Env = append(sb.Env, "HOME="+home)
	if s.Filesystem.SizeLimit != "" {
		if q, err := policy.ParseQuantity(s.Filesystem.SizeLimit); err == nil {
			sb.SizeLimit = fmt.Sprintf("%dk", int64(q)/1024)
		}
	}
	if s.Egress.CAFile != "" {
		sb.Binds = append(sb.Binds, s.Egress.CAFile)
	}
	// A declared credential whose source is a path on this machine is
	// mounted read-only where the policy says, as docker --mount would.
	for _, c := range s.Credentials {
		if filepath.IsAbs(c.Source) {
			sb.Mounts = append(sb.Mounts, Mount{Source: c.Source, Target: c.MountPath})
		}
	}
	// Declared capabilities stay in the bounding set.
	sb.KeepCaps.Bounding = append(sb.KeepCaps.Bounding, s.Capabilities...)
	return sb
}

// initSpec is handed to the init process on fd 3.
type initSpec struct {
	Sandbox Sandbox  `json:"sandbox"`
	Root    string   `json:"root"`
	Binary  string   `json:"binary"`
	Probe   string   `json:"probe,omitempty"` // bound at ProbePath; "" is Binary
	Argv    []string `json:"argv"`
}

// Backend runs the probe in a local sandbox.
type Backend struct {
	Sandbox Sandbox
	// Binary is the sandprobe executable that becomes the sandbox's init.
	// Defaults to the running executable.
	Binary string
	// ProbeBinary is bound in at ProbePath and runs the checks; default
	// sandprobe-probe beside Binary, else Binary (runner.ProbeBeside).
	ProbeBinary string
	// Command replaces `sandprobe probe …` inside the sandbox (tests use it
	// for probes that crash, hang or lie). The policy arrives on stdin.
	Command []string
	// ControlNetNS is the named network namespace of the control vantage:
	// the lab's side of the link, where no sandbox rule applies. A second,
	// identical sandbox joins it and dials every must-fail destination, so
	// a deny counts only where the control got an answer. "" means no
	// control: no deny is proven (but a proxy's own refusal).
	ControlNetNS string
	Logger       *slog.Logger
}

// Target names the local sandbox in reports.
func (b *Backend) Target() string {
	if b.Sandbox.NetNS != "" {
		return "local/" + b.Sandbox.NetNS
	}
	return "local/sandbox"
}

const maxOutput = 4 << 20

// Run launches the sandbox (and, with ControlNetNS, the control beside
// it), waits for the probe, parses its result and judges its denies
// against what the control saw.
func (b *Backend) Run(ctx context.Context, spec runner.ProbeSpec) ([]report.ProbeResult, error) {
	target := b.Target()
	if os.Geteuid() != 0 {
		return nil, &runner.CouldNotRun{Target: target, Reason: runner.ReasonLaunch, Detail: "the local backend builds its sandbox with namespaces and needs root"}
	}
	if b.ControlNetNS == "" || spec.NoNetwork || len(b.Command) > 0 {
		res, err := b.launch(ctx, spec, b.Sandbox, nil, target)
		if err != nil {
			return nil, err
		}
		if !spec.NoNetwork {
			var c *runner.Control
			if b.Sandbox.NetNS == "" {
				// A fresh network namespace with loopback only: no route
				// leaves it, so nothing outside can answer by construction.
				c = &runner.Control{Vantage: target, Isolated: "the sandbox has a network namespace of its own with only loopback in it: no route leaves it"}
			}
			runner.ApplyControl(&res, c)
		}
		return []report.ProbeResult{res}, nil
	}
	if err := checkControlNetNS(b.ControlNetNS, b.Sandbox.NetNS); err != nil {
		return nil, &runner.CouldNotRun{Target: target, Reason: runner.ReasonLaunch, Detail: err.Error()}
	}
	var (
		res, ctl       report.ProbeResult
		probeErr, cErr error
	)
	control := b.Sandbox
	control.NetNS = b.ControlNetNS
	control.Hostname = "control"
	var wg conc.WaitGroup
	wg.Go(func() { res, probeErr = b.launch(ctx, spec, b.Sandbox, nil, target) })
	wg.Go(func() {
		ctl, cErr = b.launch(ctx, spec, control, []string{ProbePath, "probe", "--control", "--policy", "-", "--nonce", spec.Nonce}, "local/"+b.ControlNetNS)
	})
	wg.Wait()
	if probeErr != nil {
		return nil, probeErr
	}
	c := runner.NewControl("local/"+b.ControlNetNS, ctl)
	if cErr != nil {
		c.Err = cErr
	}
	b.followUp(ctx, spec, &res, c)
	runner.ApplyControl(&res, c)
	return []report.ProbeResult{res}, nil
}

// followUp has the sandbox dial, in a second round, the addresses the
// control resolved for the must-fail names the sandbox's resolver stopped
// (runner.DNSOnlyFollowUp): a DNS-only block is no network deny.
func (b *Backend) followUp(ctx context.Context, spec runner.ProbeSpec, res *report.ProbeResult, c *runner.Control) {
	fu, ok, err := runner.DNSOnlyFollowUp(spec, []report.ProbeResult{*res}, c)
	if err != nil || !ok {
		return // the DNS-only verdicts stay inconclusive
	}
	again, err := b.launch(ctx, fu.Spec, b.Sandbox, nil, b.Target())
	runner.MergeFollowUp(res, again, err, fu, c.Vantage)
}

// checkControlNetNS refuses a control that would prove nothing: the
// sandbox's own namespace (its rules govern it), or the host's (never
// dialled from: its metadata address is real).
func checkControlNetNS(name, sandbox string) error {
	if name == sandbox {
		return fmt.Errorf("--control-netns %s is the sandbox's own network namespace: its rules govern the control too", name)
	}
	var ctl, host syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+name, &ctl); err != nil {
		return fmt.Errorf("control network namespace %s: %w (is the lab up?)", name, err)
	}
	if err := syscall.Stat("/proc/self/ns/net", &host); err != nil {
		return fmt.Errorf("this process's network namespace: %w", err)
	}
	if ctl.Dev == host.Dev && ctl.Ino == host.Ino {
		return fmt.Errorf("--control-netns %s is the host's own network namespace: the control never dials from there", name)
	}
	return nil
}

// launch runs one sandbox to its end (argv nil: the probe) and parses and
// checks its result.
func (b *Backend) launch(ctx context.Context, spec runner.ProbeSpec, sb Sandbox, argv []string, target string) (report.ProbeResult, error) {
	var none report.ProbeResult
	bin := b.Binary
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return none, fmt.Errorf("find own executable: %w", err)
		}
		bin = exe
	}
	root, err := os.MkdirTemp("", "sandprobe-root-")
	if err != nil {
		return none, fmt.Errorf("create sandbox root: %w", err)
	}
	defer os.Remove(root) // the mounts lived in the sandbox's namespace; the directory is empty here

	argv = b.probeArgv(spec, sb, argv)
	probe := b.ProbeBinary
	if probe == "" {
		probe = runner.ProbeBeside(bin)
	}
	is, err := json.Marshal(initSpec{Sandbox: sb, Root: root, Binary: bin, Probe: probe, Argv: argv})
	if err != nil {
		return none, err
	}
	specR, specW, err := os.Pipe()
	if err != nil {
		return none, err
	}
	defer specR.Close()
	go func() { // a pipe holds 64 KiB; the spec is far smaller, but never block on it
		specW.Write(is)
		specW.Close()
	}()

	deadline := spec.Deadline
	if deadline <= 0 {
		deadline = spec.Policy.Spec.Probe.Deadline.Duration
	}
	runCtx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()

	var stdout, stderr runner.LimitedBuffer
	stdout.Max, stderr.Max = maxOutput, 64<<10
	cmd := exec.CommandContext(runCtx, bin, InitCommand)
	cmd.Stdin = bytes.NewReader(spec.PolicyBytes)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.ExtraFiles = []*os.File{specR}
	cmd.Env = []string{} // the probe's environment comes from the Sandbox only
	cmd.SysProcAttr = sandboxAttr(sb)
	cmd.WaitDelay = 2 * time.Second
	start := time.Now()
	runErr := cmd.Run()
	took := time.Since(start)
	if b.Logger != nil {
		b.Logger.Debug("local sandbox finished", "target", target, "took", took, "err", runErr, "stderr", stderr.String())
	}

	if runCtx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
		return none, &runner.CouldNotRun{Target: target, Reason: runner.ReasonDeadline, Detail: fmt.Sprintf("the probe did not finish within %s and was killed%s", deadline, runner.StderrTail(stderr.String()))}
	}
	if ctx.Err() != nil {
		return none, fmt.Errorf("local probe: %w", ctx.Err())
	}
	code, err := exitCode(target, runErr, stderr.String())
	if err != nil {
		return none, err
	}
	if stdout.Overflow {
		return none, &runner.CouldNotRun{Target: target, Reason: runner.ReasonGarbled, Detail: fmt.Sprintf("the probe printed more than %d bytes", maxOutput)}
	}
	res, err := runner.ParseResult(target, stdout.Bytes(), spec.Nonce)
	if err != nil {
		return none, err
	}
	if err := runner.CheckExit(target, code, res); err != nil {
		return none, err
	}
	res.Target = target
	if res.Vantage == "" {
		// The same half of runtime.isolation as the other backends: this
		// sandbox is namespaces on this machine's kernel, and a hypervisor
		// the probe sees is this machine's, never a VM of its own.
		kernel, kerr := hostKernel()
		runner.CrossCheckKernel(spec.Policy, "", kernel, kerr, &res)
	}
	return res, nil
}

// probeArgv is what the sandbox runs: argv, else the backend's command,
// else the probe (with --phase when the sandbox shares a phase's volumes).
func (b *Backend) probeArgv(spec runner.ProbeSpec, sb Sandbox, argv []string) []string {
	if len(argv) == 0 {
		argv = b.Command
	}
	if len(argv) == 0 {
		argv = []string{ProbePath, "probe", "--policy", "-", "--nonce", spec.Nonce}
		if spec.NoNetwork {
			argv = append(argv, "--no-network")
		}
		if spec.Only != "" {
			argv = append(argv, "--only", spec.Only)
		}
		if len(sb.Volumes) > 0 {
			// The sandbox holds what the phases share: it is a phase's.
			argv = append(argv, "--phase")
		}
	}
	return argv
}

// exitCode is the sandbox's exit code, or why it says the probe could not
// run: not started, killed by a signal, sandbox-init's own failure (125),
// or an exit the probe never makes.
func exitCode(target string, runErr error, stderr string) (int, error) {
	if runErr == nil {
		return 0, nil
	}
	errTail := runner.StderrTail(stderr)
	var ee *exec.ExitError
	if !errors.As(runErr, &ee) {
		return 0, &runner.CouldNotRun{Target: target, Reason: runner.ReasonLaunch, Detail: runErr.Error()}
	}
	ws, _ := ee.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 0, &runner.CouldNotRun{Target: target, Reason: runner.ReasonCrashed, Detail: fmt.Sprintf("the probe was killed by signal %s%s", ws.Signal(), errTail)}
	}
	if ee.ExitCode() == 125 { // sandbox-init's own failure code
		return 0, &runner.CouldNotRun{Target: target, Reason: runner.ReasonLaunch, Detail: "could not build the sandbox" + errTail}
	}
	if err := runner.ExitProblem(target, ee.ExitCode(), stderr); err != nil {
		return 0, err
	}
	return ee.ExitCode(), nil
}

// hostKernel is this machine's kernel release (uname -r).
func hostKernel() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}
