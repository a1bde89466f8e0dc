package local_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/local"
)

// labRun runs the egress checks of a policy in the lab's sandbox namespace.
func labRun(t *testing.T, doc []byte) report.Run {
	t.Helper()
	p, err := policy.Load(doc)
	if err != nil {
		t.Fatal(err)
	}
	be := &local.Backend{Sandbox: local.SandboxFor(p, "sp-sandbox"), Binary: testenv.Binary(t)}
	spec := runner.ProbeSpec{Policy: p, PolicyBytes: doc, Nonce: runner.NewNonce(), Deadline: time.Minute}
	results, err := be.Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	run := report.Run{Policy: p.Metadata.Name}
	for _, r := range results {
		run.Findings = append(run.Findings, runner.Findings(r.Target, r, probes.FixFor)...)
	}
	return run
}

func labPolicy(t *testing.T) []byte {
	t.Helper()
	doc, err := os.ReadFile(testenv.ModuleRoot(t) + "/fixtures/lab-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func labCmd(t *testing.T, script string, args ...string) {
	t.Helper()
	if out, err := exec.Command(script, args...).CombinedOutput(); err != nil {
		t.Fatalf("lab %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// egressOnly keeps the egress findings, by "check subject".
func egressOnly(run report.Run) map[string]report.Finding {
	out := map[string]report.Finding{}
	for _, f := range run.Findings {
		if strings.HasPrefix(f.Check, "egress.") {
			out[f.Name()] = f
		}
	}
	return out
}

func TestLabHealthy(t *testing.T) {
	testenv.Lab(t)
	run := labRun(t, labPolicy(t))
	fs := egressOnly(run)
	if len(fs) < 30 {
		t.Fatalf("only %d egress findings", len(fs))
	}
	for _, f := range run.Findings {
		if f.Status != report.Pass {
			t.Errorf("%s: %s — %s", f.Name(), f.Status, report.ExpectedActual(f))
		}
	}
	// Each blocking flavour was seen with the class the policy pins.
	for name, class := range map[string]string{
		"egress.must-fail 10.99.20.10:443":                policy.VerdictTimeout,
		"egress.must-fail 10.99.20.11:443":                policy.VerdictRefused,
		"egress.must-fail 10.99.20.13:443":                policy.VerdictRefused,
		"egress.must-fail [fd99:0:0:20::10]:443":          policy.VerdictTimeout,
		"egress.must-fail blocked.lab.test:443 via proxy": policy.VerdictProxyDenied,
		"egress.metadata 10.99.169.254:80":                policy.VerdictTimeout,
		"egress.allowed api.lab.test:443 via proxy":       policy.VerdictAnswered,
		"egress.proxy-bypass api.lab.test:443 direct":     policy.VerdictRefused,
		"egress.dns-exfil *.lab.test":                     policy.VerdictNXDomain,
	} {
		if f, ok := fs[name]; !ok || f.Class != class {
			t.Errorf("%s: class %q, want %q", name, fs[name].Class, class)
		}
	}
	if run.ExitCode() != report.ExitOK {
		t.Errorf("exit %d", run.ExitCode())
	}
}

// TestLabBrokenStates switches the lab into each regression and expects the
// check meant for it to fail with the right verdict class, naming the
// destination that now answers.
func TestLabBrokenStates(t *testing.T) {
	script := testenv.Lab(t)
	doc := labPolicy(t)
	cases := []struct {
		state  []string
		fail   []string // findings that must fail with class answered
		status report.Status
		class  string
		pass   []string // findings that must still pass
		// other findings that must fail, with their own class
		failAs map[string]string
	}{
		{state: []string{"egress-open"}, status: report.Fail, class: policy.VerdictAnswered,
			fail: []string{"egress.must-fail blocked.lab.test:443", "egress.must-fail 10.99.20.10:443", "egress.must-fail [fd99:0:0:20::11]:443", "egress.metadata 10.99.169.254:80", "egress.proxy-bypass api.lab.test:443 direct"}},
		{state: []string{"raw-ips-open"}, status: report.Fail, class: policy.VerdictAnswered,
			fail: []string{"egress.must-fail 10.99.20.10:443", "egress.must-fail 10.99.20.13:443", "egress.must-fail [fd99:0:0:20::10]:443"},
			pass: []string{"egress.metadata 10.99.169.254:80"}},
		{state: []string{"metadata-open"}, status: report.Fail, class: policy.VerdictAnswered,
			fail: []string{"egress.metadata 10.99.169.254:80"},
			pass: []string{"egress.must-fail 10.99.20.10:443", "egress.must-fail blocked.lab.test:443"}},
		{state: []string{"ipv6-open"}, status: report.Fail, class: policy.VerdictAnswered,
			fail: []string{"egress.must-fail [fd99:0:0:20::10]:443", "egress.must-fail [fd99:0:0:20::13]:443", "egress.must-fail blocked.lab.test:443"},
			pass: []string{"egress.must-fail 10.99.20.10:443", "egress.must-fail 10.99.20.13:443"}},
		{state: []string{"proxy-open"}, status: report.Fail, class: policy.VerdictAnswered,
			fail: []string{"egress.must-fail blocked.lab.test:443 via proxy", "egress.must-fail 10.99.20.10:443 via proxy", "egress.metadata 10.99.169.254:80 via proxy"},
			pass: []string{"egress.must-fail blocked.lab.test:443"},
			// nothing listens at the CIDR's first address: tinyproxy says 500, which
			// means its allow-list let the destination through
			failAs: map[string]string{"egress.must-fail 10.99.20.1:443 via proxy": policy.VerdictProxyForwarded}},
		{state: []string{"proxy-bypass"}, status: report.Fail, class: policy.VerdictAnswered,
			fail: []string{"egress.proxy-bypass api.lab.test:443 direct", "egress.proxy-bypass git.lab.test:443 direct"},
			pass: []string{"egress.must-fail blocked.lab.test:443"}},
		{state: []string{"dns-open"}, status: report.Fail, class: policy.VerdictAnswered,
			fail: []string{"egress.dns-exfil *.lab.test"}},
		{state: []string{"flush-rule", "deny-raw-drop"}, status: report.Fail, class: policy.VerdictAnswered,
			fail: []string{"egress.must-fail 10.99.20.10:443"},
			pass: []string{"egress.must-fail 10.99.20.11:443", "egress.must-fail [fd99:0:0:20::10]:443"}},
		{state: []string{"allowed-down"}, status: report.Inconclusive,
			fail: []string{"egress.must-fail blocked.lab.test:443", "egress.must-fail 10.99.20.11:443", "egress.metadata 10.99.169.254:80"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.state, " "), func(t *testing.T) {
			labCmd(t, script, append([]string{"break"}, c.state...)...)
			defer labCmd(t, script, "heal")
			run := labRun(t, doc)
			fs := egressOnly(run)
			for _, name := range c.fail {
				f, ok := fs[name]
				if !ok {
					t.Errorf("no finding %s", name)
					continue
				}
				if f.Status != c.status || (c.class != "" && f.Class != c.class) {
					t.Errorf("%s: %s/%s, want %s/%s (%s)", name, f.Status, f.Class, c.status, c.class, f.Actual)
				}
				if f.Status == report.Fail && (f.Expected == "" || f.Fix == "" || !strings.Contains(f.Actual, "answered")) {
					t.Errorf("%s: failure lacks expected/actual/fix: %+v", name, f)
				}
			}
			for name, class := range c.failAs {
				if f := fs[name]; f.Status != report.Fail || f.Class != class || f.Fix == "" {
					t.Errorf("%s: %s/%s, want fail/%s with a fix (%s)", name, f.Status, f.Class, class, f.Actual)
				}
			}
			for _, name := range c.pass {
				if f := fs[name]; f.Status != report.Pass {
					t.Errorf("%s should still pass, got %s (%s)", name, f.Status, f.Actual)
				}
			}
			if c.state[0] == "allowed-down" {
				for name, f := range fs {
					if f.Check == "egress.allowed" && f.Status != report.Fail {
						t.Errorf("%s: %s, want fail", name, f.Status)
					}
					if f.Check != "egress.allowed" && f.Status == report.Pass {
						t.Errorf("%s passed on a dead network", name)
					}
				}
			}
			if run.ExitCode() != report.ExitNonConformant {
				t.Errorf("exit %d, want 1", run.ExitCode())
			}
		})
	}
}

// TestLabPinnedClass: a target pinned to time out fails when it is rejected
// with a reset instead.
func TestLabPinnedClass(t *testing.T) {
	testenv.Lab(t)
	doc := strings.Replace(string(labPolicy(t)), "{target: 10.99.20.11, expect: refused", "{target: 10.99.20.11, expect: timeout", 1)
	fs := egressOnly(labRun(t, []byte(doc)))
	f := fs["egress.must-fail 10.99.20.11:443"]
	if f.Status != report.Fail || f.Class != policy.VerdictRefused || !strings.Contains(f.Actual, "refused instead of timeout") {
		t.Fatalf("pinned timeout on a reset target: %+v", f)
	}
}

// TestLabHasNoWayOut asserts, with route lookups only (no packet is sent),
// that nothing in the lab can reach the machine's real interfaces.
func TestLabHasNoWayOut(t *testing.T) {
	testenv.Lab(t)
	out, err := exec.Command("ip", "-o", "-4", "addr", "show", "scope", "global").Output()
	if err != nil {
		t.Fatal(err)
	}
	var real []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 4 && !strings.HasPrefix(fields[1], "sp-") && !strings.HasPrefix(fields[1], "docker") {
			real = append(real, strings.Split(fields[3], "/")[0])
		}
	}
	targets := append(real, "169.254.169.254", "8.8.8.8", "1.1.1.1")
	for _, ns := range []string{"sp-sandbox", "sp-router", "sp-proxy", "sp-dns"} {
		if out, _ := exec.Command("ip", "-n", ns, "link", "show").Output(); strings.Contains(string(out), "eth0") || strings.Contains(string(out), "ens") {
			t.Errorf("%s has a real interface:\n%s", ns, out)
		}
		for _, dst := range targets {
			route, err := exec.Command("ip", "-n", ns, "route", "get", dst).CombinedOutput()
			r := string(route)
			if err == nil && !strings.Contains(r, "unreachable") && !strings.Contains(r, "via 10.99.") && !strings.Contains(r, "dev lo") {
				t.Errorf("%s has a route to %s: %s", ns, dst, r)
			}
		}
	}
	// The router, the only namespace that forwards, has no route out at all.
	if route, err := exec.Command("ip", "-n", "sp-router", "route", "get", "8.8.8.8").CombinedOutput(); err == nil {
		t.Errorf("sp-router routes to the internet: %s", route)
	}
}
