package probes

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"image/color"
	"image/png"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// browserNames are tried on PATH, in order, when the policy names no binary.
var browserNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell", "chrome"}

// The page is self-contained (a data: URL, no network, no fonts needed) and
// has a blue block on white at known coordinates, so a decoded screenshot
// proves the page was laid out and painted, not merely that a PNG exists.
const (
	shotWidth, shotHeight = 800, 600
	blockWidth            = 400
	blockHeight           = 300
)

var (
	blockColor = color.RGBA{R: 30, G: 144, B: 255, A: 255}
	pageColor  = color.RGBA{R: 255, G: 255, B: 255, A: 255}
)

// screenshotPage is the page the check renders, as a data: URL.
func screenshotPage() string {
	html := fmt.Sprintf(`<!doctype html><html><head><meta charset="utf-8"><title>sandprobe</title></head>`+
		`<body style="margin:0;background:#fff"><div style="position:absolute;left:0;top:0;width:%dpx;height:%dpx;background:rgb(%d,%d,%d)"></div>`+
		`<p style="position:absolute;left:%dpx;top:%dpx;font:16px sans-serif">sandprobe</p></body></html>`,
		blockWidth, blockHeight, blockColor.R, blockColor.G, blockColor.B, blockWidth+20, blockHeight+20)
	return "data:text/html;base64," + base64.StdEncoding.EncodeToString([]byte(html))
}

// browserFlags are the Chromium flags the check launches with: headless, no
// GPU, nothing that reaches the network on its own. --no-sandbox because the
// sandbox being probed is the isolation; Chromium's own sandbox needs user
// namespaces or a setuid helper that a capability-less sandbox never has.
func browserFlags(profile string) []string {
	return []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
		"--hide-scrollbars", "--force-color-profile=srgb",
		fmt.Sprintf("--window-size=%d,%d", shotWidth, shotHeight),
		"--user-data-dir=" + profile,
	}
}

// browserSteps records each step's duration for the evidence.
type browserSteps struct {
	done []string
	last time.Time
}

func (s *browserSteps) mark(name, detail string) {
	now := time.Now()
	entry := fmt.Sprintf("%s %s", name, now.Sub(s.last).Round(time.Millisecond))
	if detail != "" {
		entry += " (" + detail + ")"
	}
	s.done = append(s.done, entry)
	s.last = now
}

func (s *browserSteps) String() string { return "steps: " + strings.Join(s.done, "; ") }

func checkBrowserScreenshot(ctx context.Context, env *Env) []result.Finding {
	spec := env.Policy.Spec.Browser
	ctx, cancel := context.WithTimeout(ctx, spec.Timeout.Duration)
	defer cancel()
	r := &screenshotRun{ctx: ctx, env: env, spec: spec, steps: &browserSteps{last: time.Now()}, home: homeState(), output: &tailBuffer{max: 32 << 10}}
	r.exp = fmt.Sprintf("a headless Chromium writes a %dx%d screenshot of a self-contained page to %s within %s", shotWidth, shotHeight, spec.WriteTo, spec.Timeout.Duration)

	path, err := findBrowser(spec.Path)
	if err != nil {
		fix := "install Chromium in the image (Debian: apt-get install chromium) so it is on PATH, or point spec.browser.path at it"
		if spec.Path != "" {
			fix = fmt.Sprintf("spec.browser.path is %s: install Chromium there or correct the path", spec.Path)
		}
		return r.failAt("locate", "no browser binary: "+err.Error(), fix, "")
	}
	r.steps.mark("locate", path)

	profile, err := os.MkdirTemp(spec.WriteTo, ".sandprobe-browser-profile-")
	if err != nil {
		return r.failAt("profile", fmt.Sprintf("cannot create a fresh profile directory under %s: %s", spec.WriteTo, errnoName(err)),
			fmt.Sprintf("make %s writable by uid %d (a tmpfs or emptyDir, mode 1777; in a Docker image, chmod 1777 the directory: runc gives a tmpfs the mode of the image directory it covers)", spec.WriteTo, os.Getuid()),
			describeDir(spec.WriteTo))
	}
	// Chromium's helpers can write into the profile a moment after it exits.
	defer removeAllRetry(profile)
	r.steps.mark("profile", profile)

	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(path), chromedp.CombinedOutput(r.output)}
	for _, f := range browserFlags(profile) {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if hasValue {
			opts = append(opts, chromedp.Flag(name, value))
		} else {
			opts = append(opts, chromedp.Flag(name, true))
		}
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	return r.shoot(bctx)
}

// screenshotRun is one browser.screenshot check: what it expects, the
// steps done so far, HOME's state and the browser's output, for the
// evidence of whichever step fails.
type screenshotRun struct {
	ctx    context.Context
	env    *Env
	spec   policy.Browser
	exp    string
	steps  *browserSteps
	home   home
	output *tailBuffer
}

// failAt builds the failure for a step, with everything seen so far.
func (r *screenshotRun) failAt(step, actual, fix, output string) []result.Finding {
	ev := r.steps.String() + "; " + r.home.describe()
	if output = strings.TrimSpace(output); output != "" {
		ev += "; browser output: " + clipText(strings.Join(strings.Fields(output), " "), 1200)
	}
	f := fail(step, r.exp, actual, ev)
	f.Fix = fix
	return []result.Finding{f}
}

// timedOut is the finding for a step the check's deadline (or an
// interruption) cut short.
func (r *screenshotRun) timedOut(step string) []result.Finding {
	if errors.Is(r.ctx.Err(), context.Canceled) {
		return []result.Finding{errorf(step, "interrupted during %s", step)}
	}
	return r.failAt(step, fmt.Sprintf("timed out during %s after %s", step, r.spec.Timeout.Duration),
		"Chromium did not finish in time: give the sandbox more CPU and memory or raise spec.browser.timeout; the browser output in the evidence shows where it stalled",
		r.output.String())
}

// shoot launches the browser in bctx, renders the page, captures, writes
// and decodes the screenshot, and closes the browser.
func (r *screenshotRun) shoot(bctx context.Context) []result.Finding {
	ctx, spec, steps, output := r.ctx, r.spec, r.steps, r.output
	if err := chromedp.Do(bctx); err != nil {
		if ctx.Err() != nil {
			return r.timedOut("launch")
		}
		actual, fix := diagnoseLaunch(err, output.String(), r.home, r.env)
		return r.failAt("launch", actual, fix, output.String())
	}
	version := ""
	if b := chromedp.FromContext(bctx).Browser; b != nil {
		if v, err := cdp.Call(bctx, b, browser.GetVersion, cdp.Empty{}); err == nil {
			version = v.Product
		}
	}
	steps.mark("launch", version)

	// The window size includes the browser's own frame in new headless mode;
	// the viewport override makes the page exactly the size checked below.
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(shotWidth, shotHeight), chromedp.Navigate(screenshotPage())); err != nil {
		if ctx.Err() != nil {
			return r.timedOut("render")
		}
		return r.failAt("render", "the page did not load: "+err.Error(),
			"Chromium started but could not render a local page: read the browser output in the evidence (often /dev/shm too small or a crashed renderer: give the sandbox more memory)", output.String())
	}
	steps.mark("render", "")

	shot, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
	if err != nil {
		if ctx.Err() != nil {
			return r.timedOut("capture")
		}
		return r.failAt("capture", "no screenshot: "+err.Error(), "Chromium rendered the page but could not capture it: read the browser output in the evidence", output.String())
	}
	steps.mark("capture", fmt.Sprintf("%d bytes", len(shot)))

	file := filepath.Join(spec.WriteTo, "sandprobe-screenshot-"+fileSafe(r.env.Nonce)+".png")
	if err := os.WriteFile(file, shot, 0o644); err != nil {
		return r.failAt("write", fmt.Sprintf("cannot write the screenshot to %s: %s", file, errnoName(err)),
			fmt.Sprintf("make %s writable by uid %d (spec.browser.writeTo must lie under a writable mount)", spec.WriteTo, os.Getuid()), "")
	}
	defer os.Remove(file)
	steps.mark("write", file)

	detail, err := verifyScreenshot(file)
	if err != nil {
		return r.failAt("decode", err.Error(), "Chromium wrote a screenshot that does not show the page: look for a renderer crash or missing fonts/libraries in the browser output", output.String())
	}
	steps.mark("decode", detail)

	chromedp.Cancel(bctx) // a graceful close, so the profile is complete when removed
	steps.mark("close", "")
	return []result.Finding{pass(spec.WriteTo, r.exp, fmt.Sprintf("a %dx%d screenshot rendered, written and decoded", shotWidth, shotHeight), steps.String()+"; "+r.home.describe())}
}

// findBrowser resolves the policy's path or the first known name on PATH.
func findBrowser(configured string) (string, error) {
	if configured != "" {
		fi, err := os.Stat(configured)
		switch {
		case err != nil:
			return "", fmt.Errorf("%s: %s", configured, errnoName(err))
		case fi.IsDir() || fi.Mode()&0o111 == 0:
			return "", fmt.Errorf("%s is not executable", configured)
		}
		return configured, nil
	}
	for _, name := range browserNames {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("none of %s on PATH (%s)", strings.Join(browserNames, ", "), getenv("PATH"))
}

// home is whether $HOME can take the files Chromium keeps there (its crash
// database and config live under ~/.config whatever the profile directory).
type home struct {
	dir string
	err error // nil: writable
}

func homeState() home {
	dir := getenv("HOME")
	if dir == "" {
		return home{err: errors.New("HOME is not set")}
	}
	return home{dir: dir, err: tryCreate(dir, fmt.Sprintf("home-%d", time.Now().UnixNano()))}
}

func (h home) describe() string {
	switch {
	case h.dir == "":
		return "HOME is not set"
	case h.err != nil:
		return fmt.Sprintf("HOME %s is not writable (%s)", h.dir, errnoName(h.err))
	}
	return fmt.Sprintf("HOME %s is writable", h.dir)
}

// diagnoseLaunch turns a failed start into words a user can act on.
func diagnoseLaunch(err error, output string, h home, env *Env) (actual, fix string) {
	uid := os.Getuid()
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(output, s) || strings.Contains(err.Error(), s) {
				return true
			}
		}
		return false
	}
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound):
		return "the browser binary could not be executed: " + err.Error(),
			"install Chromium in the image (Debian: apt-get install chromium) or correct spec.browser.path"
	case errors.Is(err, fs.ErrPermission):
		return "the browser binary is not executable by uid " + fmt.Sprint(uid) + ": " + err.Error(),
			"make the Chromium binary executable by the sandbox uid (mode 0755)"
	case has("error while loading shared libraries"):
		return "a library Chromium needs is missing: " + firstLineWith(output+"\n"+err.Error(), "error while loading shared libraries"),
			"install the missing library in the image (apt-get install chromium installs all of them)"
	case has("posix_spawn", "pthread_create") && has("Operation not permitted"):
		// glibc 2.34+ tries clone3 first and falls back to clone only on
		// ENOSYS; a seccomp filter answering EPERM stops every spawn.
		return "Chromium could not start a process or thread: " + firstLineWith(output, "Operation not permitted") + " (glibc tries clone3 and falls back to clone only when clone3 answers ENOSYS; here it answered EPERM)",
			"give the runtime a seccomp profile that refuses clone3 with ENOSYS, as the default profiles do: gVisor's --oci-seccomp turns every errnoRet into EPERM (google/gvisor#14688), so run a runsc that honours errnoRet or omit --oci-seccomp; or use an image with glibc older than 2.34"
	case has("No usable sandbox", "setuid sandbox", "Failed to move to new namespace", "zygote_host_impl", "Operation not permitted"):
		return "Chromium's own sandbox refused to start: it needs user namespaces or a setuid helper, which a capability-less, no_new_privs sandbox does not give",
			"launch Chromium with --no-sandbox inside the sandbox (the sandbox is the isolation), and make sure no wrapper script or CHROMIUM_FLAGS removes it"
	case h.err != nil && has("--database is required", "crashpad", "Crash Reports", ".config", ".cache", ".pki"):
		return fmt.Sprintf("Chromium exited before it was ready: %s, and Chromium keeps its crash database and config there", h.describe()),
			fmt.Sprintf("give the sandbox a writable HOME: set HOME to a writable path (for example HOME=%s) in the sandbox's environment, or mount an emptyDir at %s", env.Policy.Spec.Browser.WriteTo, h.dir)
	case has("Read-only file system"):
		return "Chromium tried to write on the read-only root: " + firstLineWith(output, "Read-only file system"),
			"point HOME, TMPDIR and the profile (spec.browser.writeTo) at declared writable paths"
	case has("Permission denied"):
		return "Chromium hit a permission error: " + firstLineWith(output, "Permission denied"),
			fmt.Sprintf("make the paths Chromium writes (HOME, TMPDIR, /dev/shm, the profile under %s) writable by uid %d", env.Policy.Spec.Browser.WriteTo, uid)
	case h.err != nil:
		return fmt.Sprintf("Chromium exited before it was ready (%s, which Chromium needs for its config and crash database)", h.describe()),
			fmt.Sprintf("give the sandbox a writable HOME (for example HOME=%s) and read the browser output in the evidence", env.Policy.Spec.Browser.WriteTo)
	}
	return "Chromium exited before it was ready: " + clipText(strings.Join(strings.Fields(err.Error()), " "), 300),
		"run the browser by hand in the sandbox with the flags in the docs and read its output (in the evidence)"
}

func firstLineWith(s, sub string) string {
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			return clipText(strings.TrimSpace(line), 300)
		}
	}
	return ""
}

// verifyScreenshot decodes the written file and checks its size and that the
// page's block and background are where the page put them.
func verifyScreenshot(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("cannot read the screenshot back: %s", errnoName(err))
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		return "", fmt.Errorf("the screenshot is not a PNG: %w", err)
	}
	size := img.Bounds().Size()
	if size.X != shotWidth || size.Y != shotHeight {
		return "", fmt.Errorf("the screenshot is %dx%d, want %dx%d", size.X, size.Y, shotWidth, shotHeight)
	}
	origin := img.Bounds().Min
	block := img.At(origin.X+blockWidth/2, origin.Y+blockHeight/2)
	page := img.At(origin.X+shotWidth-20, origin.Y+shotHeight-20)
	if !near(block, blockColor) || !near(page, pageColor) {
		return "", fmt.Errorf("the screenshot does not show the page: block %s (want %s), background %s (want %s)", rgb(block), rgb(blockColor), rgb(page), rgb(pageColor))
	}
	return fmt.Sprintf("%dx%d PNG, %d bytes, block %s", size.X, size.Y, len(b), rgb(block)), nil
}

func near(c color.Color, want color.RGBA) bool {
	r, g, b, _ := c.RGBA()
	d := func(x uint32, y uint8) bool { v := int(x>>8) - int(y); return v > -12 && v < 12 }
	return d(r, want.R) && d(g, want.G) && d(b, want.B)
}

func rgb(c color.Color) string {
	r, g, b, _ := c.RGBA()
	return fmt.Sprintf("rgb(%d,%d,%d)", r>>8, g>>8, b>>8)
}

// fileSafe keeps a nonce usable in a file name.
func fileSafe(s string) string {
	if s == "" {
		return fmt.Sprint(time.Now().UnixNano())
	}
	return strings.Map(func(r rune) rune {
		if r == '/' || r == 0 {
			return '-'
		}
		return r
	}, s)
}

func removeAllRetry(dir string) {
	for i := 0; i < 50; i++ {
		if os.RemoveAll(dir) == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
