package local_test

import (
	"context"
	"fmt"
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

// healthyRuns is how many consecutive runs of the healthy lab must pass
// every check: one lucky pass proves little about false alarms.
const healthyRuns = 20

// TestLabHealthy: the healthy lab passes every check, 20 runs in a row,
// with every pass carrying its proof (who stopped the attempt, how, when),
// and no probe query ever reaching the internet's DNS (the lab authority).
func TestLabHealthy(t *testing.T) {
	testenv.Lab(t)
	doc := labPolicy(t)
	before := authorityQueries(t)
	falseAlarms := 0
	for i := range healthyRuns {
		run := labRun(t, doc)
		fs := egressOnly(run)
		if len(fs) < 80 {
			t.Fatalf("run %d: only %d egress findings", i, len(fs))
		}
		for _, f := range run.Findings {
			if f.Status != report.Pass {
				falseAlarms++
				t.Errorf("run %d: %s: %s — %s", i, f.Name(), f.Status, report.ExpectedActual(f))
			}
			if f.Deny != "" && f.Deny != report.DenyProven {
				t.Errorf("run %d: %s: deny %s (the control got %s)", i, f.Name(), f.Deny, f.Control)
			}
		}
		// Each blocking flavour was seen with the class the policy pins, and
		// each kind of stop names who stopped it.
		for name, want := range map[string]struct{ class, by string }{
			"egress.must-fail 10.99.20.10:443":                {policy.VerdictTimeout, report.StoppedByNetwork},
			"egress.must-fail 10.99.20.11:443":                {policy.VerdictRefused, report.StoppedByNetwork},
			"egress.must-fail 10.99.20.13:443":                {policy.VerdictRefused, report.StoppedByNetwork},
			"egress.must-fail [fd99:0:0:20::10]:443":          {policy.VerdictTimeout, report.StoppedByNetwork},
			"egress.must-fail blocked.lab.test:443":           {policy.VerdictTimeout, report.StoppedByNetwork},
			"egress.must-fail blocked.lab.test:443 via proxy": {policy.VerdictProxyDenied, report.StoppedByProxy},
			"egress.metadata 10.99.169.254:80":                {policy.VerdictTimeout, report.StoppedByNetwork},
			"egress.metadata [fd99:0:0:169::254]:443":         {policy.VerdictTimeout, report.StoppedByNetwork},
			"egress.metadata 10.99.169.200:443 via proxy":     {policy.VerdictProxyDenied, report.StoppedByProxy},
			"egress.allowed api.lab.test:443 via proxy":       {policy.VerdictAnswered, ""},
			"egress.proxy-bypass api.lab.test:443 direct":     {policy.VerdictRefused, report.StoppedByNetwork},
			"egress.dns-exfil *.lab.test":                     {policy.VerdictDNSRefused, report.StoppedByResolver},
			"egress.dns-exfil canary *.canary.lab.test":       {policy.VerdictDNSRefused, report.StoppedByResolver},
			"egress.dns-exfil name blocked.lab.test":          {policy.VerdictDNSRefused, report.StoppedByResolver},
			"egress.dns-bypass 10.99.20.10:53/udp":            {policy.VerdictTimeout, report.StoppedByNetwork},
			"egress.dns-bypass 10.99.20.11:53/tcp":            {policy.VerdictRefused, report.StoppedByNetwork},
		} {
			f, ok := fs[name]
			if !ok || f.Class != want.class || f.Attempt == nil || f.Attempt.StoppedBy != want.by {
				t.Errorf("run %d: %s: class %q stopped by %q, want %q by %q", i, name, f.Class, stoppedBy(f), want.class, want.by)
			}
		}
		for name, f := range fs {
			checkEvidence(t, name, f)
		}
		if run.ExitCode() != report.ExitOK {
			t.Errorf("run %d: exit %d", i, run.ExitCode())
		}
	}
	leaked, control := newQueries(before, authorityQueries(t))
	if len(leaked) > 0 {
		t.Errorf("the probe's DNS queries reached the lab authority from a healthy lab: %v", leaked)
	}
	// The dns-bypass denies are proven because the control's own queries
	// got answers from the outside resolvers: the authority saw them.
	if len(control) < healthyRuns {
		t.Errorf("the control vantage's queries at the authority: %d in %d runs, want at least one a run", len(control), healthyRuns)
	}
	t.Logf("%d healthy runs, %d false alarms", healthyRuns, falseAlarms)
}

func stoppedBy(f report.Finding) string {
	if f.Attempt == nil {
		return "(no evidence)"
	}
	return f.Attempt.StoppedBy
}

// checkEvidence: every egress attempt says when it ran, how long it waited
// of its own timeout, and — when it was stopped — by whom and how.
func checkEvidence(t *testing.T, name string, f report.Finding) {
	t.Helper()
	ev := f.Attempt
	if ev == nil {
		t.Errorf("%s: no attempt evidence", name)
		return
	}
	if !ev.Attempted || ev.Timeout <= 0 || ev.Waited < 0 || ev.Waited > ev.Timeout*1.2 || ev.Started < 0 {
		t.Errorf("%s: timing %+v", name, ev)
	}
	if f.Check == "egress.allowed" || f.Status != report.Pass {
		return
	}
	switch ev.StoppedBy {
	case report.StoppedByNetwork:
		if ev.Errno == "" || ev.Signal == "" {
			t.Errorf("%s: stopped by the network without errno and signal: %+v", name, ev)
		}
		if f.Class == policy.VerdictTimeout && ev.Waited < 0.9*ev.Timeout {
			t.Errorf("%s: a drop after %.3fs of %gs: it did not get its whole timeout", name, ev.Waited, ev.Timeout)
		}
	case report.StoppedByProxy:
		if !strings.Contains(ev.ProxyStatus, "403") {
			t.Errorf("%s: stopped by the proxy without its status: %+v", name, ev)
		}
	case report.StoppedByResolver:
		if ev.Rcode == "" || ev.Resolver == "" {
			t.Errorf("%s: stopped by the resolver without its rcode: %+v", name, ev)
		}
	default:
		t.Errorf("%s: a pass that does not say what stopped it: %+v", name, ev)
	}
}

// authorityQueries are the names the lab's DNS authority ("the internet")
// has been asked so far.
func authorityQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(testenv.LabDir() + "/dns/queries.log")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) >= 4 {
			out = append(out, f[3])
		}
	}
	return out
}

// newRandomQueries are the probe's random names the authority saw since
// before; the control vantage's own (probes.ControlQueryPrefix) are apart.
func newRandomQueries(before, after []string) []string {
	out, _ := newQueries(before, after)
	return out
}

func newQueries(before, after []string) (sandbox, control []string) {
	for _, q := range after[min(len(before), len(after)):] {
		switch {
		case strings.HasPrefix(q, probes.ControlQueryPrefix):
			control = append(control, q)
		case strings.HasPrefix(q, "sandprobe-"):
			sandbox = append(sandbox, q)
		}
	}
	return sandbox, control
}

// TestLabControl: a deny counts only where the control vantage (sp-control,
// the lab's side of the link, under no sandbox rule) got an answer. A
// target that answers the control and not the sandbox is a proven pass; a
// port nothing listens on (a TCP reset from the host itself, exactly what a
// REJECT rule looks like from inside) and the router (which refuses
// everyone) are unproven: inconclusive, never a pass, counted in
// sandprobe_egress_denies_unproven. A control under a default-deny of its
// own (every packet leaving it dropped) proves nothing, and nothing passes
// on it. Without a control, no direct deny is proven; the proxy's own
// refusal still is. The same holds for direct DNS queries to outside
// resolvers (egress.dns-bypass): an address where no resolver answers
// proves nothing.
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
      # Its addresses: the sandbox's resolver refuses the name, and a
      # DNS-only block is no network deny (TestLabDNSOnlyBlock).
      hosts: [{target: blocked.lab.test, addresses: [10.99.20.20, "fd99:0:0:20::20"]}]
      ips:
        - {target: 10.99.20.11, reason: "REJECT tcp reset in front of a live listener"}
        - {target: 10.99.20.11, port: 8081, reason: "the same REJECT, in front of a port nothing listens on"}
        - {target: 10.99.20.1, reason: "the router's own address: it refuses everyone"}
    metadata: {address: 10.99.169.254, port: 80}
    # The outside resolvers are the must-fail addresses on port 53: the
    # authority answers on 10.99.20.11 (a proven deny), nothing on the
    # router's address (it refuses everyone: unproven).
    dns: {arbitraryNames: deny, domains: [lab.test]}
    timeout: 2s
`)
	cases := []struct {
		name, control string
		// blocked gives the control vantage a default-deny of its own.
		blocked bool
		want    map[string][3]string // finding → status, deny, control class
	}{
		{"sp-control", "sp-control", false, map[string][3]string{
			"egress.must-fail blocked.lab.test:443":           {"pass", "proven", "answered"},
			"egress.must-fail 10.99.20.11:443":                {"pass", "proven", "answered"},
			"egress.must-fail 10.99.20.11:8081":               {"inconclusive", "unproven", "refused"},
			"egress.must-fail 10.99.20.1:443":                 {"inconclusive", "unproven", "refused"},
			"egress.metadata 10.99.169.254:80":                {"pass", "proven", "answered"},
			"egress.proxy-bypass api.lab.test:443 direct":     {"pass", "proven", "answered"},
			"egress.must-fail blocked.lab.test:443 via proxy": {"pass", "proven", ""},
			"egress.dns-bypass 10.99.20.11:53/udp":            {"pass", "proven", "answered"},
			"egress.dns-bypass 10.99.20.11:53/tcp":            {"pass", "proven", "answered"},
			"egress.dns-bypass 10.99.20.1:53/udp":             {"inconclusive", "unproven", "refused"},
			"egress.dns-bypass 10.99.20.1:53/tcp":             {"inconclusive", "unproven", "refused"},
			// QUIC: the lab's targets answer it; the router speaks none,
			// to the control either: nothing to keep out (not applicable)
			"egress.udp 10.99.20.11:443/udp":      {"pass", "proven", "answered"},
			"egress.udp blocked.lab.test:443/udp": {"pass", "proven", "answered"},
			"egress.udp api.lab.test:443/udp":     {"pass", "proven", "answered"},
			"egress.udp 10.99.20.1:443/udp":       {"skip", "", "refused"},
		}},
		// The control broken the way the real world breaks it: a firewall
		// on the control's side that drops everything leaving it (a
		// default-deny). The control gets no answer from anything, so
		// nothing it missed proves a deny: every direct deny is unproven,
		// never a pass; the proxy's own refusals stay proven.
		{"sp-control under a default-deny", "sp-control", true, map[string][3]string{
			"egress.must-fail blocked.lab.test:443":           {"inconclusive", "unproven", "timeout"},
			"egress.must-fail 10.99.20.11:443":                {"inconclusive", "unproven", "timeout"},
			"egress.must-fail 10.99.20.11:8081":               {"inconclusive", "unproven", "timeout"},
			"egress.metadata 10.99.169.254:80":                {"inconclusive", "unproven", "timeout"},
			"egress.proxy-bypass api.lab.test:443 direct":     {"inconclusive", "unproven", "timeout"},
			"egress.dns-bypass 10.99.20.11:53/udp":            {"inconclusive", "unproven", "refused"}, // EPERM from the drop rule
			"egress.must-fail blocked.lab.test:443 via proxy": {"pass", "proven", ""},
		}},
		{"none", "", false, map[string][3]string{
			"egress.must-fail blocked.lab.test:443":           {"inconclusive", "unproven", ""},
			"egress.must-fail 10.99.20.11:443":                {"inconclusive", "unproven", ""},
			"egress.must-fail blocked.lab.test:443 via proxy": {"pass", "proven", ""},
		}},
	}
	for _, c := range cases {
		t.Run("control="+c.name, func(t *testing.T) {
			if c.blocked {
				blockControl(t)
			}
			run := labRunControl(t, doc, c.control)
			fs := egressOnly(run)
			for name, want := range c.want {
				f, ok := fs[name]
				got := [3]string{string(f.Status), f.Deny, f.Control}
				if !ok || got != want {
					t.Errorf("%s: status, deny, control %q, want %q (%s; %s)", name, got, want, f.Actual, f.Evidence)
				}
			}
			for _, f := range fs {
				if f.Status == report.Pass && f.Deny != "" && f.Deny != report.DenyProven {
					t.Errorf("%s passes with deny %q", f.Name(), f.Deny)
				}
			}
			if run.ExitCode() != report.ExitNonConformant {
				t.Errorf("exit %d, want 1: an unproven deny is never a pass", run.ExitCode())
			}
			if got, want := gaugeSum(t, run, report.MetricEgressDeniesUnproven), float64(map[string]int{"sp-control": 4, "sp-control under a default-deny": 14, "none": 14}[c.name]); got != want {
				t.Errorf("%s = %v, want %v", report.MetricEgressDeniesUnproven, got, want)
			}
		})
	}
}

// blockControl drops every packet leaving the lab's control namespace but
// loopback, for the rest of the test (which holds the lab's lock).
func blockControl(t *testing.T) {
	t.Helper()
	nft := func(rules string) error {
		cmd := exec.Command("ip", "netns", "exec", "sp-control", "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("nft in sp-control: %w\n%s", err, out)
		}
		return nil
	}
	if err := nft("table inet sp_test_default_deny {\n chain out { type filter hook output priority 0; policy drop; oifname \"lo\" accept; }\n}\n"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nft("delete table inet sp_test_default_deny\n"); err != nil {
			t.Error(err)
		}
	})
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
		// the probe's random names reach the lab's DNS authority
		leaks bool
	}{
		{state: []string{"egress-open"}, status: report.Fail, class: policy.VerdictAnswered,
			fail: []string{"egress.must-fail blocked.lab.test:443", "egress.must-fail 10.99.20.10:443", "egress.must-fail [fd99:0:0:20::11]:443", "egress.metadata 10.99.169.254:80", "egress.proxy-bypass api.lab.test:443 direct",
				"egress.udp 10.99.20.10:443/udp", "egress.udp api.lab.test:443/udp",
				// every must-fail IP is also a DNS server of the internet (as 1.1.1.1 is)
				"egress.dns-bypass 10.99.20.10:53/udp", "egress.dns-bypass [fd99:0:0:20::11]:53/tcp"},
			leaks: true}, // the direct queries reached the authority
		{state: []string{"raw-ips-open"}, status: report.Fail, class: policy.VerdictAnswered,
			fail: []string{"egress.must-fail 10.99.20.10:443", "egress.must-fail 10.99.20.13:443", "egress.must-fail [fd99:0:0:20::10]:443", "egress.dns-bypass 10.99.20.12:53/udp"},
			pass: []string{"egress.metadata 10.99.169.254:80"}, leaks: true},
		// every usual metadata place, on 80 and 443 (lab stand-ins)
		{state: []string{"metadata-open"}, status: report.Fail, class: policy.VerdictAnswered,
			fail: []string{"egress.metadata 10.99.169.254:80", "egress.metadata 10.99.169.254:443", "egress.metadata [fd99:0:0:169::254]:80",
				"egress.metadata [fd99:0:0:169::254]:443", "egress.metadata 10.99.169.2:80", "egress.metadata 10.99.169.2:443",
				"egress.metadata 10.99.169.200:80", "egress.metadata 10.99.169.200:443"},
			pass: []string{"egress.must-fail 10.99.20.10:443", "egress.must-fail blocked.lab.test:443"}},
		{state: []string{"ipv6-open"}, status: report.Fail, class: policy.VerdictAnswered,
			fail: []string{"egress.must-fail [fd99:0:0:20::10]:443", "egress.must-fail [fd99:0:0:20::13]:443", "egress.must-fail blocked.lab.test:443", "egress.dns-bypass [fd99:0:0:20::10]:53/udp"},
			pass: []string{"egress.must-fail 10.99.20.10:443", "egress.must-fail 10.99.20.13:443"}, leaks: true},
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
		// a forwarder relaying to the authority: the canary and the must-fail
		// names resolve, and the random name's NXDOMAIN is the authority's
		{state: []string{"dns-open"}, status: report.Fail, class: policy.VerdictAnswered,
			fail:   []string{"egress.dns-exfil canary *.canary.lab.test", "egress.dns-exfil name blocked.lab.test", "egress.dns-exfil name exfil.lab.test"},
			failAs: map[string]string{"egress.dns-exfil *.lab.test": policy.VerdictNXDomain},
			leaks:  true},
		{state: []string{"flush-rule", "deny-raw-drop"}, status: report.Fail, class: policy.VerdictAnswered,
			fail: []string{"egress.must-fail 10.99.20.10:443", "egress.dns-bypass 10.99.20.10:53/tcp"},
			pass: []string{"egress.must-fail 10.99.20.11:443", "egress.must-fail [fd99:0:0:20::10]:443"}, leaks: true},
		// a rule widened "for a minute" so that browsers get HTTP/3:
		// QUIC reaches every must-fail address and the allowed hosts
		// around the proxy, while every TCP deny still holds
		{state: []string{"quic-open"}, status: report.Fail, class: policy.VerdictAnswered,
			fail: []string{"egress.udp 10.99.20.10:443/udp", "egress.udp 10.99.20.13:443/udp", "egress.udp [fd99:0:0:20::11]:443/udp", "egress.udp api.lab.test:443/udp"},
			pass: []string{"egress.must-fail 10.99.20.10:443", "egress.must-fail blocked.lab.test:443", "egress.proxy-bypass api.lab.test:443 direct"}},
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
			before := authorityQueries(t)
			run := labRun(t, d)
			if leaked := newRandomQueries(before, authorityQueries(t)); (len(leaked) > 0) != c.leaks {
				t.Errorf("random names at the authority: %v, want some: %v", leaked, c.leaks)
			}
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
				if f.Status == report.Fail && (f.Expected == "" || f.Fix == "" || !strings.Contains(f.Actual, "answered") && !strings.Contains(f.Actual, "resolved")) {
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
					// The resolver's own refusal stands whatever the network.
					resolverSaid := f.Check == "egress.dns-exfil" && f.Attempt != nil && f.Attempt.Rcode != ""
					if f.Check != "egress.allowed" && f.Status == report.Pass && !resolverSaid {
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

// TestLabForwarderWithoutCanary: the same forwarder, with a policy that
// gives it nothing to be told by (no canary zone, no must-fail name): the
// random name's NXDOMAIN came from the authority, so it is never a pass.
func TestLabForwarderWithoutCanary(t *testing.T) {
	script := testenv.Lab(t)
	doc := []byte(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: lab-forwarder}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  identity: {uid: 65532, gid: 65532}
  egress:
    proxy: http://proxy.lab.test:3128
    caFile: /run/sandprobe-lab/ca.pem
    allow: [{host: api.lab.test, port: 443, reason: lab}]
    mustFail: {ips: [10.99.20.10]}
    metadata: {address: 10.99.169.254}
    dns: {arbitraryNames: deny, domains: [lab.test], outsideResolvers: [10.99.20.53]}
    timeout: 2s
`)
	for _, c := range []struct {
		state string
		want  report.Status
		class string
	}{
		{"", report.Pass, policy.VerdictDNSRefused}, // healthy: refused by the resolver's allow-list
		{"dns-open", report.Inconclusive, policy.VerdictNXDomain},
	} {
		if c.state != "" {
			labCmd(t, script, "break", c.state)
		}
		before := authorityQueries(t)
		fs := egressOnly(labRun(t, doc))
		labCmd(t, script, "heal")
		f := fs["egress.dns-exfil *.lab.test"]
		if f.Status != c.want || f.Class != c.class || (c.want != report.Pass && f.Fix == "") {
			t.Errorf("%s: %s/%s (%s), want %s/%s", c.state, f.Status, f.Class, f.Actual, c.want, c.class)
		}
		if leaked := newRandomQueries(before, authorityQueries(t)); (len(leaked) > 0) != (c.state != "") {
			t.Errorf("%s: random names at the authority: %v", c.state, leaked)
		}
	}
}

// TestLabQueuedAttemptsAreMade breaks item 1 where it broke: an open
// metadata address queued behind 64 dropped must-fail targets was never
// dialled, classed timeout and passed. Now it is dialled with its whole
// timeout and fails; every drop waited its whole timeout.
func TestLabQueuedAttemptsAreMade(t *testing.T) {
	// The pool holds one slot per attempt by default (a run takes one
	// timeout): a declared concurrency of 64 makes the queue this test is
	// about.
	script := testenv.Lab(t)
	var ips []string
	for port := 2000; port < 2064; port++ {
		ips = append(ips, fmt.Sprintf(`"10.99.20.10:%d"`, port))
	}
	doc := []byte(fmt.Sprintf(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: lab-queue}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  identity: {uid: 65532, gid: 65532}
  egress:
    caFile: /run/sandprobe-lab/ca.pem
    allow: [{host: 10.99.10.10, port: 443, reason: lab}]
    mustFail: {ips: [%s]}
    metadata: {address: 10.99.169.254, port: 80}
    dns: {arbitraryNames: allow}
    timeout: 1s
    concurrency: 64
`, strings.Join(ips, ", ")))
	labCmd(t, script, "break", "metadata-open")
	labCmd(t, script, "break", "flush-rule", "deny-direct-allowed") // the allowed address, reached directly
	fs := egressOnly(labRun(t, doc))
	f := fs["egress.metadata 10.99.169.254:80"]
	if f.Status != report.Fail || f.Class != policy.VerdictAnswered || f.Attempt == nil || !f.Attempt.Attempted {
		t.Fatalf("open metadata behind 64 drops: %s/%s %+v", f.Status, f.Class, f.Attempt)
	}
	if f.Attempt.Started < 0.9 {
		t.Errorf("metadata started at +%.3fs: it should have queued behind the drops", f.Attempt.Started)
	}
	drops := 0
	for name, f := range fs {
		if f.Check == "egress.must-fail" {
			drops++
			// Nothing listens on those ports: the control vantage is refused
			// there too, so each deny is unproven — but each was attempted
			// with its whole timeout.
			if f.Status != report.Inconclusive || f.Deny != report.DenyUnproven || f.Class != policy.VerdictTimeout || f.Attempt.Waited < 0.9 {
				t.Errorf("%s: %s/%s (deny %s) after %.3fs", name, f.Status, f.Class, f.Deny, f.Attempt.Waited)
			}
		}
	}
	if drops != 64 {
		t.Errorf("%d must-fail findings, want 64", drops)
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
