package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/pflag"
)

// logFlags adds --log-format and -v and builds the logger after parsing.
type logFlags struct {
	format  string
	verbose bool
}

func (l *logFlags) register(fs *pflag.FlagSet) {
	group(fs, groupLogging, func() {
		fs.StringVar(&l.format, "log-format", "text", "log format on stderr: text or json")
		fs.BoolVarP(&l.verbose, "verbose", "v", false, "verbose: debug logs, and passing checks in the text report")
	})
}

func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: slog.LevelWarn}
	if l.verbose {
		opts.Level = slog.LevelDebug
	}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: want text or json, got %q", l.format)
}
