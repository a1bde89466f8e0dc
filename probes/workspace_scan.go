package probes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
)

// Kinds of persistence a workspace scan finds (PersistItem.Kind).
const (
	KindGitHook         = "git-hook"         // an executable hook git runs
	KindGitConfig       = "git-config"       // a config key that runs a command or redirects git
	KindGitDir          = "git-dir"          // a .git file pointing out of the workspace
	KindShellStartup    = "shell-startup"    // a file a shell reads when it starts
	KindToolConfig      = "tool-config"      // a package manager's or tool's config file
	KindLifecycleScript = "lifecycle-script" // a package.json script npm runs by itself
	KindSymlinkOut      = "symlink-out"      // a symlink pointing out of the workspace
)

// PersistItem is one thing on a shared workspace that would run, or change
// how tools run, in the next phase. It says where and why, never what the
// file holds: Digest is compared with a baseline and never shown.
type PersistItem struct {
	Path string `json:"path"` // relative to the workspace root, slash-separated
	Kind string `json:"kind"`
	// Name is the config key or the script ("core.hooksPath",
	// "scripts.postinstall"); "" for a whole file. A subsection that could
	// hold a secret (a URL with credentials) is written "*".
	Name string `json:"name,omitempty"`
	// Digest is the SHA-256 of what the item holds: the file, the key and
	// its value, the script, the link's target.
	Digest string `json:"digest"`
	// Why and Evidence explain it in findings; the baseline leaves them out.
	Why      string `json:"-"`
	Evidence string `json:"-"`
}

// Key identifies an item across scans (its digest aside).
func (it PersistItem) Key() string { return it.Kind + "\x00" + it.Path + "\x00" + it.Name }

// ScanProblem is a part of the workspace the scan could not read: what it
// holds is unchecked, never clean.
type ScanProblem struct {
	Path string
	Err  string
}

// WorkspaceScan is what ScanWorkspace saw.
type WorkspaceScan struct {
	Root      string // where the scan read the workspace
	MountPath string // where sandboxes see it (absolute symlinks are judged against this)
	Entries   int    // files, directories and links visited
	GitDirs   int
	Items     []PersistItem
	Problems  []ScanProblem
}

// DisplayPath is an item's path as a sandbox sees it.
func (s *WorkspaceScan) DisplayPath(rel string) string {
	if rel == "" || rel == "." {
		return s.MountPath
	}
	return strings.TrimSuffix(s.MountPath, "/") + "/" + rel
}

// gitHooks are the hook names git runs (githooks(5)); any other file in a
// hooks directory, such as the *.sample files `git init` writes, never runs.
var gitHooks = map[string]bool{
	"applypatch-msg": true, "pre-applypatch": true, "post-applypatch": true, "pre-commit": true,
	"pre-merge-commit": true, "prepare-commit-msg": true, "commit-msg": true, "post-commit": true,
	"pre-rebase": true, "post-checkout": true, "post-merge": true, "pre-push": true,
	"pre-receive": true, "update": true, "proc-receive": true, "post-receive": true,
	"post-update": true, "reference-transaction": true, "push-to-checkout": true,
	"pre-auto-gc": true, "post-rewrite": true, "sendemail-validate": true,
	"fsmonitor-watchman": true, "p4-changelist": true, "p4-prepare-changelist": true,
	"p4-post-changelist": true, "p4-pre-submit": true, "post-index-change": true,
}

// shellStartup are the files shells read when they start (or end).
var shellStartup = map[string]bool{
	".bashrc": true, ".bash_profile": true, ".bash_login": true, ".bash_logout": true, ".profile": true,
	".zshrc": true, ".zshenv": true, ".zprofile": true, ".zlogin": true, ".zlogout": true,
	".kshrc": true, ".mkshrc": true, ".cshrc": true, ".tcshrc": true, ".login": true, ".logout": true,
	".inputrc": true,
}

// toolConfig are files that change how a package manager or tool runs,
// matched by name (case-insensitively) with why.
var toolConfig = map[string]string{
	".npmrc":           "npm's config: registry, scripts, auth, node-options",
	".yarnrc":          "yarn's config: registry and scripts",
	".yarnrc.yml":      "yarn's config: registry, plugins and scripts",
	".pnpmfile.cjs":    "pnpm's hooks: code pnpm runs on every install",
	"pip.conf":         "pip's config: index URL, trusted hosts",
	"pip.ini":          "pip's config: index URL, trusted hosts",
	".pydistutils.cfg": "distutils' config: read by every setup.py",
	"nuget.config":     "NuGet's config: package sources",
	".envrc":           "direnv runs it when a shell enters the directory",
	".tool-versions":   "asdf's versions: which tool and plugin run",
	".mise.toml":       "mise's config: tools, env and tasks",
	"mise.toml":        "mise's config: tools, env and tasks",
	".curlrc":          "curl's config: read by every curl",
	".wgetrc":          "wget's config: read by every wget",
	".gemrc":           "RubyGems' config: sources",
	".condarc":         "conda's config: channels",
}

// toolConfigPaths are matched by their last two path elements.
var toolConfigPaths = map[string]string{
	".ssh/config":         "ssh's config: ProxyCommand and LocalCommand run commands whenever git uses ssh",
	".ssh/rc":             "ssh runs it on login",
	".cargo/config":       "cargo's config: build.rustc-wrapper and runners run commands",
	".cargo/config.toml":  "cargo's config: build.rustc-wrapper and runners run commands",
	".bundle/config":      "bundler's config",
	".mvn/extensions.xml": "Maven loads these extensions into every build",
	".mvn/jvm.config":     "JVM options for every Maven run",
}

// npmLifecycle are the package.json scripts npm (and yarn, pnpm) run by
// themselves on install, pack or publish.
var npmLifecycle = map[string]bool{
	"preinstall": true, "install": true, "postinstall": true, "prepublish": true, "preprepare": true,
	"prepare": true, "postprepare": true, "prepack": true, "postpack": true, "dependencies": true,
}

// ScanWorkspace walks a shared workspace (never following a link) and
// lists everything that would run, or change how tools run, in the next
// phase: executable git hooks (in every .git and bare repository, and in
// the directories core.hooksPath names), git config keys that run commands
// or redirect git, .git files pointing elsewhere, shell start-up files,
// tool config, npm lifecycle scripts (outside node_modules) and symlinks
// that point out of the workspace. mountPath is where sandboxes see the
// workspace ("" means dir itself). File contents are read to hash them and
// to parse config; none is returned.
func ScanWorkspace(ctx context.Context, dir, mountPath string) (*WorkspaceScan, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	if mountPath == "" {
		mountPath = dir
	}
	s := &wsScanner{scan: &WorkspaceScan{Root: dir, MountPath: path.Clean(mountPath)}, seen: map[string]bool{}}
	if err := s.walk(ctx, "", ""); err != nil {
		return nil, err
	}
	for _, hp := range s.hooksPaths {
		s.hooksDir(hp.dir, "run by git as a hook: core.hooksPath in "+hp.config+" points here")
	}
	sort.SliceStable(s.scan.Items, func(i, j int) bool {
		a, b := s.scan.Items[i], s.scan.Items[j]
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		return a.Name < b.Name
	})
	return s.scan, nil
}

type wsScanner struct {
	scan       *WorkspaceScan
	seen       map[string]bool // item keys already listed (a hooks dir found twice)
	hooksPaths []struct{ dir, config string }
}

func (s *wsScanner) abs(rel string) string {
	return filepath.Join(s.scan.Root, filepath.FromSlash(rel))
}

func (s *wsScanner) problem(rel string, err error) {
	s.scan.Problems = append(s.scan.Problems, ScanProblem{Path: s.scan.DisplayPath(rel), Err: errnoName(err)})
}

func (s *wsScanner) add(it PersistItem) {
	if s.seen[it.Key()+"\x00"+it.Digest] {
		return
	}
	s.seen[it.Key()+"\x00"+it.Digest] = true
	s.scan.Items = append(s.scan.Items, it)
}

// walk visits rel (a directory) and everything under it, depth first in
// name order. gitDir is the git directory rel lies in ("" outside any).
func (s *wsScanner) walk(ctx context.Context, rel, gitDir string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	entries, err := os.ReadDir(s.abs(rel))
	if err != nil {
		s.problem(rel, err)
		return nil
	}
	if gitDir == "" && isBareRepo(entries) {
		// A bare repository runs its hooks as a .git directory does.
		gitDir = rel
		s.scan.GitDirs++
	}
	for _, e := range entries {
		s.scan.Entries++
		name := e.Name()
		r := path.Join(rel, name)
		t := e.Type()
		switch {
		case t&fs.ModeSymlink != 0:
			s.symlink(r, name, gitDir)
		case t.IsDir():
			sub := gitDir
			switch {
			case gitDir == "" && name == ".git":
				sub = r
				s.scan.GitDirs++
			case gitDir != "" && (name == "objects" || name == "lfs"):
				continue // content-addressed objects: nothing there runs
			case gitDir != "" && name == "hooks":
				s.hooksDir(r, "run by git as a hook")
			}
			if err := s.walk(ctx, r, sub); err != nil {
				return err
			}
		case t.IsRegular():
			s.file(r, name, gitDir != "")
		}
	}
	return nil
}

func isBareRepo(entries []fs.DirEntry) bool {
	var head, config, objects bool
	for _, e := range entries {
		switch e.Name() {
		case "HEAD":
			head = e.Type().IsRegular()
		case "config":
			config = e.Type().IsRegular()
		case "objects":
			objects = e.IsDir()
		}
	}
	return head && config && objects
}

// file looks at one regular file (or what a link by that name points to).
func (s *wsScanner) file(rel, name string, inGit bool) {
	switch {
	case inGit && (name == "config" || name == "config.worktree"):
		s.gitConfig(rel, true)
		return
	case inGit:
		return // the rest of a git dir: refs, index, logs; hooks are seen apart
	case name == ".git":
		s.gitFile(rel)
		return
	case name == ".gitconfig" || strings.HasSuffix("/"+rel, "/.config/git/config"):
		s.gitConfig(rel, false)
		return
	case name == "package.json" && !underNodeModules(rel):
		s.packageJSON(rel)
		return
	case shellStartup[name] || strings.HasSuffix("/"+rel, "/.config/fish/config.fish") || strings.Contains("/"+rel, "/.config/fish/conf.d/"):
		s.wholeFile(rel, KindShellStartup, "", "a shell reads it when it starts")
		return
	}
	if why, ok := toolConfig[strings.ToLower(name)]; ok {
		s.wholeFile(rel, KindToolConfig, "", why)
		return
	}
	if dir := path.Dir(rel); dir != "." {
		if why, ok := toolConfigPaths[path.Base(dir)+"/"+name]; ok {
			s.wholeFile(rel, KindToolConfig, "", why)
		}
	}
}

func underNodeModules(rel string) bool {
	return strings.HasPrefix(rel, "node_modules/") || strings.Contains(rel, "/node_modules/")
}

// describeFile is a file's evidence: mode, size and owner, never content.
func describeFile(fi fs.FileInfo) string {
	s := fmt.Sprintf("mode %04o, %d bytes", uint32(fi.Mode().Perm()), fi.Size())
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s += fmt.Sprintf(", owner %d:%d", st.Uid, st.Gid)
	}
	return s + ", modified " + fi.ModTime().UTC().Format("2006-01-02T15:04:05Z")
}

// readSmall reads a file the scan parses (config, package.json); a file
// larger than 4 MiB is hashed but not parsed.
func (s *wsScanner) read(rel string) ([]byte, fs.FileInfo, bool) {
	f, err := os.Open(s.abs(rel))
	if err != nil {
		s.problem(rel, err)
		return nil, nil, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		s.problem(rel, err)
		return nil, nil, false
	}
	b, err := io.ReadAll(io.LimitReader(f, 4<<20+1))
	if err != nil {
		s.problem(rel, err)
		return nil, nil, false
	}
	return b, fi, true
}

// wholeFile lists a file whose every byte matters, hashed whole.
func (s *wsScanner) wholeFile(rel, kind, name, why string) {
	f, err := os.Open(s.abs(rel))
	if err != nil {
		s.problem(rel, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		s.problem(rel, err)
		return
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		s.problem(rel, err)
		return
	}
	s.add(PersistItem{Path: rel, Kind: kind, Name: name, Digest: hex.EncodeToString(h.Sum(nil)), Why: why, Evidence: describeFile(fi)})
}

// hooksDir lists the executable hooks in a hooks directory.
func (s *wsScanner) hooksDir(rel, why string) {
	entries, err := os.ReadDir(s.abs(rel))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.problem(rel, err)
		}
		return
	}
	for _, e := range entries {
		if !gitHooks[e.Name()] {
			continue
		}
		r := path.Join(rel, e.Name())
		// git runs what the link points to, too: stat, not lstat.
		fi, err := os.Stat(s.abs(r))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				s.problem(r, err)
			}
			continue
		}
		if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			continue // git ignores a hook that is not executable
		}
		s.wholeFile(r, KindGitHook, e.Name(), why)
	}
}

// gitKeyWhy says why a git config key matters, or "" when it does not.
func gitKeyWhy(e gitConfigEntry) string {
	if e.Section == "core" {
		return gitCoreWhy(e)
	}
	if why := gitCommandWhy(e); why != "" {
		return why
	}
	sec, key := e.Section, e.Key
	switch {
	case sec == "include" && key == "path", sec == "includeif" && key == "path":
		return "pulls another config file into git's"
	case sec == "url" && (key == "insteadof" || key == "pushinsteadof"):
		return "rewrites where git fetches from or pushes to"
	case sec == "protocol" && key == "allow":
		return "allows transports (ext:: runs commands)"
	case sec == "http" && key == "proxy":
		return "sends git's HTTP traffic through another proxy"
	case sec == "http" && key == "sslverify" && gitFalse(e):
		return "turns off TLS verification for git"
	case sec == "http" && key == "sslcainfo":
		return "replaces the CAs git trusts"
	}
	return ""
}

// gitCoreWhy is gitKeyWhy for the core section.
func gitCoreWhy(e gitConfigEntry) string {
	switch key := e.Key; {
	case key == "hookspath":
		return "moves git's hooks to a directory of the phase's choosing"
	case key == "fsmonitor" && !gitBool(e):
		return "git runs this command on every status, diff and commit"
	case key == "sshcommand" || key == "gitproxy" || key == "askpass" || key == "editor" || key == "pager":
		return "git runs this command (core." + key + ")"
	case key == "worktree":
		return "points git at another work tree"
	}
	return ""
}

// gitCommandWhy is gitKeyWhy for the keys (outside core) whose value is a
// command git runs: external tools, filters, diff and merge drivers,
// shell aliases, submodule updates, a remote's transport.
func gitCommandWhy(e gitConfigEntry) string {
	sec, key, sub := e.Section, e.Key, e.Subsection
	if gitToolKey(e) {
		return "git runs this command (" + sec + "." + key + ")"
	}
	shell := strings.HasPrefix(strings.TrimSpace(e.Value), "!")
	switch {
	case sec == "filter" && (key == "clean" || key == "smudge" || key == "process"):
		return "git runs this filter command on checkout and add"
	case sec == "diff" && sub != "" && (key == "textconv" || key == "command"):
		return "git runs this diff driver command"
	case sec == "merge" && sub != "" && key == "driver":
		return "git runs this merge driver command"
	case sec == "alias" && shell:
		return "a shell alias: git runs it as a command"
	case sec == "submodule" && key == "update" && shell:
		return "git runs this command on submodule update"
	case sec == "remote" && (key == "uploadpack" || key == "receivepack"):
		return "git runs this command for the remote's transport"
	}
	return ""
}

// gitToolKey says whether the key names an external tool git runs: the
// sequence editor, an external diff, the signing program, a credential
// helper.
func gitToolKey(e gitConfigEntry) bool {
	sec, key := e.Section, e.Key
	return sec == "sequence" && key == "editor" || sec == "diff" && e.Subsection == "" && key == "external" ||
		sec == "gpg" && key == "program" || sec == "credential" && key == "helper"
}

// gitFalse says whether a config value is git's false.
func gitFalse(e gitConfigEntry) bool {
	switch strings.ToLower(strings.TrimSpace(e.Value)) {
	case "false", "no", "off", "0":
		return true
	}
	return false
}

// gitBool says whether a config value is a boolean (a key without a value
// is true).
func gitBool(e gitConfigEntry) bool {
	switch strings.ToLower(strings.TrimSpace(e.Value)) {
	case "", "true", "yes", "on", "1", "false", "no", "off", "0":
		return true
	}
	return !e.HasValue
}

var safeSubsection = regexp.MustCompile(`^[A-Za-z0-9._:/+-]{1,80}$`)

// gitKeyNames spells keys as git's documentation does (git compares them
// case-insensitively).
var gitKeyNames = map[string]string{
	"hookspath": "hooksPath", "sshcommand": "sshCommand", "gitproxy": "gitProxy", "askpass": "askPass",
	"insteadof": "insteadOf", "pushinsteadof": "pushInsteadOf", "sslverify": "sslVerify", "sslcainfo": "sslCAInfo",
	"includeif": "includeIf",
}

func gitKeyName(s string) string {
	if n, ok := gitKeyNames[s]; ok {
		return n
	}
	return s
}

// displayKey names a key as git's documentation does, with a subsection
// that could hold a secret (a URL with credentials, anything unusual)
// written "*".
func displayKey(e gitConfigEntry) string {
	sec, key := gitKeyName(e.Section), gitKeyName(e.Key)
	if e.Subsection == "" {
		return sec + "." + key
	}
	sub := e.Subsection
	if !safeSubsection.MatchString(sub) {
		sub = "*"
	}
	return sec + "." + sub + "." + key
}

// gitConfig reports the keys of a git config file that run commands or
// redirect git, and remembers core.hooksPath to list the hooks there.
func (s *wsScanner) gitConfig(rel string, inGitDir bool) {
	b, fi, ok := s.read(rel)
	if !ok {
		return
	}
	entries, err := parseGitConfig(bytes.NewReader(b))
	if err != nil {
		// git refuses to run with a config it cannot parse; a file that
		// fools this parser but not git is still one to look at.
		s.add(PersistItem{Path: rel, Kind: KindGitConfig, Name: "(unparsable)", Digest: digestOf(b),
			Why: "a git config this scan cannot parse (" + err.Error() + ")", Evidence: describeFile(fi)})
		return
	}
	for _, e := range entries {
		why := gitKeyWhy(e)
		if why == "" {
			continue
		}
		s.add(PersistItem{Path: rel, Kind: KindGitConfig, Name: displayKey(e),
			Digest: digestOf([]byte(e.FullKey() + "\x00" + e.Value)), Why: why,
			Evidence: fmt.Sprintf("line %d of %s (%s)", e.Line, s.scan.DisplayPath(rel), describeFile(fi))})
		if e.Section == "core" && e.Key == "hookspath" && e.Value != "" {
			if dir, ok := s.hooksPathDir(rel, inGitDir, e.Value); ok {
				s.hooksPaths = append(s.hooksPaths, struct{ dir, config string }{dir, s.scan.DisplayPath(rel)})
			}
		}
	}
}

// hooksPathDir resolves core.hooksPath to a directory on the workspace:
// as given when absolute; else relative to where hooks run, the work tree
// (the directory holding .git) for a repository's config, the git
// directory itself for a bare repository's or a submodule's.
func (s *wsScanner) hooksPathDir(configRel string, inGitDir bool, value string) (string, bool) {
	if strings.HasPrefix(value, "/") {
		return s.inside(path.Clean(value))
	}
	base := path.Dir(configRel)
	if inGitDir && path.Base(base) == ".git" {
		base = path.Dir(base)
	}
	p := path.Join(base, value)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", false
	}
	return p, true
}

// inside maps an absolute path as sandboxes see it to one relative to the
// workspace root.
func (s *wsScanner) inside(abs string) (string, bool) {
	mp := s.scan.MountPath
	switch {
	case abs == mp:
		return ".", true
	case strings.HasPrefix(abs, strings.TrimSuffix(mp, "/")+"/"):
		return strings.TrimPrefix(abs, strings.TrimSuffix(mp, "/")+"/"), true
	}
	return "", false
}

// gitFile looks at a .git file: "gitdir: PATH" sends git to a repository
// elsewhere (a worktree, a submodule); out of the workspace it is one the
// phase chose.
func (s *wsScanner) gitFile(rel string) {
	b, fi, ok := s.read(rel)
	if !ok {
		return
	}
	line, _, _ := strings.Cut(string(b), "\n")
	target, found := strings.CutPrefix(strings.TrimSpace(line), "gitdir:")
	if !found {
		return
	}
	target = strings.TrimSpace(target)
	if _, escapes := s.escapes(rel, target); escapes {
		s.add(PersistItem{Path: rel, Kind: KindGitDir, Name: "gitdir", Digest: digestOf([]byte(target)),
			Why: "points git at a repository outside the workspace: its hooks and config run here", Evidence: describeFile(fi)})
	}
}

// escapes resolves a link target (or gitdir) found at rel lexically and
// says whether it leaves the workspace.
func (s *wsScanner) escapes(rel, target string) (string, bool) {
	if strings.HasPrefix(target, "/") {
		_, ok := s.inside(path.Clean(target))
		return path.Clean(target), !ok
	}
	p := path.Join(path.Dir(rel), target)
	return p, p == ".." || strings.HasPrefix(p, "../")
}

// symlink reports a link out of the workspace, and looks through a link
// whose name is one git or a shell acts on (a .bashrc linked to an
// innocent-looking file runs that file).
func (s *wsScanner) symlink(rel, name, gitDir string) {
	target, err := os.Readlink(s.abs(rel))
	if err != nil {
		s.problem(rel, err)
		return
	}
	if _, out := s.escapes(rel, target); out {
		shown := target
		if len(shown) > 200 {
			shown = shown[:200] + "…"
		}
		s.add(PersistItem{Path: rel, Kind: KindSymlinkOut, Digest: digestOf([]byte(target)),
			Why:      "a symlink out of the workspace: the next phase reads or writes there through it",
			Evidence: fmt.Sprintf("points to %q", shown)})
	}
	fi, err := os.Stat(s.abs(rel))
	if err != nil {
		return // dangling: nothing runs through it
	}
	switch {
	case fi.Mode().IsRegular():
		s.file(rel, name, gitDir != "")
	case fi.IsDir() && gitDir != "" && name == "hooks":
		s.hooksDir(rel, "run by git as a hook (through a symlinked hooks directory)")
	case fi.IsDir() && gitDir == "" && name == ".git":
		s.scan.GitDirs++
		s.hooksDir(path.Join(rel, "hooks"), "run by git as a hook (through a symlinked .git)")
		for _, c := range []string{"config", "config.worktree"} {
			if _, err := os.Stat(s.abs(path.Join(rel, c))); err == nil {
				s.gitConfig(path.Join(rel, c), true)
			}
		}
	}
}

// packageJSON lists the lifecycle scripts npm runs by itself.
func (s *wsScanner) packageJSON(rel string) {
	b, fi, ok := s.read(rel)
	if !ok {
		return
	}
	var pkg struct {
		Scripts map[string]json.RawMessage `json:"scripts"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		return // npm refuses a package.json it cannot parse: it runs nothing
	}
	names := make([]string, 0, len(pkg.Scripts))
	for n := range pkg.Scripts {
		if npmLifecycle[n] {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		s.add(PersistItem{Path: rel, Kind: KindLifecycleScript, Name: "scripts." + n,
			Digest: digestOf(append([]byte(n+"\x00"), pkg.Scripts[n]...)),
			Why:    "npm runs it by itself on install (" + n + ")", Evidence: describeFile(fi)})
	}
}

func digestOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
