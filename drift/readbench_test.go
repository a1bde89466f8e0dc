package drift

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandprobe/sandprobe/internal/manifest"
)

// BenchmarkReadManifests (make bench) reads generated manifest streams
// into objects, on one core, without the rules: every document as drift -f
// reads it (a plain Pod document as pass 2 decodes it, with its line tree
// when the fast reader took it; any other document as pass 1 does). It is
// run twice by hack/bench.sh, once as built (the block-YAML reader first)
// and once with -tags sandprobe_referenceyaml (sigs.k8s.io/yaml only), on
// two independently shaped inputs: genpods (yaml.Marshal's block style)
// and handpods (comments, flow collections, block scalars, Lists,
// Deployments with long env lists). SANDPROBE_BENCH_READ_PODS sets the
// sizes ("10000,100000"; 10000 by default).
func BenchmarkReadManifests(b *testing.B) {
	sizes := []int{10000}
	if v := os.Getenv("SANDPROBE_BENCH_READ_PODS"); v != "" {
		sizes = nil
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.Atoi(s)
			if err != nil {
				b.Fatalf("SANDPROBE_BENCH_READ_PODS: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	reader := "fast"
	if !fastYAML {
		reader = "reference"
	}
	tmp := b.TempDir()
	for _, gen := range []string{"genpods", "handpods"} {
		tool := filepath.Join(tmp, gen)
		if out, err := exec.Command("go", "build", "-o", tool, "./testdata/"+gen).CombinedOutput(); err != nil {
			b.Fatalf("build %s: %v\n%s", gen, err, out)
		}
		for _, n := range sizes {
			file := filepath.Join(tmp, fmt.Sprintf("%s-%d.yaml", gen, n))
			if out, err := exec.Command(tool, "-n", strconv.Itoa(n), "-o", file, "-policy", filepath.Join("..", "fixtures", "policy.yaml")).CombinedOutput(); err != nil {
				b.Fatalf("%s: %v\n%s", gen, err, out)
			}
			fi, err := os.Stat(file)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("input=%s/pods=%d/reader=%s", gen, n, reader), func(b *testing.B) {
				b.SetBytes(fi.Size())
				pods := 0
				for i := 0; i < b.N; i++ {
					pods = readAll(b, file)
				}
				if pods != n {
					b.Fatalf("read %d pods, want %d", pods, n)
				}
				b.ReportMetric(float64(b.N*pods)/b.Elapsed().Seconds(), "pods/s")
			})
			os.Remove(file)
		}
	}
}

// readAll reads every document of file into objects and counts the pods.
func readAll(b *testing.B, file string) int {
	src := scanSource{name: file, open: func() (io.ReadCloser, error) { return os.Open(file) }}
	m := &Manifests{Skipped: map[string]int{}, origins: origins{}}
	pods := 0
	m.onPod = func(*corev1.Pod, *origin) { pods++ }
	_, err := eachDocument(src, func(doc int, d *manifest.Document) bool {
		if !d.JSON && looksLikePod(d.Data) {
			got, err := decodePods(d, file, "", true)
			if err != nil {
				b.Fatalf("document %d: %v", doc, err)
			}
			pods += len(got)
			return true
		}
		if err := m.addDocument(d, file); err != nil {
			b.Fatalf("document %d: %v", doc, err)
		}
		return true
	})
	if err != nil {
		b.Fatal(err)
	}
	return pods
}
