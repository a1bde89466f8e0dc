package cache

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sourcegraph/conc/stream"
)

// Go's module cache (GOMODCACHE) keeps each module version's zip under
// cache/download/MODULE/@v/VERSION.zip beside VERSION.ziphash, the zip's
// "h1:" hash — the one go.sum pins (golang.org/x/mod/sumdb/dirhash's
// Hash1) — and the module extracted, read-only, at MODULE@VERSION/, which
// is what builds compile. The go command checks a zip against go.sum when
// it downloads it, never the extracted tree again. Each zip is re-hashed
// against its .ziphash, and every extracted file compared with the zip's
// entry, so a poisoned file, an added one or a removed one is named.
//
// Hash1 is written out here (sha256 and base64 from the standard library)
// rather than importing golang.org/x/mod for it: twelve lines, and the
// format is fixed by every go.sum in existence.

func detectGo(dir string) (string, bool) {
	if isDir(filepath.Join(dir, "cache", "download")) {
		return dir, true
	}
	return "", false
}

func newGoStore(root, target string) store {
	return store{kind: "go", root: root, target: target, verify: func(ctx context.Context, sink Sink, opt Options) (StoreSummary, error) {
		return verifyGo(ctx, root, target, sink, opt)
	}}
}

const goFix = "remove the module from the cache (go clean -modcache, or chmod -R u+w and delete MODULE@VERSION and its cache/download files) and download it again in the trusted step; then seal the cache"

func verifyGo(ctx context.Context, root, target string, sink Sink, opt Options) (StoreSummary, error) {
	ss := StoreSummary{Kind: "go", Root: root}
	s := stream.New().WithMaxGoroutines(opt.workers())
	dl := filepath.Join(root, "cache", "download")
	err := filepath.WalkDir(dl, func(p string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil {
			s.Go(func() stream.Callback {
				return func() { ss.Bad++; sink(couldNot(CheckIntegrity, target, p, unwrap(err))) }
			})
			return fs.SkipDir
		}
		if d.IsDir() && d.Name() == "sumdb" && filepath.Dir(p) == dl {
			return fs.SkipDir // the checksum database's tiles: no module content
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(p, ".ziphash") {
			return nil
		}
		rel, _ := filepath.Rel(dl, p)
		modEsc, verFile, ok := strings.Cut(filepath.ToSlash(rel), "/@v/")
		if !ok {
			return nil
		}
		verEsc := strings.TrimSuffix(verFile, ".ziphash")
		s.Go(func() stream.Callback {
			problems, n, err := goModule(root, p, modEsc, verEsc)
			return func() {
				ss.Entries += n
				if err != nil {
					ss.Bad++
					sink(couldNot(CheckIntegrity, target, p, unwrap(err)))
				}
				for _, pr := range problems {
					ss.Bad++
					sink(failure(CheckIntegrity, target, pr.rel, "the module as downloaded: its zip matching its .ziphash (go.sum's h1:), every extracted file the zip's own", pr.what, "module "+unescapeModule(modEsc)+"@"+unescapeModule(verEsc), goFix))
				}
			}
		})
		return nil
	})
	s.Wait()
	if err != nil {
		return ss, err
	}
	if ss.Bad == 0 {
		sink(passFinding(CheckIntegrity, target, root, "every module matches its .ziphash",
			fmt.Sprintf("all %d module files match their keys", ss.Entries),
			"Go module cache: each cache/download zip re-hashed (h1:, go.sum's hash) against its .ziphash, every file of the extracted MODULE@VERSION compared with the zip's entry"))
	}
	return ss, nil
}

// unescapeModule undoes the module cache's case encoding ("!a" is "A").
func unescapeModule(s string) string {
	if !strings.Contains(s, "!") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '!' && i+1 < len(s) && s[i+1] >= 'a' && s[i+1] <= 'z' {
			b.WriteByte(s[i+1] - 'a' + 'A')
			i++
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// goModule checks one module version: the zip against its .ziphash, the
// extracted tree (if any) against the zip.
func goModule(root, ziphash, modEsc, verEsc string) ([]nugetProblem, int, error) {
	var probs []nugetProblem
	add := func(p, what string) { probs = append(probs, nugetProblem{p, what}) }
	want, err := os.ReadFile(ziphash)
	if err != nil {
		return nil, 0, err
	}
	zipPath := strings.TrimSuffix(ziphash, ".ziphash") + ".zip"
	zr, err := zip.OpenReader(zipPath)
	if os.IsNotExist(err) {
		return nil, 0, nil // the go command deletes a zip it no longer needs; the .ziphash stays
	}
	if err != nil {
		add(zipPath, "not a readable zip: "+err.Error())
		return probs, 0, nil
	}
	defer zr.Close()
	sums, names, bad := hashZip(zr)
	if bad != "" {
		add(zipPath, bad)
		return probs, 0, nil
	}
	if got := hash1(names, sums); got != strings.TrimSpace(string(want)) {
		add(zipPath, "does not match its .ziphash (go.sum's h1: hash): the zip was changed after it was downloaded")
	}
	n := len(names)
	dir := filepath.Join(root, filepath.FromSlash(modEsc)+"@"+verEsc)
	if !isDir(dir) {
		return probs, n, nil
	}
	prefix := unescapeModule(modEsc) + "@" + unescapeModule(verEsc) + "/"
	walked, err := checkExtracted(dir, prefix, sums, names, add)
	n += walked
	if err != nil {
		return probs, n, err
	}
	sortProblems(probs)
	return probs, n, nil
}

// hashZip hashes every entry of a module's zip (sha256, by name) and
// lists the names in zip order; bad says why an entry could not be read.
func hashZip(zr *zip.ReadCloser) (sums map[string][]byte, names []string, bad string) {
	sums = make(map[string][]byte, len(zr.File))
	names = make([]string, 0, len(zr.File))
	for _, f := range zr.File {
		r, err := f.Open()
		if err != nil {
			return nil, nil, "entry " + f.Name + ": " + err.Error()
		}
		h := sha256.New()
		_, err = copyBuf(h, r)
		r.Close()
		if err != nil {
			return nil, nil, "entry " + f.Name + ": " + err.Error()
		}
		sums[f.Name] = h.Sum(nil)
		names = append(names, f.Name)
	}
	return sums, names, ""
}

// checkExtracted compares the module's extracted tree dir with its zip's
// entries (named prefix + path): a file added, changed, not regular, or
// removed is a problem. It returns how many files it walked.
func checkExtracted(dir, prefix string, sums map[string][]byte, names []string, add func(p, what string)) (int, error) {
	n := 0
	seen := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		name := prefix + filepath.ToSlash(rel)
		n++
		sum, ok := sums[name]
		switch {
		case !d.Type().IsRegular():
			add(p, "not a regular file (a link or a special file): the module's zip holds none")
		case !ok:
			add(p, "added: the module's zip holds no such file")
		default:
			seen[name] = true
			h := sha256.New()
			if _, err := hashFile(p, h); err != nil {
				return err
			}
			if string(h.Sum(nil)) != string(sum) {
				add(p, "differs from the module's zip: changed after it was extracted")
			}
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	for _, name := range names {
		if !seen[name] && strings.HasPrefix(name, prefix) {
			add(filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(name, prefix))), "removed: the module's zip holds it, the extracted tree does not")
		}
	}
	return n, nil
}

// hash1 is dirhash.Hash1: the SHA-256 of "SHA256(file)  NAME\n" for every
// file, names sorted, base64 behind "h1:".
func hash1(names []string, sums map[string][]byte) string {
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	h := sha256.New()
	for _, n := range sorted {
		fmt.Fprintf(h, "%x  %s\n", sums[n], n)
	}
	return "h1:" + base64.StdEncoding.EncodeToString(h.Sum(nil))
}
