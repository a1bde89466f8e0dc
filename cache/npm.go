package cache

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sourcegraph/conc/stream"
)

// npm's cache (cacache, ~/.npm/_cacache) is content-addressed:
// content-v2/ALGO/AB/CD/REST holds the bytes whose ALGO digest is ABCDREST
// (hex), and each index-v5 bucket, named by the SHA-256 of the keys it
// holds, is a list of lines "SHA1(JSON)\tJSON", each JSON naming a key (a
// request URL), the content's integrity ("sha512-BASE64") and its size.
// Each file is re-hashed against its own address, and each index line
// against its own SHA-1, its bucket's name and the content it names.

func detectNpm(dir string) (string, bool) {
	if filepath.Base(dir) == "_cacache" && isDir(filepath.Join(dir, "index-v5")) {
		return dir, true
	}
	if c := filepath.Join(dir, "_cacache"); isDir(filepath.Join(c, "index-v5")) {
		return c, true
	}
	return "", false
}

func newNpmStore(root, target string) store {
	return store{kind: "npm", root: root, target: target, verify: func(ctx context.Context, sink Sink, opt Options) (StoreSummary, error) {
		return verifyNpm(ctx, root, target, sink, opt)
	}}
}

func newHash(algo string) hash.Hash {
	switch algo {
	case "sha512":
		return sha512.New()
	case "sha384":
		return sha512.New384()
	case "sha256":
		return sha256.New()
	case "sha1":
		return sha1.New()
	}
	return nil
}

const npmFix = "remove the cache entry (npm cache clean, or delete the file) and refill the cache from the registry in the trusted step; then seal it"

func verifyNpm(ctx context.Context, root, target string, sink Sink, opt Options) (StoreSummary, error) {
	ss := StoreSummary{Kind: "npm", Root: root}
	bad := func(f func()) { ss.Bad++; f() }
	sub := func(rel string) string { return filepath.Join(root, filepath.FromSlash(rel)) }
	s := stream.New().WithMaxGoroutines(opt.workers())
	for _, part := range []string{"content-v2", "index-v5"} {
		base := filepath.Join(root, part)
		if !isDir(base) {
			continue
		}
		err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			rel, _ := filepath.Rel(root, p)
			rel = filepath.ToSlash(rel)
			if err != nil {
				s.Go(func() stream.Callback {
					return func() { bad(func() { sink(couldNot(CheckIntegrity, target, sub(rel), unwrap(err))) }) }
				})
				return fs.SkipDir
			}
			if !d.Type().IsRegular() {
				if d.Type()&fs.ModeSymlink != 0 {
					s.Go(func() stream.Callback {
						return func() {
							bad(func() {
								sink(failure(CheckIntegrity, target, sub(rel), "only content-addressed files", "a symlink in the cache: npm would follow it", "", npmFix))
							})
						}
					})
				}
				return nil
			}
			if part == "content-v2" {
				s.Go(func() stream.Callback {
					what, err := npmContent(p, rel)
					return func() {
						ss.Entries++
						switch {
						case err != nil:
							bad(func() { sink(couldNot(CheckIntegrity, target, sub(rel), unwrap(err))) })
						case what != "":
							bad(func() {
								sink(failure(CheckIntegrity, target, sub(rel), "content that hashes to its address", what, "", npmFix))
							})
						}
					}
				})
				return nil
			}
			s.Go(func() stream.Callback {
				problems, n, err := npmBucket(root, p, rel)
				return func() {
					ss.Entries += n
					if err != nil {
						bad(func() { sink(couldNot(CheckIntegrity, target, sub(rel), unwrap(err))) })
					}
					for _, what := range problems {
						bad(func() {
							sink(failure(CheckIntegrity, target, sub(rel), "index entries that hash to themselves, filed under their key, naming content in the cache", what, "", npmFix))
						})
					}
				}
			})
			return nil
		})
		if err != nil {
			s.Wait()
			return ss, err
		}
	}
	s.Wait()
	if ss.Bad == 0 {
		sink(passFinding(CheckIntegrity, target, root, "every entry matches its key",
			fmt.Sprintf("all %d entries re-hashed against their keys", ss.Entries),
			"npm cacache: content-v2 files against their addresses, index-v5 lines against their SHA-1, their bucket (SHA-256 of the key) and the content they name"))
	}
	return ss, nil
}

// npmContent re-hashes one content file against the address its path spells.
func npmContent(p, rel string) (string, error) {
	parts := strings.Split(rel, "/") // content-v2/ALGO/AB/CD/REST
	if len(parts) != 5 {
		return "not where cacache keeps content (content-v2/ALGO/AB/CD/REST)", nil
	}
	algo, want := parts[1], parts[2]+parts[3]+parts[4]
	h := newHash(algo)
	if h == nil {
		return fmt.Sprintf("unknown digest algorithm %q", algo), nil
	}
	if _, err := hashFile(p, h); err != nil {
		return "", err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Sprintf("content does not match its address (%s): the file was changed after npm stored it", algo), nil
	}
	return "", nil
}

// npmBucket checks every line of one index bucket.
func npmBucket(root, p, rel string) (problems []string, entries int, err error) {
	raw, err := os.ReadFile(p)
	if err != nil {
		return nil, 0, err
	}
	parts := strings.Split(rel, "/") // index-v5/AB/CD/REST
	bucket := ""
	if len(parts) == 4 {
		bucket = parts[1] + parts[2] + parts[3]
	}
	for i, line := range bytes.Split(raw, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		entries++
		n := i + 1
		sum, js, ok := bytes.Cut(line, []byte("\t"))
		if !ok {
			problems = append(problems, fmt.Sprintf("line %d: not an index entry (no SHA-1 before it)", n))
			continue
		}
		h := sha1.Sum(js)
		if hex.EncodeToString(h[:]) != string(sum) {
			problems = append(problems, fmt.Sprintf("line %d: the entry does not match its own SHA-1: it was edited after npm wrote it", n))
			continue
		}
		var e struct {
			Key       string  `json:"key"`
			Integrity *string `json:"integrity"`
			Size      *int64  `json:"size"`
		}
		if err := json.Unmarshal(js, &e); err != nil {
			problems = append(problems, fmt.Sprintf("line %d: not JSON", n))
			continue
		}
		k := sha256.Sum256([]byte(e.Key))
		if hex.EncodeToString(k[:]) != bucket {
			problems = append(problems, fmt.Sprintf("line %d: filed in another key's bucket", n))
			continue
		}
		if e.Integrity == nil { // a deletion
			continue
		}
		if what := npmContentFor(root, *e.Integrity, e.Size); what != "" {
			problems = append(problems, fmt.Sprintf("line %d: %s", n, what))
		}
	}
	return problems, entries, nil
}

// npmContentFor says whether the content an integrity string names is in
// the cache, with the size the index says.
func npmContentFor(root, integrity string, size *int64) string {
	var tried []string
	for _, sri := range strings.Fields(integrity) {
		algo, b64, ok := strings.Cut(sri, "-")
		if !ok {
			continue
		}
		if i := strings.IndexByte(b64, '?'); i >= 0 {
			b64 = b64[:i]
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || newHash(algo) == nil {
			continue
		}
		hx := hex.EncodeToString(raw)
		if len(hx) < 5 {
			continue
		}
		p := filepath.Join(root, "content-v2", algo, hx[:2], hx[2:4], hx[4:])
		tried = append(tried, algo)
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if size != nil && fi.Size() != *size {
			return fmt.Sprintf("names %s content of %d bytes, the file holds %d", algo, *size, fi.Size())
		}
		return ""
	}
	if len(tried) == 0 {
		return "its integrity names no digest this check knows"
	}
	return "names content that is not in the cache (" + strings.Join(tried, ", ") + "): it was removed"
}
