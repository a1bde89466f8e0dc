package local

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sandprobe/sandprobe/policy"
)

// Sabotages break one property of a sandbox each. `sandprobe run --backend
// local --sabotage NAME` uses them to show what a failing check looks like;
// they are the same regressions the tests prove every check catches.
var Sabotages = map[string]struct {
	What  string
	Apply func(*Sandbox)
}{
	"writable-root": {"the root filesystem stays read-write", func(s *Sandbox) { s.ReadOnlyRoot = false }},
	"root-uid":      {"the sandbox runs as uid 0", func(s *Sandbox) { s.UID, s.GID = 0, 0 }},
	"keep-cap": {"NET_RAW stays in the bounding and ambient sets", func(s *Sandbox) {
		s.KeepCaps.Bounding = append(s.KeepCaps.Bounding, "NET_RAW")
		s.KeepCaps.Ambient = append(s.KeepCaps.Ambient, "NET_RAW")
	}},
	"nnp-off":         {"no_new_privs is not set", func(s *Sandbox) { s.NoNewPrivs = false }},
	"seccomp-off":     {"no seccomp filter", func(s *Sandbox) { s.Seccomp = false }},
	"token":           {"a service-account token is mounted", func(s *Sandbox) { s.seed(policy.DefaultTokenPath, "eyJhbGciOiJSUzI1NiJ9.demo") }},
	"env-secret":      {"OPENAI_API_KEY holds a real-looking key", func(s *Sandbox) { s.Env = append(s.Env, "OPENAI_API_KEY=sk-demo-not-a-real-key") }},
	"dirty-workspace": {"the workspace holds a previous job's file", func(s *Sandbox) { s.seed("/workspace/previous-job.patch", "diff --git") }},
}

// Sabotage applies the named sabotages (comma-separated).
func (s *Sandbox) Sabotage(list string) error {
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		sab, ok := Sabotages[name]
		if !ok {
			return fmt.Errorf("unknown sabotage %q (known: %s)", name, strings.Join(SabotageNames(), ", "))
		}
		sab.Apply(s)
	}
	return nil
}

// SabotageNames lists the sabotages in order.
func SabotageNames() []string {
	out := make([]string, 0, len(Sabotages))
	for k := range Sabotages {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (s *Sandbox) seed(path, content string) {
	if s.Files == nil {
		s.Files = map[string]string{}
	}
	s.Files[path] = content
}
