package probes

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/sandprobe/sandprobe/report"
)

func checkUID(_ context.Context, env *Env) []report.Finding {
	want := env.Policy.Spec.Identity.UID
	uid, euid := os.Getuid(), os.Geteuid()
	exp := fmt.Sprintf("uid %d", want)
	act := fmt.Sprintf("uid %d", uid)
	if euid != uid {
		act += fmt.Sprintf(" (effective %d)", euid)
	}
	if int64(uid) != want || int64(euid) != want {
		f := fail("", exp, act, "getuid/geteuid")
		if uid == 0 || euid == 0 {
			f.Actual += ": root inside the sandbox"
		}
		return []report.Finding{f}
	}
	return []report.Finding{pass("", exp, act, "getuid/geteuid")}
}

func checkGID(_ context.Context, env *Env) []report.Finding {
	want := env.Policy.Spec.Identity.GID
	gid, egid := os.Getgid(), os.Getegid()
	exp := fmt.Sprintf("gid %d", want)
	act := fmt.Sprintf("gid %d", gid)
	if egid != gid {
		act += fmt.Sprintf(" (effective %d)", egid)
	}
	if int64(gid) != want || int64(egid) != want {
		return []report.Finding{fail("", exp, act, "getgid/getegid")}
	}
	return []report.Finding{pass("", exp, act, "getgid/getegid")}
}

func checkGroups(_ context.Context, env *Env) []report.Finding {
	id := env.Policy.Spec.Identity
	allowed := []int64{id.GID}
	allowed = append(allowed, id.SupplementalGroups...)
	if id.FSGroup != nil {
		allowed = append(allowed, *id.FSGroup)
	}
	groups, err := os.Getgroups()
	if err != nil {
		return []report.Finding{errorf("", "getgroups: %v", err)}
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
		return []report.Finding{f}
	}
	return []report.Finding{pass("", exp, act, "getgroups")}
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
