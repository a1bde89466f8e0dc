package probes

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/sandprobe/sandprobe/result"
)

func checkEmptyAtStart(_ context.Context, env *Env) []result.Finding {
	var out []result.Finding
	for _, dir := range env.Policy.Spec.Filesystem.EmptyAtStart {
		entries, err := os.ReadDir(dir)
		switch {
		case os.IsNotExist(err):
			out = append(out, fail(dir, "an empty directory", "does not exist", ""))
		case err != nil:
			out = append(out, errorf(dir, "cannot list: %s", errnoName(err)))
		case len(entries) > 0:
			names := make([]string, 0, 5)
			for _, e := range entries[:min(5, len(entries))] {
				names = append(names, e.Name())
			}
			more := ""
			if len(entries) > 5 {
				more = ", …"
			}
			out = append(out, fail(dir, "an empty directory", fmt.Sprintf("%d entries: %s%s", len(entries), strings.Join(names, ", "), more), describeDir(dir)))
		default:
			out = append(out, pass(dir, "an empty directory", "empty", describeDir(dir)))
		}
	}
	return out
}
