package probes

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/sandprobe/sandprobe/result"
)

func checkUID(_ context.Context, env *Env) []result.Finding {
	return checkID("uid", env.Policy.Spec.Identity.UID, os.Getuid(), os.Geteuid(), "getuid/geteuid")
}

func checkGID(_ context.Context, env *Env) []result.Finding {
	return checkID("gid", env.Policy.Spec.Identity.GID, os.Getgid(), os.Getegid(), "getgid/getegid")
}

// checkID compares a real and an effective id with the declared one; an id
// of 0 is called out, since that is root inside the sandbox.
func checkID(kind string, want int64, real, eff int, evidence string) []result.Finding {
	exp := fmt.Sprintf("%s %d", kind, want)
	act := fmt.Sprintf("%s %d", kind, real)
	if eff != real {
		act += fmt.Sprintf(" (effective %d)", eff)
	}
	if int64(real) == want && int64(eff) == want {
		return []result.Finding{pass("", exp, act, evidence)}
	}
	f := fail("", exp, act, evidence)
	if kind == "uid" && (real == 0 || eff == 0) {
		f.Actual += ": root inside the sandbox"
	}
	return []result.Finding{f}
}

func checkGroups(_ context.Context, env *Env) []result.Finding {
	id := env.Policy.Spec.Identity
	allowed := []int64{id.GID}
	allowed = append(allowed, id.SupplementalGroups...)
	if id.FSGroup != nil {
		allowed = append(allowed, *id.FSGroup)
	}
	groups, err := os.Getgroups()
	if err != nil {
		return []result.Finding{errorf("", "getgroups: %v", err)}
	}
	var extra []string
	for _, g := range groups {
		if !slices.Contains(allowed, int64(g)) {
			extra = append(extra, strconv.Itoa(g))
		}
	}
	exp := "only groups " + joinInts(allowed)
	act := "groups " + joinInts(toInt64(groups))
	if len(groups) == 0 {
		act = "no supplementary groups"
	}
	if len(extra) > 0 {
		f := fail("", exp, act, "getgroups; not declared: "+joinOr(extra, ""))
		if slices.Contains(groups, 0) {
			f.Actual += " (includes the root group 0)"
		}
		return []result.Finding{f}
	}
	return []result.Finding{pass("", exp, act, "getgroups")}
}

func toInt64(in []int) []int64 {
	out := make([]int64, len(in))
	for i, v := range in {
		out[i] = int64(v)
	}
	return out
}

func joinInts(in []int64) string {
	s := make([]string, len(in))
	for i, v := range in {
		s[i] = strconv.FormatInt(v, 10)
	}
	return joinOr(s, "none")
}
