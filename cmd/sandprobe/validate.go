package main

import (
	"context"
	"fmt"

	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
)

func (a *app) cmdValidate(_ context.Context, args []string) int {
	fs := a.flagSet("validate", "-f POLICY")
	var file string
	fs.StringVar(&file, "f", "", "the policy file to check (- for stdin)")
	fs.StringVar(&file, "policy", "", "same as -f")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	p, _, ok := a.loadPolicy(file)
	if !ok {
		return report.ExitBadInput
	}
	s := p.Spec
	fmt.Fprintf(a.stdout, "%s: valid SandboxPolicy %q — %d allowances, %d must-fail targets (+ metadata %s), %d writable paths, %d tools\n",
		file, p.Metadata.Name, len(s.Egress.Allow), len(s.Egress.MustFail.Hosts)+len(s.Egress.MustFail.IPs), s.Egress.Metadata.Address,
		len(s.Filesystem.Writable), len(s.Image.Tools))
	for _, w := range append(p.Warnings(), probes.EgressWarnings(p)...) {
		fmt.Fprintf(a.stdout, "%s: warning: %s\n", file, w)
	}
	return report.ExitOK
}
