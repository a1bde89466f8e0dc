package probes

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/sandprobe/sandprobe/report"
)

// seccompModes names the values PR_GET_SECCOMP and /proc report.
var seccompModes = map[int]string{0: "disabled", 1: "strict", 2: "filter"}

func checkSeccomp(_ context.Context, env *Env) []report.Finding {
	v, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	if err != nil {
		return []report.Finding{errorf("", "prctl(PR_GET_SECCOMP): %v", err)}
	}
	evidence := fmt.Sprintf("prctl(PR_GET_SECCOMP) = %d", v)
	if line, ok := procStatus()["Seccomp"]; ok {
		evidence += "; /proc/self/status Seccomp:\t" + line
	}
	exp := fmt.Sprintf("seccomp filter mode (%s profile)", env.Policy.Spec.Seccomp)
	act := "seccomp " + seccompModes[v]
	if v != 2 {
		return []report.Finding{fail("", exp, act+": every system call is open to the sandbox", evidence)}
	}
	return []report.Finding{pass("", exp, act, evidence)}
}
