package probes

import (
	"context"
	"fmt"

	"github.com/sandprobe/sandprobe/result"
)

// checkNoNewPrivs asks the kernel with prctl: gVisor does not show
// NoNewPrivs in /proc/self/status, so the text is evidence, not the answer.
func checkNoNewPrivs(_ context.Context, _ *Env) []result.Finding {
	v, err := noNewPrivs()
	if err != nil {
		return []result.Finding{errorf("", "prctl(PR_GET_NO_NEW_PRIVS): %v", err)}
	}
	evidence := fmt.Sprintf("prctl(PR_GET_NO_NEW_PRIVS) = %d", v)
	if line, ok := procStatus()["NoNewPrivs"]; ok {
		evidence += "; /proc/self/status NoNewPrivs:\t" + line
	}
	if v != 1 {
		return []result.Finding{fail("", "no_new_privs set", "no_new_privs off: a setuid binary could raise privileges", evidence)}
	}
	return []result.Finding{pass("", "no_new_privs set", "no_new_privs set", evidence)}
}
