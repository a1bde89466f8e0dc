package cache

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/csv"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sourcegraph/conc/stream"
)

// pip's wheel cache (~/.cache/pip/wheels) keeps the wheels pip built,
// under directories named by a hash of the link they were built from, not
// of their content: there is no key to re-hash a wheel against. What a
// wheel does carry is its RECORD (NAME.dist-info/RECORD), the SHA-256 of
// every file in it, which pip checks on install. Each wheel's members are
// re-hashed against its RECORD, and a member RECORD does not list is
// named. A careful attacker rewrites RECORD too; only a seal sees that.

func detectPip(dir string) (string, bool) {
	if filepath.Base(dir) == "wheels" && isDir(dir) && isDir(filepath.Dir(dir)) {
		if isDir(filepath.Join(filepath.Dir(dir), "http-v2")) || isDir(filepath.Join(filepath.Dir(dir), "http")) {
			return dir, true
		}
	}
	if w := filepath.Join(dir, "wheels"); isDir(w) {
		return w, true
	}
	return "", false
}

func newPipStore(root, target string) store {
	return store{kind: "pip", root: root, target: target, verify: func(ctx context.Context, sink Sink, opt Options) (StoreSummary, error) {
		return verifyPip(ctx, root, target, sink, opt)
	}}
}

const pipFix = "delete the wheel (pip cache remove NAME) and let the trusted step rebuild it; then seal the cache"

func verifyPip(ctx context.Context, root, target string, sink Sink, opt Options) (StoreSummary, error) {
	ss := StoreSummary{Kind: "pip", Root: root}
	s := stream.New().WithMaxGoroutines(opt.workers())
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil {
			s.Go(func() stream.Callback {
				return func() { ss.Bad++; sink(couldNot(CheckIntegrity, target, p, unwrap(err))) }
			})
			return fs.SkipDir
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(p, ".whl") {
			return nil
		}
		s.Go(func() stream.Callback {
			problems, n, err := pipWheel(p)
			return func() {
				ss.Entries += n
				if err != nil {
					ss.Bad++
					sink(couldNot(CheckIntegrity, target, p, unwrap(err)))
				}
				for _, what := range problems {
					ss.Bad++
					sink(failure(CheckIntegrity, target, p, "every member of the wheel as its RECORD lists it", what, "", pipFix))
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
		sink(passFinding(CheckIntegrity, target, root, "every wheel matches its RECORD",
			fmt.Sprintf("all %d wheel members re-hashed against their RECORD", ss.Entries),
			"pip wheel cache: each wheel's members (SHA-256) against NAME.dist-info/RECORD; the cache is keyed by link, not content, so a wheel rewritten with its RECORD is seen only by a seal"))
	}
	return ss, nil
}

// pipWheel re-hashes one wheel's members against its RECORD.
func pipWheel(p string) ([]string, int, error) {
	zr, err := zip.OpenReader(p)
	if err != nil {
		return []string{"not a readable wheel: " + err.Error()}, 0, nil
	}
	defer zr.Close()
	record, want, bad, err := wheelRecord(zr)
	if bad != nil || err != nil {
		return bad, 0, err
	}
	var problems []string
	n := 0
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		n++
		rec, listed := want[f.Name]
		delete(want, f.Name)
		base := f.Name[strings.LastIndex(f.Name, "/")+1:]
		if f == record || ((base == "RECORD.jws" || base == "RECORD.p7s") && strings.Contains(f.Name, ".dist-info/")) {
			continue
		}
		if !listed {
			problems = append(problems, fmt.Sprintf("%s: not in RECORD (added)", f.Name))
			continue
		}
		algo, digest, ok := strings.Cut(rec, "=")
		if !ok || algo != "sha256" {
			problems = append(problems, fmt.Sprintf("%s: RECORD lists no sha256 for it", f.Name))
			continue
		}
		r, err := f.Open()
		if err != nil {
			return problems, n, fmt.Errorf("%s: %w", f.Name, err)
		}
		h := sha256.New()
		_, err = copyBuf(h, r)
		r.Close()
		if err != nil {
			return problems, n, fmt.Errorf("%s: %w", f.Name, err)
		}
		if base64.RawURLEncoding.EncodeToString(h.Sum(nil)) != strings.TrimRight(digest, "=") {
			problems = append(problems, fmt.Sprintf("%s: does not match its RECORD hash (changed)", f.Name))
		}
	}
	missing := make([]string, 0, len(want))
	for name := range want {
		if name != record.Name {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	for _, name := range missing {
		problems = append(problems, fmt.Sprintf("%s: in RECORD, not in the wheel (removed)", name))
	}
	return problems, n, nil
}

// wheelRecord finds the wheel's .dist-info/RECORD and reads what it lists:
// each file's recorded hash, by name. bad is the problem when there is no
// RECORD or it is no CSV.
func wheelRecord(zr *zip.ReadCloser) (record *zip.File, want map[string]string, bad []string, err error) {
	for _, f := range zr.File {
		dir, name, ok := strings.Cut(f.Name, "/")
		if ok && name == "RECORD" && strings.HasSuffix(dir, ".dist-info") {
			record = f
		}
	}
	if record == nil {
		return nil, nil, []string{"no .dist-info/RECORD: pip refuses to install it, or installs what nobody listed"}, nil
	}
	rr, err := record.Open()
	if err != nil {
		return nil, nil, nil, err
	}
	rows, err := csv.NewReader(io.LimitReader(rr, 16<<20)).ReadAll()
	rr.Close()
	if err != nil {
		return nil, nil, []string{"RECORD is not CSV: " + err.Error()}, nil
	}
	want = map[string]string{}
	for _, r := range rows {
		if len(r) >= 2 {
			want[r[0]] = r[1]
		}
	}
	return record, want, nil, nil
}
