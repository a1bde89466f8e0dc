package main

import (
	"fmt"
	"net/url"
	"os"

	"github.com/spf13/pflag"

	"github.com/sandprobe/sandprobe/page"
	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/report"
)

// outputs are the report flags every reporting command shares.
type outputs struct {
	format      string
	junitFile   string
	jsonFile    string
	metricsFile string
	pushgateway string
	requirePush bool
	cluster     string
	nodeDetail  int
	htmlFile    string
	sarifFile   string
	// sarif is set by the commands whose findings point at files (drift):
	// only they offer -o sarif and --sarif.
	sarif *report.SARIF
	// What the HTML page shows besides the run: the policy's allowances
	// and reasons (set by the command once the policy is loaded) and, under
	// serve, the last runs.
	policy  *policy.Policy
	history *page.History
	// warn says a problem that does not change the run's exit code (a
	// failed push without --require-push): a line on stderr under run and
	// drift, a log line under serve.
	warn func(msg string)
}

func (o *outputs) register(fs *pflag.FlagSet) {
	group(fs, groupOutputs, func() {
		fs.StringVarP(&o.format, "output", "o", "text", "report on stdout: text, json or junit")
	})
	o.registerFiles(fs)
}

// registerFiles adds the flags for everything but stdout: serve reports
// through these after every run and logs instead of printing.
func (o *outputs) registerFiles(fs *pflag.FlagSet) {
	group(fs, groupOutputs, func() {
		fs.StringVar(&o.junitFile, "junit", "", "also write JUnit XML to this file (atomically)")
		fs.StringVar(&o.jsonFile, "json", "", "also write the JSON report to this file (atomically)")
		fs.StringVar(&o.metricsFile, "metrics-file", "", "also write Prometheus metrics to this file (atomically), for node_exporter's textfile collector")
		fs.StringVar(&o.pushgateway, "pushgateway", "", "also push Prometheus metrics to this Pushgateway URL (group job=sandprobe, cluster=--cluster); a failed push is a warning and sandprobe_push_failures_total, not a failed run (see --require-push)")
		fs.BoolVar(&o.requirePush, "require-push", false, "a failed push to --pushgateway fails the run (exit 3) instead of a warning")
		fs.IntVar(&o.nodeDetail, "metrics-node-detail", report.DefaultNodeDetail, "metrics: up to this many nodes, sandprobe_check_success has a series per check and node; past it, passing checks are one series each and only failing nodes are named (at most 256); -1 keeps every node (docs/metrics.md: the series bound)")
		fs.StringVar(&o.cluster, "cluster", "", "the cluster label of the Pushgateway group, so clusters sharing a gateway do not overwrite each other")
		fs.StringVar(&o.htmlFile, "html", "", "also write the egress page to this file (atomically): every allowance with its reason and verdict, every must-fail target, DNS, metadata, drift by object; self-contained HTML")
	})
}

// registerSARIF offers SARIF (-o sarif and --sarif FILE) with the rules
// it describes; call it after register.
func (o *outputs) registerSARIF(fs *pflag.FlagSet, rules []report.SARIFRule) {
	o.sarif = &report.SARIF{Rules: rules}
	if f := fs.Lookup("output"); f != nil {
		f.Usage = "report on stdout: text, json, junit or sarif (SARIF 2.1.0, for code scanning)"
	}
	group(fs, groupOutputs, func() {
		fs.StringVar(&o.sarifFile, "sarif", "", "also write SARIF 2.1.0 to this file (atomically): each finding on its file and line, for code-scanning uploads")
	})
}

func (o *outputs) check() error {
	switch o.format {
	case "text", "json", "junit":
	case "sarif":
		if o.sarif == nil {
			return fmt.Errorf("-o: sarif is written by sandprobe drift only (its findings point at files); want text, json or junit")
		}
	default:
		if o.sarif != nil {
			return fmt.Errorf("-o: want text, json, junit or sarif, got %q", o.format)
		}
		return fmt.Errorf("-o: want text, json or junit, got %q", o.format)
	}
	if o.sarif != nil && o.sarif.BaseDir == "" {
		// File paths in SARIF are relative to where the command runs (the
		// repository root in CI), as code-scanning uploads expect.
		if wd, err := os.Getwd(); err == nil {
			o.sarif.BaseDir = wd
		}
	}
	for _, f := range [][2]string{{"--sarif", o.sarifFile}, {"--json", o.jsonFile}, {"--junit", o.junitFile}, {"--metrics-file", o.metricsFile}} {
		if f[1] == "" {
			continue
		}
		// Found before the run: a report that cannot be written after
		// minutes of probing is a mistake in the command line.
		if err := checkWritableDir(f[1]); err != nil {
			return fmt.Errorf("%s %w", f[0], err)
		}
	}
	return o.checkFiles()
}

// checkFiles checks the flags registerFiles adds.
func (o *outputs) checkFiles() error {
	if o.htmlFile != "" {
		// Found before the run, not after it: a page that cannot be
		// written is a mistake in the command line.
		if err := checkWritableDir(o.htmlFile); err != nil {
			return fmt.Errorf("--html %w", err)
		}
	}
	if o.pushgateway != "" {
		u, err := url.Parse(o.pushgateway)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--pushgateway: want an http(s) URL such as http://pushgateway:9091, got %q", o.pushgateway)
		}
	}
	return nil
}
