package local_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandprobe/sandprobe/internal/testenv"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/local"
)

// labRun runs the egress checks of a policy in the lab's sandbox namespace,
// with the lab's control vantage (sp-control) proving each deny.
func labRun(t *testing.T, doc []byte) report.Run {
	t.Helper()
	return labRunControl(t, doc, "sp-control")
}

// labRunControl is labRun with the control vantage of choice ("": none).
func labRunControl(t *testing.T, doc []byte, control string) report.Run {
	t.Helper()
	p, err := policy.Load(doc)
	if err != nil {
		t.Fatal(err)
	}
	be := &local.Backend{Sandbox: local.SandboxFor(p, "sp-sandbox"), ControlNetNS: control, Binary: testenv.Binary(t)}
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
		if f.Deny != "" && f.Deny != report.DenyProven {
			t.Errorf("%s: deny %s (control %s)", f.Name(), f.Deny, f.Control)
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

// TestLabControl: a deny counts only where the control vantage (sp-control,
// the lab's side of the link, under no sandbox rule) got an answer. A
// target that answers the control and not the sandbox is a proven pass; a
// port nothing listens on (a TCP reset from the host itself, exactly what a
// REJECT rule looks like from inside) and the router (which refuses
// everyone) are unproven: inconclusive, never a pass, counted in
// sandprobe_egress_denies_unproven. Without a control, no direct deny is
// proven; the proxy's own refusal still is.
func TestLabControl(t *testing.T) {
	testenv.Lab(t)
	doc := []byte(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: lab-control}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  identity: {uid: 65532, gid: 65532}
  filesystem: {readOnlyRoot: true, writable: [/tmp]}
  capabilities: []
  serviceAccountToken: absent
  egress:
    proxy: http://proxy.lab.test:3128
    caFile: /run/sandprobe-lab/ca.pem
    allow:
      - {host: api.lab.test, port: 443, reason: "a live allowance, so the network is not dead"}
    mustFail:
      hosts: [blocked.lab.test]
      ips:
        - {target: 10.99.20.11, reason: "REJECT tcp reset in front of a live listener"}
        - {target: 10.99.20.11, port: 8081, reason: "the same REJECT, in front of a port nothing listens on"}
        - {target: 10.99.20.1, reason: "the router's own address: it refuses everyone"}
    metadata: {address: 10.99.169.254, port: 80}
    dns: {arbitraryNames: allow}
    timeout: 2s
`)
	cases := []struct {
		control string
		want    map[string][3]string // finding → status, deny, control class
	}{
		{"sp-control", map[string][3]string{
			"egress.must-fail blocked.lab.test:443":           {"pass", "proven", "answered"},
			"egress.must-fail 10.99.20.11:443":                {"pass", "proven", "answered"},
			"egress.must-fail 10.99.20.11:8081":               {"inconclusive", "unproven", "refused"},
			"egress.must-fail 10.99.20.1:443":                 {"inconclusive", "unproven", "refused"},
			"egress.metadata 10.99.169.254:80":                {"pass", "proven", "answered"},
			"egress.proxy-bypass api.lab.test:443 direct":     {"pass", "proven", "answered"},
			"egress.must-fail blocked.lab.test:443 via proxy": {"pass", "proven", ""},
		}},
		{"", map[string][3]string{
			"egress.must-fail blocked.lab.test:443":           {"inconclusive", "unproven", ""},
			"egress.must-fail 10.99.20.11:443":                {"inconclusive", "unproven", ""},
			"egress.must-fail blocked.lab.test:443 via proxy": {"pass", "proven", ""},
		}},
	}
	for _, c := range cases {
		t.Run("control="+c.control, func(t *testing.T) {
			run := labRunControl(t, doc, c.control)
			fs := egressOnly(run)
			for name, want := range c.want {
				f, ok := fs[name]
				got := [3]string{string(f.Status), f.Deny, f.Control}
				if !ok || got != want {
					t.Errorf("%s: status, deny, control %q, want %q (%s; %s)", name, got, want, f.Actual, f.Evidence)
				}
			}
			if run.ExitCode() != report.ExitNonConformant {
				t.Errorf("exit %d, want 1: an unproven deny is never a pass", run.ExitCode())
			}
			if got, want := gaugeSum(t, run, report.MetricEgressDeniesUnproven), float64(map[string]int{"sp-control": 2, "": 6}[c.control]); got != want {
				t.Errorf("%s = %v, want %v", report.MetricEgressDeniesUnproven, got, want)
			}
		})
	}
}

// gaugeSum is the sum of a gauge's series once the run is observed.
func gaugeSum(t *testing.T, run report.Run, name string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := report.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(run, time.Now())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, s := range mf.GetMetric() {
				sum += s.GetGauge().GetValue()
			}
		}
	}
	return sum
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
		// extra must-fail targets for this state alone
		extra string
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
			fail: []string{"egress.must-fail blocked.lab.test:443 via proxy", "egress.must-fail 10.99.20.10:443 via proxy", "egress.metadata 10.99.169.254:80 via proxy",
				"egress.must-fail 10.99.20.21:443 via proxy"}, // the CIDR's first host
			pass: []string{"egress.must-fail blocked.lab.test:443"},
			// nothing listens there: tinyproxy says 500, which means its
			// allow-list let the destination through
			extra:  "{target: 10.99.20.1, reason: \"the router, where nothing listens\"}",
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
			d := doc
			if c.extra != "" {
				const last = "        - 10.99.20.20/30\n"
				if !strings.Contains(string(doc), last) {
					t.Fatalf("fixtures/lab-policy.yaml has no %q", last)
				}
				d = []byte(strings.Replace(string(doc), last, last+"        - "+c.extra+"\n", 1))
			}
			run := labRun(t, d)
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
