package main

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
)

// progress shows what a long wait is waiting for: one line, rewritten in
// place on a terminal; debug logs otherwise, so CI logs stay clean.
type progress struct {
	mu       sync.Mutex
	w        io.Writer
	terminal bool
	logger   *slog.Logger
	shown    bool
}

func newProgress(w io.Writer, terminal bool, logger *slog.Logger) *progress {
	return &progress{w: w, terminal: terminal, logger: logger}
}

func (p *progress) show(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case msg == "": // the backend is done waiting
		p.clear()
	case !p.terminal:
		p.logger.Debug(msg)
	default:
		fmt.Fprintf(p.w, "\r\033[K%s…", msg)
		p.shown = true
	}
}

func (p *progress) clear() {
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}

func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
}
