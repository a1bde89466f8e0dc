package probes

import (
	"context"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// browserPolicy asks for a screenshot into a fresh directory.
func browserPolicy(t *testing.T, path string, timeout time.Duration) *policy.Policy {
	t.Helper()
	p := testPolicy(t, "  browser: {screenshot: true}\n")
	p.Spec.Browser.WriteTo = t.TempDir()
	p.Spec.Browser.Path = path
	if timeout > 0 {
		p.Spec.Browser.Timeout.Duration = timeout
	}
	return p
}

func realChromium(t testing.TB) string {
	t.Helper()
	path, err := findBrowser("")
	if err != nil {
		testenv.Missing(t, "no Chromium on PATH (apt-get install chromium): "+err.Error())
	}
	return path
}

// TestBrowserScreenshot drives the real Chromium: it must start, render the
// page, write a PNG of the right size and colours, report each step's time,
// and leave neither the profile nor the screenshot behind.
func TestBrowserScreenshot(t *testing.T) {
	p := browserPolicy(t, realChromium(t), 0)
	f := checkBrowserScreenshot(context.Background(), &Env{Policy: p, Nonce: "unit"})[0]
	if f.Status != result.Pass {
		t.Fatalf("%s %s\nevidence: %s\nfix: %s", f.Status, result.ExpectedActual(f), f.Evidence, f.Fix)
	}
	for _, step := range []string{"locate ", "profile ", "launch ", "render ", "capture ", "write ", "decode ", "800x600 PNG", "block rgb(30,144,255)"} {
		if !strings.Contains(f.Evidence, step) {
			t.Errorf("evidence lacks %q: %s", step, f.Evidence)
		}
	}
	left, _ := os.ReadDir(p.Spec.Browser.WriteTo)
	if len(left) > 0 {
		t.Errorf("left behind in writeTo: %v", left)
	}
	t.Log(f.Evidence)
}

// fakeBrowser writes a shell script that stands in for Chromium and fails the
// way a broken image's Chromium does.
func fakeBrowser(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "chromium")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBrowserFailuresSayWhy: each way Chromium fails under a sandbox is named
// by its step, in words a user can act on.
func TestBrowserFailuresSayWhy(t *testing.T) {
	cases := []struct {
		name    string
		path    func(t *testing.T) string
		setup   func(t *testing.T, p *policy.Policy)
		timeout time.Duration
		subject string
		actual  string
		fix     string
	}{
		{name: "configured binary missing", path: func(*testing.T) string { return "/opt/no-such/chromium" },
			subject: "locate", actual: "/opt/no-such/chromium: ENOENT", fix: "spec.browser.path is /opt/no-such/chromium"},
		{name: "no browser on PATH", path: func(*testing.T) string { return "" },
			setup:   func(t *testing.T, _ *policy.Policy) { t.Setenv("PATH", t.TempDir()) },
			subject: "locate", actual: "none of chromium, chromium-browser", fix: "apt-get install chromium"},
		{name: "writeTo missing", path: func(t *testing.T) string { return fakeBrowser(t, "exit 0") },
			setup:   func(_ *testing.T, p *policy.Policy) { p.Spec.Browser.WriteTo = "/nonexistent/shots" },
			subject: "profile", actual: "cannot create a fresh profile directory under /nonexistent/shots: ENOENT", fix: "make /nonexistent/shots writable by uid"},
		{name: "Chromium's sandbox refused", path: func(t *testing.T) string {
			return fakeBrowser(t, "echo '[0101/000000.000000:FATAL:zygote_host_impl_linux.cc(127)] No usable sandbox! Update your kernel' >&2; exit 1")
		}, subject: "launch", actual: "Chromium's own sandbox refused to start", fix: "--no-sandbox"},
		// gVisor's --oci-seccomp answers clone3 with EPERM, not the profile's
		// ENOSYS: glibc's posix_spawn then fails (seen on hack/cluster).
		{name: "clone3 refused with EPERM", path: func(t *testing.T) string {
			return fakeBrowser(t, "echo '[24:24:1202/153822.957780:FATAL:third_party/crashpad/crashpad/util/posix/spawn_subprocess.cc:231] posix_spawn /usr/lib/chromium/chrome_crashpad_handler: Operation not permitted (1)' >&2; exit 1")
		}, subject: "launch", actual: "could not start a process or thread: [24:24", fix: "refuses clone3 with ENOSYS"},
		{name: "no writable HOME", path: func(t *testing.T) string {
			return fakeBrowser(t, "echo \"chrome_crashpad_handler: --database is required\" >&2; exit 1")
		}, setup: func(t *testing.T, _ *policy.Policy) { t.Setenv("HOME", "/nonexistent/home") },
			subject: "launch", actual: "HOME /nonexistent/home is not writable", fix: "give the sandbox a writable HOME"},
		{name: "missing library", path: func(t *testing.T) string {
			return fakeBrowser(t, "echo 'chromium: error while loading shared libraries: libnss3.so: cannot open shared object file' >&2; exit 127")
		}, subject: "launch", actual: "libnss3.so", fix: "install the missing library"},
		{name: "browser hangs", path: func(t *testing.T) string { return fakeBrowser(t, "exec sleep 30") },
			timeout: time.Second, subject: "launch", actual: "timed out during launch after 1s", fix: "raise spec.browser.timeout"},
		{name: "not executable", path: func(t *testing.T) string {
			p := fakeBrowser(t, "exit 0")
			os.Chmod(p, 0o644)
			return p
		}, subject: "locate", actual: "is not executable", fix: "spec.browser.path"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := browserPolicy(t, c.path(t), c.timeout)
			if c.setup != nil {
				c.setup(t, p)
			}
			start := time.Now()
			f := checkBrowserScreenshot(context.Background(), &Env{Policy: p, Nonce: "unit"})[0]
			if took := time.Since(start); took > 15*time.Second {
				t.Errorf("took %s", took)
			}
			if f.Status != result.Fail || f.Subject != c.subject {
				t.Fatalf("%s at %q, want fail at %q: %s (%s)", f.Status, f.Subject, c.subject, result.ExpectedActual(f), f.Evidence)
			}
			if !strings.Contains(f.Actual, c.actual) {
				t.Errorf("actual %q does not contain %q", f.Actual, c.actual)
			}
			if !strings.Contains(f.Fix, c.fix) {
				t.Errorf("fix %q does not contain %q", f.Fix, c.fix)
			}
			if !strings.Contains(f.Evidence, "steps: ") {
				t.Errorf("evidence has no steps: %s", f.Evidence)
			}
			t.Logf("%s: %s; fix: %s", f.Name(), f.Actual, f.Fix)
		})
	}
}

func TestVerifyScreenshot(t *testing.T) {
	page := func(w, h int, block color.RGBA) image.Image {
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				c := pageColor
				if x < blockWidth && y < blockHeight {
					c = block
				}
				img.Set(x, y, c)
			}
		}
		return img
	}
	cases := []struct {
		name string
		img  image.Image
		err  string
	}{
		{"the page", page(shotWidth, shotHeight, blockColor), ""},
		{"cut short", page(shotWidth, 457, blockColor), "800x457, want 800x600"},
		{"blank", page(shotWidth, shotHeight, pageColor), "does not show the page"},
		{"all black", image.NewRGBA(image.Rect(0, 0, shotWidth, shotHeight)), "does not show the page"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "shot.png")
			out, err := os.Create(file)
			if err != nil {
				t.Fatal(err)
			}
			png.Encode(out, c.img)
			out.Close()
			_, err = verifyScreenshot(file)
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Errorf("err %v, want %q", err, c.err)
			}
		})
	}
	file := filepath.Join(t.TempDir(), "not.png")
	os.WriteFile(file, []byte("GIF89a"), 0o644)
	if _, err := verifyScreenshot(file); err == nil || !strings.Contains(err.Error(), "not a PNG") {
		t.Errorf("a GIF: %v", err)
	}
}

// BenchmarkBrowserScreenshot times the check against a bare
// `chromium --headless --screenshot` of the same page with the same flags,
// alternating in the same loop, and reports both and the ratio.
func BenchmarkBrowserScreenshot(b *testing.B) {
	path := realChromium(b)
	p := testPolicyB(b)
	dir := b.TempDir()
	p.Spec.Browser.WriteTo = dir
	var check, bare time.Duration
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		f := checkBrowserScreenshot(context.Background(), &Env{Policy: p, Nonce: "bench"})[0]
		check += time.Since(t0)
		if f.Status != result.Pass {
			b.Fatalf("%s: %s (%s)", f.Status, f.Actual, f.Evidence)
		}
		t1 := time.Now()
		profile, _ := os.MkdirTemp(dir, "bare-profile-")
		shot := filepath.Join(dir, "bare.png")
		args := append(browserFlags(profile), "--screenshot="+shot, screenshotPage())
		if out, err := exec.Command(path, args...).CombinedOutput(); err != nil {
			b.Fatalf("bare chromium: %v: %s", err, out)
		}
		if _, err := verifyScreenshot(shot); err != nil {
			b.Fatalf("bare screenshot: %v", err)
		}
		bare += time.Since(t1)
		os.RemoveAll(profile)
		os.Remove(shot)
	}
	n := float64(b.N)
	b.ReportMetric(float64(check.Milliseconds())/n, "ms/check")
	b.ReportMetric(float64(bare.Milliseconds())/n, "ms/bare-chromium")
	b.ReportMetric(float64(check)/float64(bare), "ratio")
}

func testPolicyB(b *testing.B) *policy.Policy {
	b.Helper()
	p, err := policy.Load([]byte("apiVersion: sandprobe.dev/v1alpha1\nkind: SandboxPolicy\nmetadata: {name: bench}\nspec:\n  selector: {matchLabels: {sandbox: \"true\"}}\n  identity: {uid: 0, gid: 0, allowRoot: true}\n  filesystem: {writable: [/tmp]}\n  browser: {screenshot: true}\n"))
	if err != nil {
		b.Fatal(err)
	}
	return p
}
