package runner

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

func TestHostKernelCheck(t *testing.T) {
	p := isolatingPolicy(t)
	mixed := *p
	mixed.Spec.Runtime = policy.Runtime{ClassNames: []string{"gvisor", "runc"}}
	const host = "6.18.44-fc-v782"
	probe := func(kernel, kind string) report.ProbeResult {
		return report.ProbeResult{Runtime: &report.RuntimeEvidence{Kernel: kernel, Kind: kind}}
	}
	cases := []struct {
		name       string
		p          *policy.Policy
		class      string
		hostKernel string
		res        report.ProbeResult
		want       report.Status // "" means no finding
		actual     string
	}{
		{"gVisor's kernel", p, "gvisor", host, probe("4.4.0", "gvisor"), report.Pass, "kernel 4.4.0, not the host's"},
		{"a Kata guest kernel", p, "kata", host, probe("6.1.62", "vm"), report.Pass, "not the host's"},
		{"gvisor class under runc", p, "gvisor", host, probe(host, "vm"), report.Fail, "the host's own kernel " + host},
		{"kata class under runc on a VM node", p, "kata", host, probe(host, "vm"), report.Fail, "plain container"},
		{"undeclared class, every declared one isolates", p, "runc", host, probe(host, "vm"), report.Fail, "host's own kernel"},
		{"class unknown, every declared one isolates", p, "", host, probe(host, "host"), report.Fail, "host's own kernel"},
		{"no runtime evidence", p, "gvisor", host, report.ProbeResult{}, report.Error, "reported no kernel release"},
		{"host kernel unknown", p, "gvisor", "", probe(host, "vm"), "", ""},
		{"a class that promises nothing", &mixed, "runc", host, probe(host, "host"), "", ""},
		{"class unknown, one declared class promises nothing", &mixed, "", host, probe(host, "host"), "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, ok := HostKernelCheck(c.p, c.class, c.hostKernel, c.res)
			if c.want == "" {
				if ok {
					t.Fatalf("unexpected finding %+v", f)
				}
				return
			}
			if !ok || f.Status != c.want || !strings.Contains(f.Actual, c.actual) {
				t.Fatalf("got %v %+v, want %s %q", ok, f, c.want, c.actual)
			}
			if f.Check != "runtime.isolation" || f.Subject != HostKernelSubject || f.Expected == "" {
				t.Errorf("finding %+v", f)
			}
			if f.Status != report.Pass && f.Fix == "" {
				t.Error("no fix")
			}
		})
	}
}

// TestCrossCheckKernel: a hypervisor seen from inside becomes a VM pass only
// when the probe's kernel is not the host's; the host's own kernel makes it
// a failure; a host kernel nobody could read leaves it inconclusive.
func TestCrossCheckKernel(t *testing.T) {
	p := isolatingPolicy(t)
	const host = "6.18.44-fc-v782"
	// what the probe reports: its kernel, its kind, and its own verdict
	probe := func(kernel, kind string, inside report.Status) report.ProbeResult {
		return report.ProbeResult{Runtime: &report.RuntimeEvidence{Kernel: kernel, Kind: kind},
			Findings: []report.Finding{{Check: "runtime.isolation", Subject: "kata", Status: inside, Actual: "a VM, kernel " + kernel + ": a hypervisor is visible, but …"}}}
	}
	cases := []struct {
		name          string
		hostKernel    string
		hostErr       error
		res           report.ProbeResult
		inside, outer report.Status
		actual        string // in the inside finding
	}{
		{"a Kata guest kernel", host, nil, probe("6.1.62", "vm", report.Inconclusive), report.Pass, report.Pass, "not the host's " + host},
		{"runc on a VM node", host, nil, probe(host, "vm", report.Inconclusive), report.Fail, report.Fail, "plain container on a VM"},
		{"node unreadable", "", errors.New(`cannot read node n1: nodes "n1" is forbidden`), probe("6.1.62", "vm", report.Inconclusive), report.Inconclusive, report.Inconclusive, "could not be read"},
		{"engine did not say", "", nil, probe("6.1.62", "vm", report.Inconclusive), report.Inconclusive, report.Inconclusive, "could not be read"},
		{"gVisor stands on its own markers", host, nil, probe("4.4.0", "gvisor", report.Pass), report.Pass, report.Pass, "a VM, kernel 4.4.0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := c.res
			res.Findings = append([]report.Finding(nil), c.res.Findings...)
			CrossCheckKernel(p, "kata", c.hostKernel, c.hostErr, &res)
			if len(res.Findings) != 2 {
				t.Fatalf("findings %+v", res.Findings)
			}
			inside, outer := res.Findings[0], res.Findings[1]
			if inside.Status != c.inside || !strings.Contains(inside.Actual, c.actual) {
				t.Errorf("inside: %s %q, want %s %q", inside.Status, inside.Actual, c.inside, c.actual)
			}
			if outer.Subject != HostKernelSubject || outer.Status != c.outer {
				t.Errorf("host kernel: %+v, want %s", outer, c.outer)
			}
			if (inside.Status == report.Fail || inside.Status == report.Inconclusive) && inside.Fix == "" && c.inside != report.Inconclusive {
				t.Errorf("inside %s without a fix", inside.Status)
			}
			if outer.Status != report.Pass && outer.Fix == "" {
				t.Errorf("host kernel %s without a fix", outer.Status)
			}
		})
	}
}

// isolatingPolicy declares two classes that each isolate the kernel.
func isolatingPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	p, err := policy.Load([]byte(`apiVersion: sandprobe.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: rt}
spec:
  selector: {matchLabels: {sandbox: "true"}}
  identity: {uid: 65532, gid: 65532}
  runtime: {classNames: [gvisor, kata]}
`))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
