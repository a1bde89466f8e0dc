package page

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

var update = flag.Bool("update", false, "rewrite docs/egress-page.png from the browser test")

// The first screen: what a person sees without scrolling on a laptop.
const screenWidth, screenHeight = 1280, 800

// The reopened target: the lab's rule deny-raw-reset (10.99.20.11, a TCP
// reset), deleted as a CNI upgrade or a rule widened "for a minute" would.
const (
	reopenRule    = "deny-raw-reset"
	reopenSubject = "10.99.20.11:443"
	reopenReason  = "REJECT tcp reset"
	labPolicyFile = "../fixtures/lab-policy.yaml"
)

// browser is one headless Chromium, started with every flag that keeps it
// from calling anybody on its own, and its network log.
type browser struct {
	ctx context.Context
	mu  sync.Mutex
	log []string // every URL the page asked for
}

func startBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		testenv.Missing(t, "the browser test needs Chromium (make deps: Debian's chromium)")
	}
	profile := t.TempDir() // a new, empty profile
	flags := []string{
		"headless", "no-sandbox", "disable-gpu", "disable-quic", "no-first-run", "disable-background-networking",
		"disable-component-update", "disable-sync", "hide-scrollbars", "mute-audio",
	}
	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(path), chromedp.UserDataDir(profile), chromedp.WindowSize(screenWidth, screenHeight),
		// Belt and braces: any name but the loopback one resolves nowhere.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1")}
	for _, f := range flags {
		opts = append(opts, chromedp.Flag(f, true))
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{ctx: ctx}
	// chromedp enables the Network domain on the tab; its requests are the log.
	err = chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			b.mu.Lock()
			b.log = append(b.log, e.Request.URL)
			b.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return b
}

// pageStarted is the start of the run the loaded page shows.
func (b *browser) pageStarted(t *testing.T) time.Time {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById('summary').dataset.started`))
	if err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		t.Fatalf("the page's data-started %q: %v", v, err)
	}
	return at
}

// pageRow is a table row of the rendered page, as the browser sees it.
type pageRow struct {
	Section, Check, Target, Subject, Status, Text string
	Reason                                        string
	Top, Bottom                                   float64
}

// open loads url, checks that the browser asked for nothing but the page
// itself, and returns the rows of its tables.
func (b *browser) open(t *testing.T, url string) []pageRow {
	t.Helper()
	b.mu.Lock()
	b.log = nil
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	err := chromedp.Do(ctx,
		chromedp.EmulateViewport(screenWidth, screenHeight),
		chromedp.Navigate(url),
		chromedp.WaitReady(chromedp.CSS("footer")),
	)
	if err != nil {
		t.Fatalf("load %s in chromium: %v", url, err)
	}
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(Array.from(document.querySelectorAll('tr[data-check]')).map(r => {
			const s = r.closest('section'), b = r.getBoundingClientRect(), why = r.querySelector('[data-reason]');
			return {Section: s ? s.id : '', Check: r.dataset.check, Target: r.dataset.target || '', Subject: r.dataset.subject || '',
				Status: r.dataset.status, Text: r.innerText, Reason: why ? why.innerText : '', Top: b.top, Bottom: b.bottom};
		}))`))
	if err != nil {
		t.Fatalf("read the rows of %s: %v", url, err)
	}
	// Let anything the page might still fetch show up in the log.
	time.Sleep(300 * time.Millisecond)
	b.mu.Lock()
	for _, u := range b.log {
		if u != url && !strings.HasPrefix(u, "data:") {
			t.Errorf("%s: the browser asked for %s: the page must load nothing but itself", url, u)
		}
	}
	if len(b.log) == 0 {
		t.Errorf("%s: the network log is empty: the check would prove nothing", url)
	}
	b.mu.Unlock()
	var out []pageRow
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func (b *browser) screenshot(t *testing.T) []byte {
	t.Helper()
	shot, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if s := img.Bounds().Size(); s.X != screenWidth || s.Y != screenHeight {
		t.Fatalf("screenshot %v, want %dx%d", s, screenWidth, screenHeight)
	}
	return shot
}

// labRun runs the local backend against the lab and returns the run it
// reported (its --json) and the page it wrote (--html).
func labRun(t *testing.T, bin string, wantExit int) (report.Run, string) {
	t.Helper()
	dir := t.TempDir()
	htmlFile, jsonFile := filepath.Join(dir, "page.html"), filepath.Join(dir, "run.json")
	start := time.Now()
	code, stdout, stderr := testenv.Exec(t, bin, "run", "--backend", "local", "--netns", "sp-sandbox", "--control-netns", "sp-control", "--policy", labPolicyFile,
		"--html", htmlFile, "--json", jsonFile)
	if code != wantExit {
		t.Fatalf("run: exit %d, want %d\n%s\n%s", code, wantExit, stdout, stderr)
	}
	var run report.Run
	data, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &run); err != nil {
		t.Fatal(err)
	}
	t.Logf("lab run: exit %d, %d findings, %.2fs", code, len(run.Findings), time.Since(start).Seconds())
	return run, htmlFile
}

// holdsRun checks that the page's rows are the run's findings: each one a
// row with its status, and drift aside, nothing more.
func holdsRun(t *testing.T, rows []pageRow, run report.Run) {
	t.Helper()
	type k struct{ check, target, subject string }
	got := map[k]string{}
	for _, r := range rows {
		if r.Section == "attention" || r.Section == "changes" {
			continue
		}
		if _, dup := got[k{r.Check, r.Target, r.Subject}]; dup {
			t.Errorf("row %s %s %s twice", r.Check, r.Target, r.Subject)
		}
		got[k{r.Check, r.Target, r.Subject}] = r.Status
	}
	for _, f := range run.Findings {
		st, ok := got[k{f.Check, f.Target, f.Subject}]
		if !ok {
			t.Errorf("%s %s %s (%s): in the run, not on the page", f.Check, f.Target, f.Subject, f.Status)
			continue
		}
		if st != string(f.Status) {
			t.Errorf("%s %s %s: the page says %s, the run %s", f.Check, f.Target, f.Subject, st, f.Status)
		}
		delete(got, k{f.Check, f.Target, f.Subject})
	}
	for r := range got {
		t.Errorf("%v: on the page, not in the run", r)
	}
}

// reopenedFirst checks that the reopened target is listed as failing within
// the first screen, with the reason the policy gives and the fix.
func reopenedFirst(t *testing.T, rows []pageRow) pageRow {
	t.Helper()
	for _, r := range rows {
		if r.Section == "attention" && r.Check == "egress.must-fail" && r.Subject == reopenSubject {
			if r.Status != string(report.Fail) || !strings.Contains(r.Text, "FAIL") {
				t.Errorf("the reopened target is listed as %q: %q", r.Status, r.Text)
			}
			if r.Bottom > screenHeight || r.Top < 0 {
				t.Errorf("the reopened target's row spans %.0f–%.0f px: not within the first %d px", r.Top, r.Bottom, screenHeight)
			}
			for _, want := range []string{reopenReason, "fix:", "answered"} {
				if !strings.Contains(r.Text, want) {
					t.Errorf("the reopened target's row lacks %q: %q", want, r.Text)
				}
			}
			return r
		}
	}
	t.Fatalf("the reopened target %s is not under Needs attention", reopenSubject)
	return pageRow{}
}

// TestBrowserLabRuns renders pages from real runs of the local backend
// against the network lab, one healthy and one with a reopened target (the
// lab's deny-raw-reset rule deleted), and from `sandprobe serve` across
// that change, and reads them in a real Chromium: the DOM holds what the run
// held, a healthy run shows every allowance with its reason, the reopened
// target is failing in the first screen with its reason and fix, under
// serve it shows as PASS then FAIL over the last runs, and the browser asks
// for nothing but the page.
func TestBrowserLabRuns(t *testing.T) {
	lab := testenv.Lab(t)
	bin := testenv.Binary(t)
	b := startBrowser(t)
	p, _, err := policy.LoadFile(labPolicyFile)
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()

	t.Run("healthy", func(t *testing.T) {
		run, file := labRun(t, bin, report.ExitOK)
		rows := b.open(t, "file://"+file)
		holdsRun(t, rows, run)
		n := 0
		for _, r := range rows {
			if r.Section == "attention" {
				t.Errorf("a healthy run lists %s %s under Needs attention", r.Check, r.Subject)
			}
			if r.Section != "allowed" {
				continue
			}
			n++
			if r.Status != string(report.Pass) || !strings.Contains(r.Text, "PASS") {
				t.Errorf("allowance %s: %s", r.Subject, r.Text)
			}
			want := ""
			for _, a := range p.Spec.Egress.Allow {
				if allowedSubject(a, p.Spec.Egress.Proxy != "") == r.Subject {
					want = a.Reason
				}
			}
			if want == "" || r.Reason != want {
				t.Errorf("allowance %s shows reason %q, the policy says %q", r.Subject, r.Reason, want)
			}
		}
		if n != len(p.Spec.Egress.Allow) {
			t.Errorf("%d allowances on the page, %d in the policy", n, len(p.Spec.Egress.Allow))
		}
		// A healthy run against the lab proves every direct deny from
		// sp-control, and the page says so beside each verdict.
		deny := map[string]report.Finding{}
		for _, f := range run.Findings {
			if f.Deny != "" {
				deny[f.Check+" "+f.Subject] = f
			}
		}
		proven := 0
		for _, r := range rows {
			f, ok := deny[r.Check+" "+r.Subject]
			if !ok || r.Section == "attention" || r.Section == "changes" {
				continue
			}
			if f.Deny == report.DenyProven {
				proven++
			}
			if !slices.Contains(strings.Fields(r.Text), f.Deny) || (f.Control != "" && !strings.Contains(r.Text, "control: "+f.Control)) {
				t.Errorf("%s %s: the run's deny is %s (control %q), the row reads %q", r.Check, r.Subject, f.Deny, f.Control, r.Text)
			}
		}
		if proven == 0 {
			t.Errorf("no deny on the page is proven by the control")
		}
	})

	t.Run("reopened", func(t *testing.T) {
		breakLab(t, lab)
		run, file := labRun(t, bin, report.ExitNonConformant)
		rows := b.open(t, "file://"+file)
		holdsRun(t, rows, run)
		reopenedFirst(t, rows)
	})

	t.Run("serve", func(t *testing.T) {
		// Two healthy runs, then the rule disappears; the page read after
		// the next run shows the change. @every 6s leaves ~4 s after a run
		// of ~2 s before the next, for the browser.
		healLab(t, lab)
		srv := startServe(t, bin, "@every 6s")
		srv.waitRuns(t, 2, time.Time{})
		breakLab(t, lab)
		broken := time.Now()
		run := srv.waitRuns(t, 1, broken)
		rows := b.open(t, srv.url+"/")
		// On a loaded machine another run may land before the browser
		// reads the page: the history then ends F F, and only the strip
		// and its "since" can show the change.
		firstFailing := b.pageStarted(t).Equal(run.StartedAt)
		if firstFailing {
			holdsRun(t, rows, run)
		} else {
			t.Logf("a run after the first failing one (%s) was published before the page was read", run.StartedAt.Format(time.TimeOnly))
		}
		reopenedFirst(t, rows)
		sawChange := !firstFailing
		var sawHistory bool
		histRe := regexp.MustCompile(`P( P)+( F)+$`)
		for _, r := range rows {
			if r.Subject != reopenSubject || r.Check != "egress.must-fail" {
				continue
			}
			switch r.Section {
			case "changes":
				sawChange = firstFailing && (strings.HasPrefix(r.Text, "PASS\tFAIL") || strings.HasPrefix(r.Text, "PASS FAIL"))
			case "must-fail":
				strip, since, _ := strings.Cut(r.Text[strings.LastIndex(r.Text, "\t")+1:], "\n")
				sawHistory = histRe.MatchString(strip) && strings.HasPrefix(since, "FAIL since "+run.StartedAt.UTC().Format("15:04:05Z")) && strings.Contains(since, "PASS in the")
				if !sawHistory {
					t.Errorf("the reopened target's history reads %q", r.Text)
				}
			}
		}
		if !sawChange {
			t.Errorf("the reopened target is not listed as changed PASS → FAIL")
		}
		shot := b.screenshot(t)
		dest := filepath.Join(t.TempDir(), "egress-page.png")
		if *update {
			dest = "../docs/egress-page.png"
		}
		if err := os.WriteFile(dest, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s (%d bytes)", dest, len(shot))
	})
	t.Logf("browser test: %.1fs", time.Since(started).Seconds())
}

func breakLab(t *testing.T, lab string) {
	t.Helper()
	if out, err := exec.Command(lab, "break", "flush-rule", reopenRule).CombinedOutput(); err != nil {
		t.Fatalf("lab break flush-rule %s: %v\n%s", reopenRule, err, out)
	}
	// testenv.Lab heals the lab when the test ends.
}

func healLab(t *testing.T, lab string) {
	t.Helper()
	if out, err := exec.Command(lab, "heal").CombinedOutput(); err != nil {
		t.Fatalf("lab heal: %v\n%s", err, out)
	}
}

// served is a running `sandprobe serve`.
type served struct {
	url string
}

func startServe(t *testing.T, bin, schedule string) *served {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--backend", "local", "--netns", "sp-sandbox", "--control-netns", "sp-control", "--policy", labPolicyFile,
		"--listen", "127.0.0.1:0", "--schedule", schedule, "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() { // drains the log for as long as serve runs
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "listening" {
				addr <- line.Addr
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	select {
	case a := <-addr:
		return &served{url: "http://" + a}
	case <-time.After(30 * time.Second):
		t.Fatal("sandprobe serve did not start listening")
	}
	return nil
}

// waitRuns waits until n runs that started after since have been published
// and returns the last one.
func (s *served) waitRuns(t *testing.T, n int, since time.Time) report.Run {
	t.Helper()
	seen := map[time.Time]bool{}
	var last report.Run
	deadline := time.Now().Add(60 * time.Second)
	for len(seen) < n {
		if time.Now().After(deadline) {
			t.Fatalf("serve published %d runs after %s in 60 s, want %d", len(seen), since.Format(time.TimeOnly), n)
		}
		time.Sleep(200 * time.Millisecond)
		resp, err := http.Get(s.url + "/report.json")
		if err != nil {
			continue
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			continue
		}
		var run report.Run
		if err := json.Unmarshal(data, &run); err != nil {
			t.Fatal(err)
		}
		if run.StartedAt.After(since) && !seen[run.StartedAt] {
			seen[run.StartedAt] = true
			last = run
		}
	}
	return last
}
