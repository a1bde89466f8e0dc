package cache

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sourcegraph/conc/stream"
)

// The NuGet global packages folder (~/.nuget/packages) holds each package
// at ID/VERSION/ (lower case): the .nupkg, its SHA-512 (.nupkg.sha512,
// base64), .nupkg.metadata (JSON: contentHash, source), the .nuspec and
// every file of the package extracted. Builds read the extracted files,
// not the .nupkg: a poisoned DLL or a planted build/ID.targets (MSBuild
// imports it into every project that references the package) is the
// attack. Each package's .nupkg is re-hashed against its .nupkg.sha512
// and metadata, and every extracted file compared with the package's own
// entry.

func detectNuGet(dir string) (string, bool) {
	ids, err := os.ReadDir(dir)
	if err != nil {
		return "", false
	}
	checked := 0
	for _, id := range ids {
		if !id.IsDir() || checked >= 20 {
			continue
		}
		checked++
		vers, err := os.ReadDir(filepath.Join(dir, id.Name()))
		if err != nil {
			continue
		}
		for _, v := range vers {
			if _, err := os.Stat(filepath.Join(dir, id.Name(), v.Name(), id.Name()+"."+v.Name()+".nupkg.metadata")); err == nil {
				return dir, true
			}
		}
	}
	return "", false
}

func newNuGetStore(root, target string) store {
	return store{kind: "nuget", root: root, target: target, verify: func(ctx context.Context, sink Sink, opt Options) (StoreSummary, error) {
		return verifyNuGet(ctx, root, target, sink, opt)
	}}
}

const nugetFix = "delete the package's folder (dotnet nuget locals global-packages --clear, or rm -r ID/VERSION) and restore it in the trusted step; then seal the cache"

// nugetProblem is one thing wrong in a package folder, relative to root.
type nugetProblem struct{ rel, what string }

func verifyNuGet(ctx context.Context, root, target string, sink Sink, opt Options) (StoreSummary, error) {
	ss := StoreSummary{Kind: "nuget", Root: root}
	s := stream.New().WithMaxGoroutines(opt.workers())
	ids, err := os.ReadDir(root)
	if err != nil {
		return ss, err
	}
	for _, id := range ids {
		if !id.IsDir() {
			continue
		}
		vers, err := os.ReadDir(filepath.Join(root, id.Name()))
		if err != nil {
			ss.Bad++
			sink(couldNot(CheckIntegrity, target, filepath.Join(root, id.Name()), unwrap(err)))
			continue
		}
		for _, v := range vers {
			if err := ctx.Err(); err != nil {
				s.Wait()
				return ss, err
			}
			if !v.IsDir() {
				continue
			}
			idName, ver := id.Name(), v.Name()
			s.Go(func() stream.Callback {
				problems, files, err := nugetPackage(filepath.Join(root, idName, ver), idName, ver)
				return func() {
					ss.Entries += files
					if err != nil {
						ss.Bad++
						sink(couldNot(CheckIntegrity, target, filepath.Join(root, idName, ver), unwrap(err)))
					}
					for _, p := range problems {
						ss.Bad++
						sink(failure(CheckIntegrity, target, filepath.Join(root, idName, ver, filepath.FromSlash(p.rel)),
							"the package as restored: the .nupkg matching its .nupkg.sha512 and metadata, every extracted file the package's own", p.what, "package "+idName+" "+ver, nugetFix))
					}
				}
			})
		}
	}
	s.Wait()
	if ss.Bad == 0 {
		sink(passFinding(CheckIntegrity, target, root, "every package matches its .nupkg",
			fmt.Sprintf("all %d files of the packages match their keys", ss.Entries),
			"NuGet global packages folder: each .nupkg re-hashed (SHA-512) against .nupkg.sha512 and .nupkg.metadata's contentHash, every extracted file compared with the .nupkg's entry"))
	}
	return ss, nil
}

// nugetExtracted says whether NuGet extracts a package entry into the folder.
func nugetExtracted(name string) bool {
	lower := strings.ToLower(name)
	switch {
	case strings.HasPrefix(lower, "_rels/"), strings.HasPrefix(lower, "package/"),
		lower == "[content_types].xml", strings.HasSuffix(lower, ".psmdcp"), lower == ".signature.p7s":
		return false
	case !strings.Contains(lower, "/") && strings.HasSuffix(lower, ".nuspec"):
		return false // extracted apart, under the lower-case id
	}
	return true
}

// nugetPackage checks one ID/VERSION folder.
func nugetPackage(dir, id, ver string) ([]nugetProblem, int, error) {
	var probs []nugetProblem
	add := func(rel, what string) { probs = append(probs, nugetProblem{rel, what}) }
	base := id + "." + ver
	nupkg := filepath.Join(dir, base+".nupkg")
	contentHash := nugetContentHash(dir, base, add)
	h := sha512.New()
	if _, err := hashFile(nupkg, h); err != nil {
		if os.IsNotExist(err) {
			add(base+".nupkg", "removed: the extracted files cannot be checked against it")
			return probs, 0, nil
		}
		return probs, 0, err
	}
	got := base64.StdEncoding.EncodeToString(h.Sum(nil))
	files := 1
	if b, err := os.ReadFile(nupkg + ".sha512"); err != nil {
		add(base+".nupkg.sha512", "missing")
	} else if strings.TrimSpace(string(b)) != got {
		add(base+".nupkg", "its SHA-512 does not match .nupkg.sha512: the package was changed after it was restored")
	}
	zr, err := zip.OpenReader(nupkg)
	if err != nil {
		add(base+".nupkg", "not a readable package: "+err.Error())
		return probs, files, nil
	}
	defer zr.Close()
	pkg := readNupkg(zr)
	if contentHash != "" && !pkg.signed && contentHash != got {
		add(base+".nupkg.metadata", "its contentHash does not match the .nupkg's SHA-512")
	}
	walked, err := pkg.checkFolder(dir, base, add)
	files += walked
	if err != nil {
		return probs, files, err
	}
	sortProblems(probs)
	return probs, files, nil
}

// nugetContentHash is the contentHash of the package's .nupkg.metadata
// ("" when it is missing or not NuGet's, which is a problem).
func nugetContentHash(dir, base string, add func(rel, what string)) string {
	meta, err := os.ReadFile(filepath.Join(dir, base+".nupkg.metadata"))
	if err != nil {
		add(base+".nupkg.metadata", "missing: NuGet does not count the package as restored, but the folder is still on disk")
	}
	var md struct {
		ContentHash string `json:"contentHash"`
	}
	if meta != nil {
		if err := json.Unmarshal(meta, &md); err != nil || md.ContentHash == "" {
			add(base+".nupkg.metadata", "not NuGet's metadata (no contentHash)")
		}
	}
	return md.ContentHash
}

// nupkg is what a package holds: the entries NuGet extracts (by their
// unescaped name), its .nuspec, and whether it is signed.
type nupkg struct {
	entries map[string]*zip.File
	nuspec  *zip.File
	signed  bool
}

func readNupkg(zr *zip.ReadCloser) nupkg {
	pkg := nupkg{entries: map[string]*zip.File{}}
	for _, f := range zr.File {
		name, err := url.PathUnescape(f.Name)
		if err != nil {
			name = f.Name
		}
		name = strings.TrimLeft(name, "/")
		if strings.EqualFold(name, ".signature.p7s") {
			pkg.signed = true
		}
		if !strings.Contains(name, "/") && strings.HasSuffix(strings.ToLower(name), ".nuspec") {
			pkg.nuspec = f
		}
		if nugetExtracted(name) && !strings.HasSuffix(name, "/") {
			pkg.entries[name] = f
		}
	}
	return pkg
}

// checkFolder compares the package's folder dir with what the package
// holds: a file added, changed, not regular, or removed is a problem. It
// returns how many files it walked.
func (pkg nupkg) checkFolder(dir, base string, add func(rel, what string)) (int, error) {
	files := 0
	seen := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		switch rel {
		case base + ".nupkg", base + ".nupkg.sha512", base + ".nupkg.metadata":
			return nil
		}
		files++
		if !d.Type().IsRegular() {
			add(rel, "not a regular file (a link or a special file): the package holds none")
			return nil
		}
		var zf *zip.File
		if !strings.Contains(rel, "/") && strings.HasSuffix(rel, ".nuspec") {
			zf = pkg.nuspec
		} else {
			zf = pkg.entries[rel]
			seen[rel] = true
		}
		if zf == nil {
			add(rel, "added: the package holds no such file")
			return nil
		}
		same, zerr, err := sameContent(p, zf)
		switch {
		case err != nil:
			return err
		case zerr != nil:
			add(rel, "the package's own entry cannot be read ("+zerr.Error()+"): the .nupkg is damaged")
		case !same:
			add(rel, "differs from the package's own file: changed after it was extracted")
		}
		return nil
	})
	if err != nil {
		return files, err
	}
	for name := range pkg.entries {
		if !seen[name] {
			add(name, "removed: the package holds it, the folder does not")
		}
	}
	return files, nil
}

// sameContent compares a file with a zip entry by their SHA-256; zerr is
// the zip entry's own error (a damaged package), err the file's.
func sameContent(p string, zf *zip.File) (same bool, zerr, err error) {
	fh := sha256.New()
	n, err := hashFile(p, fh)
	if err != nil {
		return false, nil, err
	}
	if uint64(n) != zf.UncompressedSize64 {
		return false, nil, nil
	}
	r, err := zf.Open()
	if err != nil {
		return false, err, nil
	}
	defer r.Close()
	zh := sha256.New()
	if _, err := copyBuf(zh, r); err != nil {
		return false, err, nil
	}
	return string(fh.Sum(nil)) == string(zh.Sum(nil)), nil, nil
}

func sortProblems(ps []nugetProblem) {
	slices.SortFunc(ps, func(a, b nugetProblem) int {
		switch {
		case pathLess(a.rel, b.rel):
			return -1
		case pathLess(b.rel, a.rel):
			return 1
		}
		return 0
	})
}
