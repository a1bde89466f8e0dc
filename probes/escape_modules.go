package probes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandprobe/sandprobe/result"
)

func checkModuleLoad(_ context.Context, env *Env) []result.Finding {
	sets, err := capSets()
	if err != nil {
		return []result.Finding{errorf("", "%v", err)}
	}
	held := (sets["CapEff"]|sets["CapPrm"])&(1<<capSysModule) != 0
	return []result.Finding{judgeModuleLoad("/proc", held, underGVisor(env))}
}

// judgeModuleLoad: a process can load a kernel module when the kernel takes
// modules at all (/proc/modules exists), has not locked loading for good
// (kernel.modules_disabled is not 1), and the process holds CAP_SYS_MODULE
// (effective, or permitted and so one capset(2) away). Nothing is loaded.
func judgeModuleLoad(procDir string, capModule, gvisor bool) result.Finding {
	const exp = "this process cannot load a kernel module"
	if gvisor {
		return pass("", exp, "gVisor's kernel has no loadable modules", "the Sentry implements the system calls; init_module never reaches the host")
	}
	_, err := os.Stat(filepath.Join(procDir, "modules"))
	support := err == nil
	disabled := "absent"
	if b, err := os.ReadFile(filepath.Join(procDir, "sys/kernel/modules_disabled")); err == nil {
		disabled = strings.TrimSpace(string(b))
	}
	evidence := fmt.Sprintf("/proc/modules %s; kernel.modules_disabled %s; CAP_SYS_MODULE %s (effective or permitted)",
		map[bool]string{true: "present", false: "absent"}[support], disabled, heldWord(capModule))
	switch {
	case !support:
		return pass("", exp, "the kernel has no loadable module support", evidence)
	case disabled == "1":
		return pass("", exp, "module loading is disabled until reboot (kernel.modules_disabled = 1)", evidence)
	case !capModule:
		return pass("", exp, "the kernel takes modules, but this process lacks CAP_SYS_MODULE", evidence)
	}
	return fail("", exp, "the kernel takes modules and this process holds CAP_SYS_MODULE", evidence)
}
