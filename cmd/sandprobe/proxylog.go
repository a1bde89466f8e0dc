package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/egresslog"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/runner"
	"github.com/sandprobe/sandprobe/runner/kube"
)

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
		return fmt.Errorf("--proxy-log %s: %v", f.path, unwrapPath(err))
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
