package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/audit"
	"github.com/sandprobe/sandprobe/egresslog"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/kube"
)

// usageFlags name the long record (proxy logs, flow exports) a run holds
// against the policy besides its probe, for the page and the metrics:
// each allowance's use beside its last verdict, what the proxy denied,
// what the policy would block (egress-usage's, without its findings: a
// run's verdict stays about the sandbox).
type usageFlags struct {
	logs       stringList
	format     string
	unusedDays int
}

func (f *usageFlags) register(fs *pflag.FlagSet) {
	fs.Var(&f.logs, "egress-log", "a proxy log or flow export to read after each run, as egress-usage does: each allowance's use beside its verdict on the page (--html) and in the metrics; repeatable")
	fs.StringVar(&f.format, "egress-log-format", "auto", "the --egress-log format: auto, squid, squid-common, squid-combined, tinyproxy, json, envoy or hubble")
	fs.IntVar(&f.unusedDays, "unused-days", 30, "with --egress-log: an allowance with no request in this many days of the record is named unused")
}

func (f *usageFlags) check() error {
	if _, err := egresslog.ParseFormat(f.format); err != nil {
		return fmt.Errorf("--egress-log-format: %w", err)
	}
	if f.unusedDays <= 0 {
		return fmt.Errorf("--unused-days: want a positive number of days, got %d", f.unusedDays)
	}
	for _, l := range f.logs {
		fi, err := os.Stat(l)
		if err != nil {
			return fmt.Errorf("--egress-log %s: %w", l, unwrapPath(err))
		}
		if fi.IsDir() {
			return fmt.Errorf("--egress-log %s: is a directory", l)
		}
	}
	return nil
}

// attach reads the record and puts its usage on the run; a record that
// cannot be read is a note, not a verdict.
func (f *usageFlags) attach(ctx context.Context, p *policy.Policy, run *report.Run) {
	if len(f.logs) == 0 {
		return
	}
	format, _ := egresslog.ParseFormat(f.format)
	var sources []audit.Source
	for _, l := range f.logs {
		sources = append(sources, audit.FileSource(l, format, nil))
	}
	tally, used, err := audit.Read(ctx, sources, 0)
	if err != nil {
		run.Notes = append(run.Notes, "egress record: "+oneLineErr(err))
		if tally == nil {
			return
		}
	}
	run.EgressUsage, _ = audit.Judge(p, tally, used, audit.Options{UnusedDays: f.unusedDays})
}

// proxyLogFlags say where the proxy's record is, for egress.audit-trail:
// after each probe, every attempt it made through the proxy is looked up
// in the record written during the run.
type proxyLogFlags struct {
	path, format, client string
	parsed               egresslog.Format
}

func (f *proxyLogFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.path, "proxy-log", "", "the forward proxy's access log: a FILE (Squid, tinyproxy, the JSON audit, Envoy), or with --backend kube pod/NAMESPACE/POD[/CONTAINER] (POD may be a label selector, app=egress-proxy); after the probe, every attempt it made through the proxy must be in it with the decision the probe saw (egress.audit-trail); a log rotated during the run is inconclusive")
	fs.StringVar(&f.format, "proxy-log-format", "auto", "the --proxy-log format: auto, squid, squid-common, squid-combined, tinyproxy, json or envoy")
	fs.StringVar(&f.client, "proxy-client", "", "the probe's address as the proxy sees it, to tell its attempts from other sandboxes' in a record that keeps no User-Agent (tinyproxy)")
}

// check validates the flags against the policy and the backend.
func (f *proxyLogFlags) check(p *policy.Policy, backend string) error {
	if f.path == "" {
		return nil
	}
	if p.Spec.Egress.Proxy == "" {
		return fmt.Errorf("--proxy-log: the policy declares no spec.egress.proxy, so no attempt goes through one")
	}
	format, err := egresslog.ParseFormat(f.format)
	if err != nil {
		return fmt.Errorf("--proxy-log-format: %w", err)
	}
	if format == egresslog.FormatHubble {
		return fmt.Errorf("--proxy-log-format: hubble flows are no proxy's record (egress-usage reads them)")
	}
	f.parsed = format
	if rest, ok := strings.CutPrefix(f.path, "pod/"); ok {
		if backend != "kube" {
			return fmt.Errorf("--proxy-log %s: a pod's log is read with --backend kube", f.path)
		}
		if parts := strings.Split(rest, "/"); len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
			return fmt.Errorf("--proxy-log: want pod/NAMESPACE/POD[/CONTAINER], got %q", f.path)
		}
		return nil
	}
	fi, err := os.Stat(f.path)
	if err != nil {
		return fmt.Errorf("--proxy-log %s: %w", f.path, unwrapPath(err))
	}
	if fi.IsDir() {
		return fmt.Errorf("--proxy-log %s: is a directory", f.path)
	}
	return nil
}

// trail builds the audit trail's reader, or nil without --proxy-log.
func (f *proxyLogFlags) trail(kc *kubeClients) (*runner.Trail, error) {
	if f.path == "" {
		return nil, nil
	}
	t := &runner.Trail{Record: runner.FileRecord{Path: f.path}, Format: f.parsed, Client: f.client}
	if rest, ok := strings.CutPrefix(f.path, "pod/"); ok {
		if kc == nil || kc.config == nil {
			return nil, fmt.Errorf("--proxy-log %s: no cluster to read it from", f.path)
		}
		api, err := kube.NewAPI(kc.config)
		if err != nil {
			return nil, fmt.Errorf("--proxy-log %s: %w", f.path, err)
		}
		parts := strings.Split(rest, "/")
		rec := kube.ProxyPodLog{Client: api, Namespace: parts[0], Pod: parts[1]}
		if len(parts) == 3 {
			rec.Container = parts[2]
		}
		t.Record = rec
	}
	return t, nil
}
