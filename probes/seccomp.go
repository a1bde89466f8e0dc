package probes

import (
	"context"
	"fmt"

	"github.com/sandprobe/sandprobe/result"
)

// seccompModes names the values PR_GET_SECCOMP and /proc report.
var seccompModes = map[int]string{0: "disabled", 1: "strict", 2: "filter"}

func checkSeccomp(_ context.Context, env *Env) []result.Finding {
	v, err := seccompMode()
	if err != nil {
		return []result.Finding{errorf("", "prctl(PR_GET_SECCOMP): %v", err)}
	}
	evidence := fmt.Sprintf("prctl(PR_GET_SECCOMP) = %d", v)
	if line, ok := procStatus()["Seccomp"]; ok {
		evidence += "; /proc/self/status Seccomp:\t" + line
	}
	exp := fmt.Sprintf("seccomp filter mode (%s profile)", env.Policy.Spec.Seccomp)
	act := "seccomp " + seccompModes[v]
	if v != 2 {
		if env.Runtime != nil && env.Runtime.Kind == KindGVisor {
			// gVisor answers system calls in its own user-space kernel (the
			// Sentry), which runs under runsc's seccomp filter on the host; the
			// pod's profile is loaded inside only with runsc --oci-seccomp.
			// The check reports what it sees and names that fix.
			f := fail("", exp, act+" inside gVisor: the sandbox's own seccomp profile is not applied", evidence+"; runtime gvisor: runsc loads the container's seccomp profile only with --oci-seccomp; the Sentry's own filter still confines gVisor on the host")
			f.Fix = "add --oci-seccomp to runsc's options (containerd: runsc.toml [runsc_config] oci-seccomp = \"true\"; docker: runtimeArgs in daemon.json) so the pod's RuntimeDefault profile applies inside gVisor too; if gVisor's own filtering is the boundary you accept, say so in the policy with spec.seccomp: Unconfined"
			return []result.Finding{f}
		}
		return []result.Finding{fail("", exp, act+": every system call is open to the sandbox", evidence)}
	}
	return []result.Finding{pass("", exp, act, evidence)}
}
