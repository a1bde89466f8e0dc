package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/probes"
	"github.com/sandprobe/sandprobe/report"
)

func (a *app) cmdValidate(fs *pflag.FlagSet) runFunc {
	var (
		file      string
		effective bool
	)
	fs.StringVarP(&file, "filename", "f", "", "the policy file to check (- for stdin)")
	fs.StringVar(&file, "policy", "", "same as -f")
	fs.BoolVar(&effective, "effective", false, "print the policy with every default filled in and every weakening it declares; exit 2 if a weakening is not written in the file")
	return func(context.Context, []string) int {
		if file == "" {
			fmt.Fprintln(a.stderr, "sandprobe validate: -f is required (the policy file to check, or - for stdin)")
			return report.ExitBadInput
		}
		var (
			raw []byte
			err error
		)
		if file == "-" {
			raw, err = io.ReadAll(io.LimitReader(a.stdin, policy.MaxPolicyBytes+1))
		} else {
			raw, err = policy.ReadFile(file)
		}
		if err != nil {
			fmt.Fprintln(a.stderr, err)
			return report.ExitBadInput
		}
		p, written, err := policy.LoadWritten(raw)
		if err != nil {
			a.printPolicyProblems(file, err)
			return report.ExitBadInput
		}
		if !effective {
			a.printValid(file, p, written)
			return report.ExitOK
		}
		return a.printEffective(file, p, written)
	}
}

// printValid says the policy is valid, in one line, and warns of every
// weakening it does not write and of what it still cannot prove.
func (a *app) printValid(file string, p *policy.Policy, written policy.Written) {
	weak := p.Weakenings()
	s := p.Spec
	fmt.Fprintf(a.stdout, "%s: valid SandboxPolicy %q — %d allowances, %d must-fail targets (+ metadata %s on %s), %d writable paths, %d tools, %s\n",
		file, p.Metadata.Name, len(s.Egress.Allow), len(s.Egress.MustFail.Hosts)+len(s.Egress.MustFail.IPs), strings.Join(s.Egress.Metadata.Addresses, ", "), joinInts(s.Egress.Metadata.Ports),
		len(s.Filesystem.Writable), len(s.Image.Tools), weakeningsText(weak, written))
	for _, w := range weak {
		if !written.Has(w.Path) {
			fmt.Fprintf(a.stderr, "%s: warning: %s: %s is not written in the policy (%s): write %s: %s to declare it\n", file, w.Path, w.Value, w.Means, lastField(w.Path), w.Value)
		}
	}
	// What a valid policy still cannot prove, or where it will be refused.
	for _, w := range append(append(p.Warnings(), probes.EgressWarnings(p)...), probeImageWarnings(p)...) {
		fmt.Fprintf(a.stderr, "%s: warning: %s\n", file, w)
	}
}

// printEffective prints the policy with every default filled in and its
// weakenings; bad input when one is not written in the file.
func (a *app) printEffective(file string, p *policy.Policy, written policy.Written) int {
	weak := p.Weakenings()
	implicit := 0
	for _, w := range weak {
		if !written.Has(w.Path) {
			implicit++
		}
	}
	out, err := p.Effective()
	if err != nil {
		fmt.Fprintf(a.stderr, "sandprobe validate: %v\n", err)
		return report.ExitCouldNotRun
	}
	fmt.Fprintf(a.stdout, "# %s with every default filled in (sandprobe validate --effective)\n", file)
	a.stdout.Write(out)
	if len(weak) == 0 {
		fmt.Fprintln(a.stdout, "# weakenings: none — every field holds the strictest choice")
	}
	for i, w := range weak {
		if i == 0 {
			fmt.Fprintln(a.stdout, "# weakenings (less strict than the strictest choice):")
		}
		where := "NOT WRITTEN in the policy"
		if line := written[w.Path]; line > 0 {
			where = fmt.Sprintf("written at line %d", line)
		}
		fmt.Fprintf(a.stdout, "#   %s: %s — %s (%s)\n", w.Path, w.Value, w.Means, where)
	}
	if implicit > 0 {
		for _, w := range weak {
			if !written.Has(w.Path) {
				fmt.Fprintf(a.stderr, "%s: %s: %s is a weakening the policy does not write (%s): write %s: %s to declare it\n", file, w.Path, w.Value, w.Means, lastField(w.Path), w.Value)
			}
		}
		return report.ExitBadInput
	}
	return report.ExitOK
}

// probeImageWarnings says at validate time what render would refuse later:
// a policy that requires digests (the default) names no pinned probe image.
func probeImageWarnings(p *policy.Policy) []string {
	if !p.Spec.Image.RequireDigest || strings.Contains(p.Spec.Probe.Image, "@sha256:") {
		return nil
	}
	img := p.Spec.Probe.Image
	if img == "" {
		img = policy.DefaultProbeImage + " (the default)"
	}
	return []string{"spec.probe.image: spec.image.requireDigest is set but the probe image " + img + " is not pinned by digest: render refuses it unless --probe-image names one as REPO@sha256:DIGEST, and a probe pod from it breaks the policy's own drift.pod.image-digest; set spec.probe.image to REPO@sha256:DIGEST"}
}

// weakeningsText names the weakenings the policy declares (written in the
// file) for the summary line: a reviewer sees what is loosened without
// --effective.
func weakeningsText(weak []policy.Weakening, written policy.Written) string {
	var named []string
	for _, w := range weak {
		if written.Has(w.Path) {
			named = append(named, w.Path+": "+w.Value)
		}
	}
	if len(named) == 0 {
		return "no weakenings declared"
	}
	return fmt.Sprintf("%d weakening(s) declared (%s)", len(named), strings.Join(named, "; "))
}

// lastField is the last component of a YAML path, for "write X: Y".
func lastField(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '.' {
			return path[i+1:]
		}
	}
	return path
}

func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ", ")
}
