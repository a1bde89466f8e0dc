package drift_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestBenchManifestReader (make bench; SANDPROBE_BENCH=1) asks whether the
// block-YAML reader earns its place: `sandprobe drift -f -o json` built as
// it ships against the same command built with -tags
// sandprobe_referenceyaml (every document read by sigs.k8s.io/yaml, every
// finding located by yaml.v3), and kube-score's `score -o ci`
// (SANDPROBE_KUBE_SCORE, when set), on two independently shaped inputs —
// genpods (yaml.Marshal's block style) and handpods (comments, flow
// collections, block scalars, Lists, long env lists) — at 10,000 and
// 100,000 pods (SANDPROBE_BENCH_READER_PODS overrides: "10000"). Each
// command's best of two rounds taken in turn, each after a sync; both
// builds must write the same report. kube-score is left out at 100,000
// pods unless SANDPROBE_BENCH_READER_PEER_ALL=1 (3.4 GB and ~45 s a run).
func TestBenchManifestReader(t *testing.T) {
	if os.Getenv("SANDPROBE_BENCH") != "1" {
		t.Skip("set SANDPROBE_BENCH=1 (make bench)")
	}
	sizes := benchSizes(t, "SANDPROBE_BENCH_READER_PODS", 10000, 100000)
	tmp := t.TempDir()
	build := func(out string, args ...string) string {
		path := filepath.Join(tmp, out)
		cmd := exec.Command("go", append([]string{"build", "-trimpath", "-o", path}, args...)...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", out, err, b)
		}
		return path
	}
	fast := build("sandprobe-fast", "../cmd/sandprobe")
	ref := build("sandprobe-reference", "-tags", "sandprobe_referenceyaml", "../cmd/sandprobe")
	maxrss := build("maxrss", "./testdata/maxrss")
	policyPath := filepath.Join(repoRoot(), "fixtures", "policy.yaml")
	kubeScore := os.Getenv("SANDPROBE_KUBE_SCORE")

	fmt.Println("manifest reader: drift -f -o json, the block-YAML reader (fast) vs sigs.k8s.io/yaml alone (reference), and kube-score score -o ci; wall / CPU / peak RSS, best of 2")
	for _, gen := range []string{"genpods", "handpods"} {
		tool := build(gen, "./testdata/"+gen)
		for _, n := range sizes {
			file := filepath.Join(tmp, fmt.Sprintf("%s-%d.yaml", gen, n))
			if b, err := exec.Command(tool, "-n", strconv.Itoa(n), "-o", file, "-policy", policyPath).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", gen, err, b)
			}
			fi, _ := os.Stat(file)
			cmds := [][]string{
				{fast, "drift", "--policy", policyPath, "-f", file, "-o", "json"},
				{ref, "drift", "--policy", policyPath, "-f", file, "-o", "json"},
			}
			if kubeScore != "" && (n <= 10000 || os.Getenv("SANDPROBE_BENCH_READER_PEER_ALL") == "1") {
				cmds = append(cmds, []string{kubeScore, "score", "-o", "ci", file})
			}
			best := make([]readerMeasure, len(cmds))
			for round := 0; round < 2; round++ {
				for i, args := range cmds {
					m := measureChild(t, maxrss, filepath.Join(tmp, fmt.Sprintf("out-%d", i)), args)
					if round == 0 || m.seconds < best[i].seconds {
						best[i].seconds = m.seconds
					}
					if round == 0 || m.cpu < best[i].cpu {
						best[i].cpu = m.cpu
					}
					if round == 0 || m.mb < best[i].mb {
						best[i].mb = m.mb
					}
				}
			}
			if !sameReport(t, filepath.Join(tmp, "out-0"), filepath.Join(tmp, "out-1")) {
				t.Errorf("%s, %d pods: the reference build's report differs from the fast build's", gen, n)
			}
			line := fmt.Sprintf("  %-9s %7d pods (%4.0f MB): fast %6.2f s / %6.2f s / %5.1f MB   reference %6.2f s / %6.2f s / %5.1f MB   fast is %5.2fx (CPU %5.2fx)",
				gen, n, float64(fi.Size())/1e6, best[0].seconds, best[0].cpu, best[0].mb, best[1].seconds, best[1].cpu, best[1].mb,
				best[1].seconds/best[0].seconds, best[1].cpu/best[0].cpu)
			if len(best) == 3 {
				line += fmt.Sprintf("   kube-score %6.2f s / %6.2f s / %6.1f MB: fast %4.1fx, reference %4.1fx faster",
					best[2].seconds, best[2].cpu, best[2].mb, best[2].seconds/best[0].seconds, best[2].seconds/best[1].seconds)
			}
			fmt.Println(line)
			os.Remove(file)
		}
	}
}

type readerMeasure struct{ seconds, cpu, mb float64 }

// benchSizes are the pod counts a bench runs at: env's comma-separated
// list when set, else def.
func benchSizes(t *testing.T, env string, def ...int) []int {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	var sizes []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// measureChild runs args under maxrss with stdout to a file; drift and
// kube-score both exit 1 on these pods.
func measureChild(t *testing.T, maxrss, stdout string, args []string) readerMeasure {
	t.Helper()
	out, err := os.Create(stdout)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	syscall.Sync()
	var errb strings.Builder
	cmd := exec.Command(maxrss, args...)
	cmd.Stdout, cmd.Stderr = out, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	if err == nil || !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		t.Fatalf("%s: want exit 1 (drift), got %v\n%.2000s", filepath.Base(args[0]), err, errb.String())
	}
	m := regexp.MustCompile(`maxrss_kib=(\d+) seconds=([\d.]+) cpu=([\d.]+)`).FindStringSubmatch(errb.String())
	if m == nil {
		t.Fatalf("%s: no measurement in %q", args[0], errb.String())
	}
	kib, _ := strconv.ParseFloat(m[1], 64)
	secs, _ := strconv.ParseFloat(m[2], 64)
	cpu, _ := strconv.ParseFloat(m[3], 64)
	return readerMeasure{seconds: secs, cpu: cpu, mb: kib / 1024}
}

// sameReport compares two JSON reports but for their timing fields.
func sameReport(t *testing.T, a, b string) bool {
	t.Helper()
	clean := func(path string) string {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return regexp.MustCompile(`"(startedAt|seconds|drift)":\s*("[^"]*"|[\d.e+-]+)`).ReplaceAllString(string(data), "")
	}
	return clean(a) == clean(b)
}
