package probes

import (
	"context"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/sandprobe/sandprobe/result"
)

// checkEnvSecrets names every variable that looks like a credential. A
// finding carries the name only: the value never leaves this function.
func checkEnvSecrets(_ context.Context, env *Env) []result.Finding {
	sec := env.Policy.Spec.Secrets
	var out []result.Finding
	checked := 0
	for _, kv := range env.Environ {
		name, value, _ := strings.Cut(kv, "=")
		checked++
		pattern := matchSecretName(name, sec.EnvNamePatterns)
		if pattern == "" || value == "" {
			continue
		}
		if slices.Contains(sec.Placeholders, value) {
			out = append(out, pass(name, "no credential in the environment", "holds a declared placeholder", "name matches "+pattern))
			continue
		}
		out = append(out, fail(name, "no credential in the environment", "set to a value that is not a declared placeholder",
			fmt.Sprintf("name matches %s; the value is not reported", pattern)))
	}
	if len(out) == 0 {
		out = append(out, pass("", "no credential in the environment", "none",
			fmt.Sprintf("%d variables checked against %s", checked, strings.Join(sec.EnvNamePatterns, " "))))
	}
	return out
}

// matchSecretName returns the first pattern the name matches, case-insensitively.
func matchSecretName(name string, patterns []string) string {
	up := strings.ToUpper(name)
	for _, p := range patterns {
		if ok, _ := path.Match(strings.ToUpper(p), up); ok {
			return p
		}
	}
	return ""
}

func getenv(k string) string { return os.Getenv(k) }
