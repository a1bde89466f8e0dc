package main

import (
	"flag"
	"fmt"

	"github.com/sandprobe/sandprobe/report"
)

// outputs are the report flags every reporting command shares.
type outputs struct {
	format    string
	junitFile string
	jsonFile  string
}

func (o *outputs) register(fs *flag.FlagSet) {
	fs.StringVar(&o.format, "o", "text", "report on stdout: text, json or junit")
	fs.StringVar(&o.junitFile, "junit", "", "also write JUnit XML to this file (atomically)")
	fs.StringVar(&o.jsonFile, "json", "", "also write the JSON report to this file (atomically)")
}

func (o *outputs) check() error {
	switch o.format {
	case "text", "json", "junit":
		return nil
	}
	return fmt.Errorf("-o: want text, json or junit, got %q", o.format)
}

// write renders the run to stdout and to every requested file. A file that
// cannot be written is an error: a CI step must not read a stale report.
func (o *outputs) write(a *app, run report.Run, verbose bool) error {
	var w report.Writer
	switch o.format {
	case "json":
		w = report.JSON{}
	case "junit":
		w = report.JUnit{}
	default:
		w = report.Text{Color: isTerminal(a.stdout), Verbose: verbose}
	}
	if err := w.Write(a.stdout, run); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if o.junitFile != "" {
		if err := report.WriteRunFile(o.junitFile, report.JUnit{}, run); err != nil {
			return err
		}
	}
	if o.jsonFile != "" {
		if err := report.WriteRunFile(o.jsonFile, report.JSON{}, run); err != nil {
			return err
		}
	}
	return nil
}
