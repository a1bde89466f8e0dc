package cache

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/sandprobe/sandprobe/internal/testenv"
)

// TestBenchCacheVerify (make bench; SANDPROBE_BENCH=1): `sandprobe cache
// verify` over a generated npm cache of 100,000 entries (a content file
// of 1–9 KB and an index line each: 200,000 files), content-addressed and
// against its seal, against reading every file once with cat in the same
// run (page cache warm for both, best of two rounds each). Peak RSS (the
// child's getrusage) at 10,000 and at 100,000 entries shows memory flat.
// Goals: each mode ≤ 2.5 × cat; peak RSS ≤ 64 MB and at 100,000 entries
// ≤ 1.5 × the 10,000-entry run. SANDPROBE_BENCH_CACHE_ENTRIES overrides
// the size ("100000"); the small run is a tenth of it.
func TestBenchCacheVerify(t *testing.T) {
	if os.Getenv("SANDPROBE_BENCH") != "1" {
		t.Skip("set SANDPROBE_BENCH=1 (make bench)")
	}
	n := 100000
	if v := os.Getenv("SANDPROBE_BENCH_CACHE_ENTRIES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 10 {
			t.Fatalf("SANDPROBE_BENCH_CACHE_ENTRIES: %q", v)
		}
	}
	bin := testenv.Binary(t)
	tmp := t.TempDir()
	run := func(name string, args ...string) cacheMeasure { return bestOfTwo(t, name, args...) }
	type result struct {
		entries, files  int
		bytes           int64
		cat, ca, sealed cacheMeasure
	}
	measureSize := func(entries int) result {
		dir := filepath.Join(tmp, fmt.Sprintf("npm-%d", entries))
		start := time.Now()
		files, bytes := genNpmCache(t, filepath.Join(dir, "_cacache"), entries)
		t.Logf("generated %d entries (%d files, %.0f MB) in %s", entries, files, float64(bytes)/1e6, time.Since(start).Round(time.Second))
		manifest := filepath.Join(tmp, fmt.Sprintf("seal-%d.txt", entries))
		if out, err := exec.Command(bin, "cache", "seal", dir, "--manifest", manifest).CombinedOutput(); err != nil {
			t.Fatalf("seal: %v\n%s", err, out)
		}
		catCmd := []string{"sh", "-c", "find \"$0\" -type f -print0 | xargs -0 cat > /dev/null", dir}
		run("warm", catCmd...)
		r := result{entries: entries, files: files, bytes: bytes}
		r.cat = run("cat", catCmd...)
		r.ca = run("verify", bin, "cache", "verify", dir, "-o", "json")
		r.sealed = run("verify --manifest", bin, "cache", "verify", dir, "--manifest", manifest, "-o", "json")
		os.RemoveAll(dir)
		return r
	}
	small := measureSize(max(n/10, 10))
	big := measureSize(n)
	fmt.Printf("cores: %d\n", runtime.NumCPU())
	for _, r := range []result{small, big} {
		fmt.Printf("%7d entries (%d files, %.0f MB): cat %.2fs | content-addressed %.2fs = %.2fx cat, peak RSS %.1f MB | with --manifest (seal + content-addressed) %.2fs = %.2fx cat, peak RSS %.1f MB\n",
			r.entries, r.files, float64(r.bytes)/1e6, r.cat.seconds, r.ca.seconds, r.ca.seconds/r.cat.seconds, r.ca.mb, r.sealed.seconds, r.sealed.seconds/r.cat.seconds, r.sealed.mb)
	}
	verdict := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "MISSED"
	}
	ratio := max(big.ca.seconds, big.sealed.seconds) / big.cat.seconds
	peak := max(big.ca.mb, big.sealed.mb)
	flat := peak / max(small.ca.mb, small.sealed.mb)
	fmt.Printf("  worst time vs cat at %d entries: %.2fx — goal ≤ 2.5x: %s\n", n, ratio, verdict(ratio <= 2.5))
	fmt.Printf("  peak RSS %.1f MB — goal ≤ 64 MB: %s; %d vs %d entries: %.2fx — goal ≤ 1.5x (flat): %s\n", peak, verdict(peak <= 64), n, small.entries, flat, verdict(flat <= 1.5))
	if peak > 64 || flat > 1.5 {
		t.Errorf("cache verify's memory is not flat: %.1f MB at %d entries, %.2fx the %d-entry run", peak, n, flat, small.entries)
	}
}

// cacheMeasure is a command's best wall time and its peak RSS.
type cacheMeasure struct {
	seconds float64
	mb      float64
}

// bestOfTwo runs the command twice, its output discarded.
func bestOfTwo(t *testing.T, name string, args ...string) cacheMeasure {
	t.Helper()
	best := cacheMeasure{seconds: -1}
	for round := 0; round < 2; round++ {
		cmd := exec.Command(args[0], args[1:]...)
		devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		cmd.Stdout = devnull
		cmd.Stderr = os.Stderr
		start := time.Now()
		err := cmd.Run()
		took := time.Since(start).Seconds()
		devnull.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		if best.seconds < 0 || took < best.seconds {
			best.seconds = took
		}
		best.mb = max(best.mb, float64(ru.Maxrss)/1024)
	}
	return best
}

// genNpmCache writes a cacache of n entries: each a content file of 1–9 KB
// at its sha512 address and an index line (npm's format) in its key's
// bucket. It returns the files and bytes written.
func genNpmCache(t *testing.T, root string, n int) (int, int64) {
	t.Helper()
	p := pool.New().WithMaxGoroutines(runtime.GOMAXPROCS(0)).WithErrors()
	const per = 500
	sizes := make([]int64, (n+per-1)/per)
	for b := 0; b*per < n; b++ {
		p.Go(func() error {
			rng := rand.New(rand.NewPCG(uint64(b), 42))
			buf := make([]byte, 9<<10)
			for i := b * per; i < min(n, (b+1)*per); i++ {
				size := 1<<10 + rng.IntN(8<<10)
				for j := 0; j < size; j += 8 {
					v := rng.Uint64()
					for k := 0; k < 8 && j+k < size; k++ {
						buf[j+k] = byte(v >> (8 * k))
					}
				}
				content := buf[:size]
				sum := sha512.Sum512(content)
				hx := hex.EncodeToString(sum[:])
				cp := filepath.Join(root, "content-v2", "sha512", hx[:2], hx[2:4], hx[4:])
				if err := writeFile(cp, content); err != nil {
					return err
				}
				key := fmt.Sprintf("make-fetch-happen:request-cache:https://registry.npmjs.org/pkg-%d/-/pkg-%d-1.0.0.tgz", i, i)
				js, _ := json.Marshal(map[string]any{"key": key, "integrity": "sha512-" + base64.StdEncoding.EncodeToString(sum[:]), "time": 1700000000000 + i, "size": size, "metadata": map[string]any{"url": key[len("make-fetch-happen:request-cache:"):]}})
				h1 := sha1.Sum(js)
				kh := sha256.Sum256([]byte(key))
				khx := hex.EncodeToString(kh[:])
				line := "\n" + hex.EncodeToString(h1[:]) + "\t" + string(js)
				if err := writeFile(filepath.Join(root, "index-v5", khx[:2], khx[2:4], khx[4:]), []byte(line)); err != nil {
					return err
				}
				sizes[b] += int64(size + len(line))
			}
			return nil
		})
	}
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, s := range sizes {
		total += s
	}
	return 2 * n, total
}

func writeFile(p string, b []byte) error {
	if err := os.WriteFile(p, b, 0o444); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o444)
}
