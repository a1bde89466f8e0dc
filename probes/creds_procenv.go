package probes

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/sandprobe/sandprobe/result"
)

const procEnvironExp = "no other process's environment readable with a credential in it"

// checkProcEnviron reads the environment of every other process the
// sandbox can see (/proc/PID/environ: the kernel allows it for a process
// of the same uid, or with CAP_SYS_PTRACE) and names each one that holds a
// credential-looking variable (spec.secrets.envNamePatterns) with a value
// that is not a declared placeholder and not the probe's own (the probe's
// children inherit its environment; creds.env-secrets judges that). A
// sidecar or agent process of the same uid carrying a token is a
// credential in reach. Names only: no value leaves this function.
func checkProcEnviron(_ context.Context, env *Env) []result.Finding {
	sec := env.Policy.Spec.Secrets
	own := make(map[string]bool, len(env.Environ))
	for _, kv := range env.Environ {
		own[kv] = true
	}
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return []result.Finding{errorf("/proc", "list /proc: %s", errnoName(err))}
	}
	var out []result.Finding
	visible, readable := 0, 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		visible++
		raw, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue // EACCES: another uid's, as it should be; ESRCH: gone
		}
		readable++
		var names []string
		for _, kv := range bytes.Split(raw, []byte{0}) {
			name, value, ok := strings.Cut(string(kv), "=")
			if !ok || value == "" || own[string(kv)] || slices.Contains(sec.Placeholders, value) {
				continue
			}
			if matchSecretName(name, sec.EnvNamePatterns) != "" && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
		if len(names) == 0 {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
		subject := fmt.Sprintf("pid %d (%s)", pid, strings.TrimSpace(string(comm)))
		ev := "the values are not reported"
		if st, err := os.ReadFile("/proc/" + e.Name() + "/status"); err == nil {
			for _, line := range strings.Split(string(st), "\n") {
				if uid, ok := strings.CutPrefix(line, "Uid:"); ok {
					ev = "process uid " + strings.Fields(uid)[0] + "; " + ev
				}
			}
		}
		out = append(out, fail(subject, procEnvironExp, "its environment is readable by uid "+strconv.Itoa(os.Getuid())+" and holds "+strings.Join(names, ", "), ev))
	}
	if len(out) == 0 {
		out = append(out, pass("", procEnvironExp, "none",
			fmt.Sprintf("%d other processes visible, %d environments readable by uid %d, none with a credential-looking variable (%s) the probe does not hold itself", visible, readable, os.Getuid(), strings.Join(sec.EnvNamePatterns, " "))))
	}
	return out
}
