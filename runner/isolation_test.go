package runner

import (
	"strings"
	"testing"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

func TestHostKernelCheck(t *testing.T) {
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
