package runner

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// HostKernelSubject is the subject of the runner's half of runtime.isolation.
const HostKernelSubject = "host kernel"

// HostKernelCheck is the runner's half of runtime.isolation. From inside, a
// VM sandbox and a container on a VM node look alike (both see a hypervisor),
// and nothing inside can be trusted to say which kernel is the host's. The
// runner knows the host's kernel from outside — Docker: `docker info`
// KernelVersion; Kubernetes: node.status.nodeInfo.kernelVersion — and a
// sandbox whose runtime class promises gVisor or a VM but reports that very
// kernel release is a plain container on the host.
//
// class is the runtime class the probe was launched under ("" if unknown).
// It returns no finding when the host kernel is unknown or when the class
// (or, for an undeclared class, any declared class) promises no isolation.
func HostKernelCheck(p *policy.Policy, class, hostKernel string, res report.ProbeResult) (report.Finding, bool) {
	rt := p.Spec.Runtime
	if hostKernel == "" || len(rt.ClassNames) == 0 {
		return report.Finding{}, false
	}
	var kinds []string
	if slices.Contains(rt.ClassNames, class) {
		kinds = []string{rt.IsolationFor(class)}
	} else {
		for _, c := range rt.ClassNames {
			kinds = append(kinds, rt.IsolationFor(c))
		}
	}
	if slices.Contains(kinds, policy.IsolationNone) {
		return report.Finding{}, false
	}
	f := report.Finding{
		Check: "runtime.isolation", Subject: HostKernelSubject,
		Expected: fmt.Sprintf("a kernel other than the host's %s (%s isolates the kernel)", hostKernel, strings.Join(slices.Compact(slices.Sorted(slices.Values(kinds))), " or ")),
	}
	if res.Runtime == nil || res.Runtime.Kernel == "" {
		f.Status = report.Error
		f.Actual = "the probe reported no kernel release, so the host-kernel comparison could not run"
		f.Fix = "run a probe that reports its runtime evidence (sandprobe 0.x or later)"
		return f, true
	}
	f.Evidence = fmt.Sprintf("probe: kernel %s (kind %s); host: kernel %s", res.Runtime.Kernel, res.Runtime.Kind, hostKernel)
	if res.Runtime.Kernel == hostKernel {
		f.Status = report.Fail
		f.Actual = fmt.Sprintf("the sandbox runs the host's own kernel %s: it is a plain container, not isolated", hostKernel)
		rc := class
		if rc == "" {
			rc = "the declared class"
		}
		f.Fix = fmt.Sprintf("make runtime class %s run sandboxes under gVisor or a VM (a RuntimeClass handler of runsc or kata; docker: --runtime runsc), not under runc", rc)
		return f, true
	}
	f.Status = report.Pass
	f.Actual = fmt.Sprintf("kernel %s, not the host's", res.Runtime.Kernel)
	return f, true
}

// CrossCheckKernel adds the runner's half of runtime.isolation to a probe's
// result and settles what the probe could not settle alone. From inside, a
// hypervisor proves nothing: a plain container on a VM node sees one too. So
// the probe reports VM evidence as inconclusive, and only here, with the
// host's kernel read from outside, does it become a pass (the sandbox runs a
// kernel of its own) or a failure (it runs the host's). hostErr is why the
// host's kernel could not be read; then the verdict stays inconclusive.
func CrossCheckKernel(p *policy.Policy, class, hostKernel string, hostErr error, res *report.ProbeResult) {
	if hostErr != nil || hostKernel == "" {
		// Applies at all? Ask with a stand-in kernel.
		if _, ok := HostKernelCheck(p, class, "?", *res); !ok {
			return
		}
		why := "the host did not say"
		if hostErr != nil {
			why = hostErr.Error()
		}
		res.Findings = append(res.Findings, report.Finding{
			Check: "runtime.isolation", Subject: HostKernelSubject, Status: report.Inconclusive,
			Expected: "the host's kernel release, to compare with the probe's",
			Actual:   "cannot read the host's kernel (" + why + "): whether the sandbox runs a kernel of its own is unproven",
			Fix:      "let the runner read the host's kernel (Kubernetes: get on nodes for its service account)",
		})
		settleVM(res, report.Inconclusive, "the host's kernel could not be read, so a VM is unproven")
		return
	}
	f, ok := HostKernelCheck(p, class, hostKernel, *res)
	if !ok {
		return
	}
	res.Findings = append(res.Findings, f)
	switch f.Status {
	case report.Pass:
		settleVM(res, report.Pass, fmt.Sprintf("its kernel %s is not the host's %s: a VM of its own", res.Runtime.Kernel, hostKernel))
	case report.Fail:
		settleVM(res, report.Fail, fmt.Sprintf("the hypervisor it sees is the host's: it runs the host's own kernel %s, so it is a plain container on a VM", hostKernel))
	}
}

// settleVM turns the probe's inconclusive VM verdict into st.
func settleVM(res *report.ProbeResult, st report.Status, why string) {
	if res.Runtime == nil || res.Runtime.Kind != "vm" {
		return
	}
	for i := range res.Findings {
		f := &res.Findings[i]
		if f.Check != "runtime.isolation" || f.Subject == HostKernelSubject || f.Status != report.Inconclusive {
			continue
		}
		f.Status = st
		f.Actual = firstClause(f.Actual) + ": " + why
		switch st {
		case report.Pass:
			f.Fix = ""
		case report.Fail:
			f.Fix = "run the sandbox in a VM runtime (a RuntimeClass whose handler is kata or firecracker), not runc on a VM node"
		}
	}
}

// firstClause is what the probe saw ("a VM, kernel 6.1.62"), without its
// own reasoning.
func firstClause(s string) string {
	before, _, _ := strings.Cut(s, ": ")
	return before
}
