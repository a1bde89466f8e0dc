package probes

import (
	"context"
	"fmt"
	"os"

	"github.com/sandprobe/sandprobe/result"
)

// checkServiceAccountToken looks for the token file; it never reads it.
func checkServiceAccountToken(_ context.Context, env *Env) []result.Finding {
	path := env.Policy.Spec.TokenPath
	fi, err := os.Stat(path)
	switch {
	case os.IsNotExist(err):
		return []result.Finding{pass(path, "no token file", "absent", "stat: no such file")}
	case err != nil:
		return []result.Finding{fail(path, "no token file", "cannot tell: "+errnoName(err), "a directory on the way is not searchable; a token may be there")}
	}
	readable := "unreadable by this uid"
	if f, err := os.Open(path); err == nil {
		f.Close()
		readable = "readable by this uid"
	}
	return []result.Finding{fail(path, "no token file", fmt.Sprintf("a token file is mounted (%d bytes, %s)", fi.Size(), readable),
		"the file's content was not read")}
}
