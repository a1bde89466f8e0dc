package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/audit"
	"github.com/sandprobe/sandprobe/egresslog"
	"github.com/sandprobe/sandprobe/report"
)

// egressUsageOptions are the flags of `sandprobe egress-usage`.
type egressUsageOptions struct {
	policyPath string
	logs       stringList
	format     string
	unusedDays int
	workers    int
	listed     int
	out        outputs
	lf         logFlags
}

// cmdEgressUsage is `sandprobe egress-usage`: the proxy's record (or the
// flows) held against the policy — each allowance's use, the unused ones
// and the risky wildcards with their reasons, what the proxy denied, and
// what the policy would block (the audit stage before enforcing it).
func (a *app) cmdEgressUsage(fs *pflag.FlagSet) runFunc {
	var o egressUsageOptions
	fs.StringVar(&o.policyPath, "policy", "", "the SandboxPolicy whose allowances are judged (a new or narrowed one: what it would block)")
	fs.Var(&o.logs, "log", "a proxy log or flow export (Squid access.log, tinyproxy, the JSON audit, Envoy, Hubble JSON; - for stdin); repeatable, rotated files too")
	fs.StringVar(&o.format, "record-format", "auto", "the format of the --log files: auto (sniffed from each file's first lines), squid, squid-common, squid-combined, tinyproxy, json, envoy or hubble")
	fs.IntVar(&o.unusedDays, "unused-days", 30, "an allowance with no request in this many days of the record is a finding")
	fs.IntVar(&o.workers, "workers", 0, "goroutines that parse (default: every core)")
	fs.IntVar(&o.listed, "list", 20, "text output: how many denied and would-block destinations to list (the JSON report holds up to 1000)")
	o.out.register(fs)
	o.lf.register(fs)
	return func(ctx context.Context, _ []string) int {
		fail := func(code int, format string, args ...any) int {
			fmt.Fprintf(a.stderr, "sandprobe egress-usage: "+format+"\n", args...)
			return code
		}
		if err := o.out.check(); err != nil {
			return fail(report.ExitBadInput, "%v", err)
		}
		logger, err := o.lf.logger(a.stderr)
		if err != nil {
			return fail(report.ExitBadInput, "%v", err)
		}
		if len(o.logs) == 0 {
			return fail(report.ExitBadInput, "--log: give at least one proxy log or flow export")
		}
		if o.unusedDays <= 0 {
			return fail(report.ExitBadInput, "--unused-days: want a positive number of days, got %d", o.unusedDays)
		}
		format, err := egresslog.ParseFormat(o.format)
		if err != nil {
			return fail(report.ExitBadInput, "--record-format: %v", err)
		}
		p, _, ok := a.loadPolicy(o.policyPath)
		if !ok {
			return report.ExitBadInput
		}
		o.out.policy = p
		var sources []audit.Source
		for _, l := range o.logs {
			if l != "-" {
				if fi, err := os.Stat(l); err != nil {
					return fail(report.ExitBadInput, "--log %s: %v", l, pathErr(err))
				} else if fi.IsDir() {
					return fail(report.ExitBadInput, "--log %s: is a directory", l)
				}
			}
			sources = append(sources, audit.FileSource(l, format, a.stdin))
		}
		start := time.Now()
		tally, used, err := audit.Read(ctx, sources, o.workers)
		if err != nil {
			return fail(report.ExitCouldNotRun, "%s", oneLineErr(err))
		}
		usage, findings := audit.Judge(p, tally, used, audit.Options{UnusedDays: o.unusedDays})
		run := report.Run{Policy: p.Metadata.Name, Backend: "egress-usage", StartedAt: start.UTC(),
			Findings: findings, EgressUsage: usage}
		stampRun(&run)
		run.Seconds = time.Since(start).Seconds()
		run.Phases = map[string]float64{"egress-usage": run.Seconds}
		var records int64
		for _, s := range used {
			records += s.Records
		}
		logger.Debug("egress-usage done", "records", records, "seconds", run.Seconds)
		if o.out.format == "text" {
			if err := writeUsageText(a.stdout, run, o.listed); err != nil {
				return fail(report.ExitCouldNotRun, "write report: %v", err)
			}
			err = o.out.writeFiles(ctx, run, nil, nil)
		} else {
			err = o.out.write(ctx, a, run, o.lf.verbose)
		}
		if err != nil {
			return fail(report.ExitCouldNotRun, "%v", err)
		}
		return run.ExitCode()
	}
}

func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// writeUsageText is egress-usage's report for people: the allowances with
// their use, the findings, what the proxy denied and what the policy
// would block.
func writeUsageText(w io.Writer, run report.Run, listed int) error {
	u := run.EgressUsage
	var b strings.Builder
	var records int64
	var names []string
	for _, s := range u.Sources {
		records += s.Records
		names = append(names, fmt.Sprintf("%s (%s, %d records)", s.Name, s.Format, s.Records))
	}
	fmt.Fprintf(&b, "egress record of policy %q: %d records from %s to %s in %s\n", run.Policy, records, stampOrDash(u.From), stampOrDash(u.To), strings.Join(names, ", "))
	switch {
	case u.ProbeRecords > 0:
		fmt.Fprintf(&b, "the probe's own marked attempts (%d) are left out\n", u.ProbeRecords)
	case u.Unmarked:
		b.WriteString("this record keeps no User-Agent or proxy user: the probe's own attempts cannot be told apart and are counted\n")
	}
	b.WriteString("\nALLOWANCES\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ALLOWANCE\tREQUESTS\tBYTES OUT\tBYTES IN\tLAST USE\tSANDBOXES\tVERDICT")
	for _, a := range u.Allowances {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\n", audit.HostPort(a.Host, a.Port), a.Requests, bytesCol(a.BytesOut), bytesCol(a.BytesIn), stampOrDash(a.LastUse), a.SandboxCount, strings.ToUpper(string(a.Verdict)))
	}
	tw.Flush()
	b.WriteString("\nFINDINGS\n")
	blocked := 0
	for _, f := range run.Findings {
		if f.Status == report.Pass {
			continue
		}
		if f.Check == audit.CheckWouldBlock && f.Status == report.Fail {
			blocked++ // listed in the table below
			continue
		}
		fmt.Fprintf(&b, "%s %s %s: %s\n", strings.ToUpper(string(f.Status)), f.Check, f.Subject, f.Actual)
		if f.Fix != "" {
			fmt.Fprintf(&b, "    %s\n", f.Fix)
		}
	}
	if blocked > 0 {
		fmt.Fprintf(&b, "FAIL %s: %d (sandbox, destination) pairs reached in the record would be blocked by this policy (listed below)\n", audit.CheckWouldBlock, u.WouldBlockTotal)
	}
	c := run.Counts()
	fmt.Fprintf(&b, "%d pass, %d fail, %d inconclusive\n", c.Pass, c.Fail, c.Inconclusive)
	uses := func(title string, list []report.DestinationUse, total int) {
		fmt.Fprintf(&b, "\n%s (%d of %d)\n", title, min(listed, len(list)), total)
		if len(list) == 0 {
			return
		}
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SANDBOX\tDESTINATION\tCOUNT\tFIRST SEEN\tLAST SEEN")
		for _, d := range list[:min(listed, len(list))] {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", d.Sandbox, audit.HostPort(d.Host, d.Port), d.Count, stampOrDash(d.First), stampOrDash(d.Last))
		}
		tw.Flush()
	}
	uses("DENIED BY THE PROXY: what sandboxes keep trying", u.Denied, u.DeniedTotal)
	uses("WOULD BE BLOCKED by this policy: reached today, allowed by no allowance", u.WouldBlock, u.WouldBlockTotal)
	_, err := io.WriteString(w, b.String())
	return err
}

func stampOrDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func bytesCol(n int64) string {
	if n < 0 {
		return "?"
	}
	return fmt.Sprint(n)
}
