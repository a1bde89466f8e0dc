package probes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/result"
)

// checkPhasePersistence scans the shared workspace at the start of a phase
// for what the phases before it may have left to run (ScanWorkspace) and
// judges it against the baseline the trusted step sealed. The baseline
// itself must be out of the phase's reach: a sandbox that could rewrite it
// could vouch for anything it planted.
func checkPhasePersistence(ctx context.Context, env *Env) []result.Finding {
	ph := env.Policy.Spec.Phases
	var (
		base *WorkspaceBaseline
		out  []result.Finding
	)
	if ph.Baseline != "" {
		raw, err := os.ReadFile(ph.Baseline)
		if err != nil {
			return []result.Finding{errorf(ph.Baseline, "read the workspace baseline %s: %s", ph.Baseline, errnoName(err))}
		}
		if base, err = ParseWorkspaceBaseline(raw); err != nil {
			return []result.Finding{errorf(ph.Baseline, "the workspace baseline %s: %v", ph.Baseline, err)}
		}
		if f, ok := baselineWritable(ph.Baseline); ok {
			out = append(out, f)
		}
	}
	scan, err := ScanWorkspace(ctx, ph.Workspace, ph.Workspace)
	if err != nil {
		return append(out, errorf(ph.Workspace, "scan the workspace %s: %s", ph.Workspace, errnoName(err)))
	}
	return append(out, JudgeWorkspace(scan, base)...)
}

// baselineWritable fails when this uid (the phases' uid) could rewrite or
// replace the baseline: write the file, or create and rename in its directory.
func baselineWritable(path string) (result.Finding, bool) {
	var where string
	switch {
	case unix.Access(path, unix.W_OK) == nil:
		where = "the file is writable by uid " + fmt.Sprint(os.Getuid())
	case unix.Access(filepath.Dir(path), unix.W_OK) == nil:
		where = "its directory is writable by uid " + fmt.Sprint(os.Getuid()) + ": the file can be replaced"
	default:
		return result.Finding{}, false
	}
	f := fail(path, "the workspace baseline out of the sandbox's reach (a read-only mount from outside the workspace)", where, describeDir(filepath.Dir(path)))
	f.Check = CheckPersistence
	f.Fix = "mount the baseline read-only (a ConfigMap or Secret volume; docker: -v FILE:PATH:ro) from storage no phase can write"
	return f, true
}
