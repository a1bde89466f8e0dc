package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
)

// scanWorkspaceOptions are the flags of `sandprobe scan-workspace`.
type scanWorkspaceOptions struct {
	baseline  string
	seal      string
	mountPath string
	out       outputs
	lf        logFlags
}

// cmdScanWorkspace is the pipeline step between two phases: the same scan
// as the probe's phase.persistence, from outside, against the baseline the
// trusted step sealed (--seal writes that baseline).
func (a *app) cmdScanWorkspace(fs *pflag.FlagSet) runFunc {
	var o scanWorkspaceOptions
	fs.StringVar(&o.baseline, "baseline", "", "compare with this baseline (written by --seal after the trusted clone); kept outside DIR")
	fs.StringVar(&o.seal, "seal", "", "write DIR's baseline to this file (atomically), outside DIR, and exit: run it in the trusted step that cloned the repository")
	fs.StringVar(&o.mountPath, "mount-path", "", "where the sandboxes see DIR (default DIR): absolute symlinks are judged against it and findings name paths under it")
	o.out.register(fs)
	o.lf.register(fs)
	return func(ctx context.Context, args []string) int {
		const name = "sandprobe scan-workspace"
		if err := o.out.check(); err != nil {
			fmt.Fprintf(a.stderr, "%s: %v\n", name, err)
			return report.ExitBadInput
		}
		dir := args[0]
		mount, base, err := o.check(dir)
		if err != nil {
			fmt.Fprintf(a.stderr, "%s: %v\n", name, err)
			return report.ExitBadInput
		}
		start := time.Now()
		scan, err := probes.ScanWorkspace(ctx, dir, mount)
		if err != nil {
			fmt.Fprintf(a.stderr, "%s: %s\n", name, oneLineErr(err))
			return report.ExitCouldNotRun
		}
		if o.seal != "" {
			return a.sealWorkspace(scan, o.seal, dir)
		}
		target := "workspace/" + strings.TrimPrefix(mount, "/")
		fs := probes.JudgeWorkspace(scan, base)
		for i := range fs {
			fs[i].Target = target
		}
		run := report.Run{Backend: "scan-workspace", StartedAt: start.UTC(), Seconds: time.Since(start).Seconds(), Findings: fs}
		stampRun(&run)
		run.Phases = map[string]float64{"scan-workspace": run.Seconds}
		if base == nil {
			run.Notes = append(run.Notes, "no --baseline: nothing is vouched for, so the repository's own hooks and config fail too; seal one after the trusted clone with --seal FILE")
		}
		if err := o.out.write(ctx, a, run, o.lf.verbose); err != nil {
			fmt.Fprintf(a.stderr, "%s: %v\n", name, err)
			return report.ExitCouldNotRun
		}
		return run.ExitCode()
	}
}

// check finds bad input before the scan: DIR a directory, the path the
// sandboxes see it at (returned; DIR's own by default), --seal or
// --baseline but not both, each outside DIR, and the baseline (returned)
// readable.
func (o *scanWorkspaceOptions) check(dir string) (string, *probes.WorkspaceBaseline, error) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return "", nil, fmt.Errorf("DIR: %s: %w", dir, unwrapPath(err))
	}
	mount := o.mountPath
	if mount == "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", nil, fmt.Errorf("DIR: %w", err)
		}
		mount = abs
	}
	if !strings.HasPrefix(mount, "/") || path.Clean(mount) != mount {
		return "", nil, fmt.Errorf("--mount-path: want a clean absolute path, got %q", o.mountPath)
	}
	if o.seal != "" && o.baseline != "" {
		return "", nil, errors.New("--seal and --baseline: give one (seal after the trusted clone, compare between phases)")
	}
	for _, f := range []struct{ flag, file string }{{"--seal", o.seal}, {"--baseline", o.baseline}} {
		if f.file == "" {
			continue
		}
		if err := outsideDir(f.file, dir); err != nil {
			return "", nil, fmt.Errorf("%s: %w", f.flag, err)
		}
	}
	var base *probes.WorkspaceBaseline
	if o.baseline != "" {
		raw, err := os.ReadFile(o.baseline)
		if err == nil {
			base, err = probes.ParseWorkspaceBaseline(raw)
		}
		if err != nil {
			return "", nil, fmt.Errorf("--baseline: %s: %w", o.baseline, unwrapPath(err))
		}
	}
	return mount, base, nil
}

// sealWorkspace writes the baseline, whole or not at all: a scan that could
// not read part of the workspace seals nothing.
func (a *app) sealWorkspace(scan *probes.WorkspaceScan, file, dir string) int {
	if len(scan.Problems) > 0 {
		p := scan.Problems[0]
		fmt.Fprintf(a.stderr, "sandprobe scan-workspace: --seal: cannot read %s (%s) and %d more: a baseline must see the whole workspace; nothing written\n", p.Path, p.Err, len(scan.Problems)-1)
		return report.ExitCouldNotRun
	}
	raw, err := json.MarshalIndent(probes.NewWorkspaceBaseline(scan, time.Now()), "", "  ")
	if err != nil {
		fmt.Fprintf(a.stderr, "sandprobe scan-workspace: --seal: %v\n", err)
		return report.ExitCouldNotRun
	}
	raw = append(raw, '\n')
	if err := report.WriteFileAtomic(file, func(w io.Writer) error { _, err := w.Write(raw); return err }); err != nil {
		fmt.Fprintf(a.stderr, "sandprobe scan-workspace: --seal: %v\n", err)
		return report.ExitCouldNotRun
	}
	sum := sha256.Sum256(raw)
	fmt.Fprintf(a.stdout, "sealed %s: %d items in %d entries (%d git directories) -> %s sha256:%s\n",
		dir, len(scan.Items), scan.Entries, scan.GitDirs, file, hex.EncodeToString(sum[:]))
	return report.ExitOK
}

// outsideDir refuses a file that lies in dir (after resolving links): what
// a phase can write cannot vouch for what the phase left.
func outsideDir(file, dir string) error {
	d, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if d, err = filepath.Abs(d); err != nil {
		return err
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(file))
	if err != nil {
		return fmt.Errorf("%s: %w", file, unwrapPath(err))
	}
	if parent, err = filepath.Abs(parent); err != nil {
		return err
	}
	f := filepath.Join(parent, filepath.Base(file))
	if f == d || strings.HasPrefix(f, strings.TrimSuffix(d, "/")+"/") {
		return fmt.Errorf("%s is inside %s: whoever writes there could rewrite it; keep it where no phase or sandbox can write", file, dir)
	}
	return nil
}

// unwrapPath drops the "open FILE:" a PathError adds when the message
// names the file already.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
