package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandprobe/sandprobe/page"
)

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.scrape, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(s.logger.Handler(), slog.LevelError),
		ErrorHandling: promhttp.HTTPErrorOnError,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /report.json", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.RLock()
		body := s.lastJSON
		s.mu.RUnlock()
		if body == nil {
			w.Header().Set("Retry-After", "10")
			http.Error(w, "no run has finished yet", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})
	mux.HandleFunc("GET /{$}", s.servePage)
	// Prometheus's own lifecycle endpoint: read the policy file again.
	mux.HandleFunc("POST /-/reload", func(w http.ResponseWriter, _ *http.Request) {
		name, err := s.reload("POST /-/reload")
		if err != nil {
			http.Error(w, "policy reload failed, the previous policy keeps running: "+err.Error(), http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "reloaded policy "+name+"\n")
	})
	return mux
}

// servePage renders the egress page from the last run and the history, on
// every request (a few milliseconds), so its ages are those of the moment.
func (s *server) servePage(w http.ResponseWriter, _ *http.Request) {
	s.mu.RLock()
	last, pol := s.lastRun, s.out.policy
	s.mu.RUnlock()
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", page.ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	var buf bytes.Buffer
	var err error
	status := http.StatusOK
	if last == nil {
		status = http.StatusServiceUnavailable
		h.Set("Retry-After", "10")
		name := ""
		if pol != nil {
			name = pol.Metadata.Name
		}
		err = page.Pending(&buf, name, s.started)
	} else {
		err = page.Write(&buf, page.Page{Policy: pol, Run: *last, History: s.out.history, Served: true, Now: time.Now()})
	}
	if err != nil {
		s.logger.Error("render the egress page", "err", err)
		http.Error(w, "render the egress page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}
