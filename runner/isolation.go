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
