package probes

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sandprobe/sandprobe/result"
)

// tokenRoots are the usual mount points of tokens besides the declared
// path: projected service-account tokens for other audiences (Vault, a
// cloud's workload identity: /var/run/secrets/tokens,
// /var/run/secrets/eks.amazonaws.com, /var/run/secrets/azure/tokens), and
// Docker's secrets.
var tokenRoots = []string{"/var/run/secrets", "/run/secrets"}

// tokenDepth bounds the walk: the deepest usual place is
// /var/run/secrets/eks.amazonaws.com/serviceaccount/token.
const tokenDepth = 4

// checkServiceAccountToken looks for the token file at the declared path
// and for any file named like a token under the usual mount points; it
// never reads one.
func checkServiceAccountToken(_ context.Context, env *Env) []result.Finding {
	path := env.Policy.Spec.TokenPath
	roots := env.tokenRoots
	if roots == nil {
		roots = tokenRoots
	}
	var out []result.Finding
	fi, err := os.Stat(path)
	switch {
	case os.IsNotExist(err):
	case err != nil:
		out = append(out, fail(path, "no token file", "cannot tell: "+errnoName(err), "a directory on the way is not searchable; a token may be there"))
	default:
		out = append(out, tokenFound(path, fi))
	}
	seen := map[string]bool{}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		seen[real] = true
	}
	var searched []string
	for _, root := range roots {
		real, err := filepath.EvalSymlinks(root)
		if err != nil || slices.Contains(searched, real) {
			continue // absent, or the same place by another name (/var/run is /run)
		}
		searched = append(searched, root)
		for _, p := range tokensUnder(root) {
			r, err := filepath.EvalSymlinks(p)
			if err != nil || seen[r] {
				continue
			}
			seen[r] = true
			if fi, err := os.Stat(p); err == nil {
				out = append(out, tokenFound(p, fi))
			}
		}
	}
	if len(out) == 0 {
		where := "no token file under " + strings.Join(roots, ", ")
		out = append(out, pass(path, "no token file", "absent", "stat: no such file; "+where))
	}
	return out
}

// tokensUnder lists the files under root whose name says token
// ("token", "vault-token", "azure-identity-token"), to tokenDepth. A
// projected volume keeps each file under a timestamped ..DATE directory
// and links it from the top: the links are followed, the ".." directories
// not walked (each file would count twice).
func tokensUnder(root string) []string {
	var out []string
	base := strings.Count(filepath.Clean(root), string(filepath.Separator))
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: nothing more to see there
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), "..") || strings.Count(p, string(filepath.Separator))-base >= tokenDepth) {
				return fs.SkipDir
			}
			return nil
		}
		if strings.Contains(strings.ToLower(d.Name()), "token") && !strings.HasPrefix(d.Name(), "..") {
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				out = append(out, p)
			}
		}
		return nil
	})
	return out
}

func tokenFound(path string, fi os.FileInfo) result.Finding {
	readable := "unreadable by this uid"
	if f, err := os.Open(path); err == nil {
		f.Close()
		readable = "readable by this uid"
	}
	return fail(path, "no token file", fmt.Sprintf("a token file is mounted (%d bytes, %s)", fi.Size(), readable),
		"the file's content was not read")
}
