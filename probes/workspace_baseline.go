package probes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandprobe/sandprobe/result"
)

// CheckPersistence is the check a workspace scan's findings belong to, in
// the probe (spec.phases.workspace) and in `sandprobe scan-workspace`.
const CheckPersistence = "phase.persistence"

// WorkspaceBaselineSchema versions the baseline file.
const WorkspaceBaselineSchema = "sandprobe.dev/workspace-baseline/v1"

// WorkspaceBaseline is what the trusted step that cloned the repository
// sealed: every persistence item the workspace held then, by path, kind,
// name and digest. It holds no file content (digests only), and it must be
// kept where no phase can write it (docs/phases.md).
type WorkspaceBaseline struct {
	Schema    string        `json:"schema"`
	MountPath string        `json:"mountPath"`
	SealedAt  time.Time     `json:"sealedAt"`
	Entries   int           `json:"entries"`
	Items     []PersistItem `json:"items"`
}

// NewWorkspaceBaseline seals a scan.
func NewWorkspaceBaseline(scan *WorkspaceScan, now time.Time) WorkspaceBaseline {
	items := scan.Items
	if items == nil {
		items = []PersistItem{}
	}
	return WorkspaceBaseline{Schema: WorkspaceBaselineSchema, MountPath: scan.MountPath, SealedAt: now.UTC(), Entries: scan.Entries, Items: items}
}

var persistKinds = map[string]bool{
	KindGitHook: true, KindGitConfig: true, KindGitDir: true, KindShellStartup: true,
	KindToolConfig: true, KindLifecycleScript: true, KindSymlinkOut: true,
}

// ParseWorkspaceBaseline reads a baseline strictly: unknown fields, another
// schema, an unknown kind or a malformed digest are errors, so a file that
// is not what `scan-workspace --seal` wrote vouches for nothing.
func ParseWorkspaceBaseline(b []byte) (*WorkspaceBaseline, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var base WorkspaceBaseline
	if err := dec.Decode(&base); err != nil {
		return nil, fmt.Errorf("not a workspace baseline: %w", err)
	}
	if base.Schema != WorkspaceBaselineSchema {
		return nil, fmt.Errorf("schema: want %q, got %q", WorkspaceBaselineSchema, base.Schema)
	}
	for i, it := range base.Items {
		switch {
		case !persistKinds[it.Kind]:
			return nil, fmt.Errorf("items[%d].kind: unknown kind %q", i, it.Kind)
		case it.Path == "":
			return nil, fmt.Errorf("items[%d].path: empty", i)
		case !isHexDigest(it.Digest):
			return nil, fmt.Errorf("items[%d].digest: want 64 hex digits", i)
		}
	}
	return &base, nil
}

func isHexDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

const persistExpected = "nothing that runs, or changes how tools run, in the next phase beyond the sealed baseline"

var persistFix = map[string]string{
	KindGitHook:         "remove the hook; hooks the repository needs are sealed by the step that cloned it (sandprobe scan-workspace DIR --seal FILE)",
	KindGitConfig:       "remove the key (git config --file FILE --unset KEY), or have the trusted step set it before it seals the baseline",
	KindGitDir:          "remove the .git file, or point it at a repository inside the workspace",
	KindShellStartup:    "remove the file, and keep HOME (and the XDG directories) off the shared volume",
	KindToolConfig:      "remove the file, or seal it in the baseline if the repository commits it",
	KindLifecycleScript: "remove the script, or run installs with --ignore-scripts",
	KindSymlinkOut:      "remove the link",
}

// JudgeWorkspace turns a scan into findings: every item the baseline does
// not hold with the same digest fails (added, or changed since it was
// sealed), every part the scan could not read is an error, and a clean
// workspace passes with what was scanned. Without a baseline nothing is
// vouched for, and every item fails.
func JudgeWorkspace(scan *WorkspaceScan, base *WorkspaceBaseline) []result.Finding {
	sealed := map[string]map[string]bool{}
	if base != nil {
		for _, it := range base.Items {
			if sealed[it.Key()] == nil {
				sealed[it.Key()] = map[string]bool{}
			}
			sealed[it.Key()][it.Digest] = true
		}
	}
	var out []result.Finding
	matched := 0
	for _, it := range scan.Items {
		var actual string
		switch {
		case base == nil:
			actual = it.Why + " — no baseline vouches for it"
		case sealed[it.Key()][it.Digest]:
			matched++
			continue
		case sealed[it.Key()] != nil:
			actual = it.Why + " — changed since the baseline was sealed"
		default:
			actual = it.Why + " — added since the baseline was sealed"
		}
		subject := scan.DisplayPath(it.Path)
		if it.Name != "" && it.Kind != KindGitHook {
			subject += " " + it.Name
		}
		f := fail(subject, persistExpected, actual, it.Kind+"; "+it.Evidence+"; the content is not reported")
		f.Check, f.Fix = CheckPersistence, persistFix[it.Kind]
		out = append(out, f)
	}
	for _, p := range scan.Problems {
		f := errorf(p.Path, "cannot read %s: %s; what it holds is unchecked", p.Path, p.Err)
		f.Check, f.Fix = CheckPersistence, "let the scan read the whole workspace (it runs as the sandbox's uid: a phase that hides a directory from it hides it from itself too)"
		out = append(out, f)
	}
	if len(out) > 0 {
		return out
	}
	if scan.Entries == 0 && (base == nil || base.Entries > 0) {
		// An empty directory proves nothing about the volume the phases
		// share: it may not be mounted here at all.
		f := pass(scan.MountPath, persistExpected, "", "")
		f.Check, f.Status = CheckPersistence, result.Inconclusive
		f.Actual = "the workspace is empty: nothing shows the volume the phases share is mounted here"
		if base != nil {
			f.Actual += fmt.Sprintf(" (the baseline was sealed with %d entries)", base.Entries)
		}
		f.Fix = "mount the shared workspace where spec.phases.workspace says (run the probe in the phase's own pod: sandprobe-probe probe --phase)"
		return []result.Finding{f}
	}
	actual := "nothing found"
	if base != nil {
		actual = fmt.Sprintf("nothing beyond the baseline (%d sealed items unchanged)", matched)
	}
	evidence := fmt.Sprintf("scanned %d entries and %d git directories under %s, following no link", scan.Entries, scan.GitDirs, scan.MountPath)
	if base != nil {
		evidence += fmt.Sprintf("; baseline sealed %s with %d items", base.SealedAt.Format(time.RFC3339), len(base.Items))
	}
	f := pass(scan.MountPath, persistExpected, actual, evidence)
	f.Check = CheckPersistence
	return []result.Finding{f}
}
