package egresslog

import (
	"bytes"
	"context"
	"time"

	"github.com/sourcegraph/conc/pool"
)

// tinyproxy (1.11) writes an attempt over several lines, at LogLevel
// Connect or finer:
//
//	CONNECT   Dec 02 05:31:40.168 [20461]: Connect (file descriptor 5): 10.99.1.2
//	CONNECT   Dec 02 05:31:40.175 [20461]: Request (file descriptor 5): CONNECT api.lab.test:443 HTTP/1.1
//	CONNECT   Dec 02 05:31:40.180 [20461]: Established connection to host "api.lab.test" using file descriptor 6.
//	NOTICE    Dec 02 05:31:40.230 [20461]: Proxying refused on filtered domain "blocked.lab.test"
//	INFO      Dec 02 05:31:41.002 [20461]: Refused CONNECT method on port 8080
//
// The client comes from the Connect line, the request from the Request
// line of the same descriptor, and the decision from the line that names
// the request's host (or its port, for a refused CONNECT port) — lines of
// concurrent attempts interleave, so an outcome goes to the oldest open
// request for its host. The time has no year (it is the one that puts
// the line at most a day after the reference) and no zone (Options.
// Location). tinyproxy logs no byte counts and no headers: the records
// carry neither.
//
// Pairing needs the lines in order, so workers parse chunks into events
// and one goroutine pairs them in chunk order.
const (
	tpConnect = iota + 1
	tpRequest
	tpAllowed
	tpDenied
	tpDeniedPort
)

type tpEvent struct {
	kind   uint8
	time   int64
	fd     int64
	port   int
	client []byte
	method []byte
	host   []byte
	line   []byte
	lineNo int64
}

type tpBatch struct {
	seq    int
	events []tpEvent
	stats  Stats
}

// tinyproxyEvents returns the per-line parser of tinyproxy's log.
func tinyproxyEvents(ref time.Time, loc *time.Location) func(line []byte, no int64) (tpEvent, bool, string) {
	return func(line []byte, no int64) (tpEvent, bool, string) {
		level, rest := field(line)
		if len(level) == 0 || !isUpper(level) {
			return tpEvent{}, false, "no tinyproxy level (CONNECT, NOTICE, INFO, …)"
		}
		mon, rest := field(rest)
		day, rest := field(rest)
		clock, rest := field(rest)
		pid, rest := field(rest)
		m := month(mon)
		d, ok := atoi(day)
		if m == 0 || !ok || len(clock) < 8 || clock[2] != ':' || clock[5] != ':' || len(pid) < 4 || pid[0] != '[' || pid[len(pid)-1] != ':' {
			return tpEvent{}, false, "no \"Mon DD HH:MM:SS [pid]:\" after the level"
		}
		h, ok1 := atoi(clock[0:2])
		mi, ok2 := atoi(clock[3:5])
		s, ok3 := atoi(clock[6:8])
		var ms int64
		if len(clock) > 9 && clock[8] == '.' {
			ms, _ = atoi(clock[9:])
			for n := len(clock) - 9; n > 3; n-- {
				ms /= 10
			}
		}
		if !(ok1 && ok2 && ok3) {
			return tpEvent{}, false, "no \"Mon DD HH:MM:SS [pid]:\" after the level"
		}
		ev := tpEvent{line: line, lineNo: no}
		year := ref.Year()
		t := time.Date(year, time.Month(m), int(d), int(h), int(mi), int(s), int(ms)*1e6, loc)
		if t.After(ref.Add(24 * time.Hour)) {
			t = time.Date(year-1, time.Month(m), int(d), int(h), int(mi), int(s), int(ms)*1e6, loc)
		}
		ev.time = t.UnixMilli()
		return tpMessage(ev, bytes.TrimLeft(rest, " "))
	}
}

// tpMessage reads what a tinyproxy line says after its time and pid into
// ev: a connection, a request, a destination allowed or refused.
func tpMessage(ev tpEvent, msg []byte) (tpEvent, bool, string) {
	switch {
	case bytes.HasPrefix(msg, []byte("Connect (file descriptor ")):
		fd, client, ok := tpDescriptor(msg[len("Connect (file descriptor "):])
		if !ok {
			return tpEvent{}, false, "a Connect line without its descriptor and client"
		}
		ev.kind, ev.fd, ev.client = tpConnect, fd, client
	case bytes.HasPrefix(msg, []byte("Request (file descriptor ")):
		fd, req, ok := tpDescriptor(msg[len("Request (file descriptor "):])
		if !ok {
			return tpEvent{}, false, "a Request line without its descriptor and request"
		}
		method, rest := field(req)
		url, _ := field(rest)
		host, port, ok := urlHostPort(url, string(method) == "CONNECT")
		if !ok {
			return ev, false, "" // a request with no destination (a stats page, a bad request)
		}
		ev.kind, ev.fd, ev.method, ev.host, ev.port = tpRequest, fd, method, host, port
	case bytes.HasPrefix(msg, []byte("Established connection to host \"")):
		ev.kind, ev.host = tpAllowed, tpQuotedHost(msg[len("Established connection to host \""):])
	case bytes.HasPrefix(msg, []byte("Proxying refused on filtered domain \"")):
		ev.kind, ev.host = tpDenied, tpQuotedHost(msg[len("Proxying refused on filtered domain \""):])
	case bytes.HasPrefix(msg, []byte("Refused CONNECT method on port ")):
		p, ok := atoi(bytes.TrimSpace(msg[len("Refused CONNECT method on port "):]))
		if !ok {
			return ev, false, ""
		}
		ev.kind, ev.port = tpDeniedPort, int(p)
	default:
		return ev, false, "" // a tinyproxy line that decides nothing
	}
	return ev, true, ""
}

func isUpper(b []byte) bool {
	for _, c := range b {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// tpDescriptor reads "5): rest".
func tpDescriptor(b []byte) (int64, []byte, bool) {
	i := bytes.Index(b, []byte("): "))
	if i <= 0 {
		return 0, nil, false
	}
	fd, ok := atoi(b[:i])
	return fd, bytes.TrimSpace(b[i+3:]), ok
}

func tpQuotedHost(b []byte) []byte {
	if i := bytes.IndexByte(b, '"'); i >= 0 {
		return b[:i]
	}
	return b
}

// scanOrdered parses chunks on every worker into events and pairs them in
// order on the calling goroutine, into one sink.
func scanOrdered[S Sink](ctx context.Context, rd *chunker, first *chunk, workers int, parse func([]byte, int64) (tpEvent, bool, string), sink S) (Stats, error) {
	work := make(chan *chunk, workers)
	results := make(chan tpBatch, workers)
	parsers := pool.New().WithMaxGoroutines(workers)
	for w := 0; w < workers; w++ {
		parsers.Go(func() {
			for c := range work {
				// The events outlive the chunk's buffer (an open request
				// waits for its outcome): they point into a copy.
				data := append([]byte(nil), c.data...)
				cc := chunk{data: data, firstLine: c.firstLine}
				rd.release(c)
				b := tpBatch{seq: c.seq}
				eachLine(&cc, &b.stats, func(line []byte, no int64) {
					ev, ok, why := parse(line, no)
					switch {
					case ok:
						b.events = append(b.events, ev)
					case why != "":
						b.stats.skip(no, why)
					}
				})
				results <- b
			}
		})
	}
	var feedErr error
	aux := pool.New()
	aux.Go(func() {
		feedErr = feed(ctx, rd, first, work)
		close(work)
		parsers.Wait()
		close(results)
	})
	p := newTpPairer(sink)
	waiting := map[int]tpBatch{}
	next := 0
	var st Stats
	for b := range results {
		waiting[b.seq] = b
		for {
			nb, ok := waiting[next]
			if !ok {
				break
			}
			delete(waiting, next)
			next++
			st.merge(nb.stats)
			for i := range nb.events {
				p.event(&nb.events[i])
			}
		}
	}
	aux.Wait()
	p.flush()
	st.Records, st.FirstTime, st.LastTime = p.records, p.first, p.last
	return st, feedErr
}

// maxOpenRequests bounds the requests waiting for their outcome; past it
// the oldest is recorded with no decision (a request tinyproxy never
// concluded in the log).
const maxOpenRequests = 4096

type tpPairer[S Sink] struct {
	sink    S
	clients map[int64][]byte
	open    []tpEvent
	records int64
	first   int64
	last    int64
}

func newTpPairer[S Sink](sink S) *tpPairer[S] {
	return &tpPairer[S]{sink: sink, clients: map[int64][]byte{}}
}

func (p *tpPairer[S]) event(ev *tpEvent) {
	switch ev.kind {
	case tpConnect:
		p.clients[ev.fd] = ev.client
	case tpRequest:
		ev.client = p.clients[ev.fd]
		p.open = append(p.open, *ev)
		for len(p.open) > maxOpenRequests {
			p.emit(&p.open[0], Unknown, 0)
			p.open = p.open[1:]
		}
	case tpAllowed, tpDenied:
		for i := range p.open {
			if bytes.EqualFold(p.open[i].host, ev.host) {
				d, status := Allowed, 0
				if ev.kind == tpDenied {
					d, status = Denied, 403
				}
				p.open[i].line = append(append(append([]byte(nil), p.open[i].line...), '\n'), ev.line...)
				p.emit(&p.open[i], d, status)
				p.open = append(p.open[:i], p.open[i+1:]...)
				return
			}
		}
	case tpDeniedPort:
		for i := range p.open {
			if string(p.open[i].method) == "CONNECT" && p.open[i].port == ev.port {
				p.emit(&p.open[i], Denied, 403)
				p.open = append(p.open[:i], p.open[i+1:]...)
				return
			}
		}
	}
}

func (p *tpPairer[S]) emit(req *tpEvent, d Decision, status int) {
	r := Record{Time: req.time, Client: req.client, Method: req.method, Host: req.host, Port: req.port,
		Decision: d, Status: status, BytesOut: -1, BytesIn: -1, Line: req.line, LineNo: req.lineNo}
	p.records++
	if p.first == 0 || r.Time < p.first {
		p.first = r.Time
	}
	if r.Time > p.last {
		p.last = r.Time
	}
	p.sink.Add(&r)
}

func (p *tpPairer[S]) flush() {
	for i := range p.open {
		p.emit(&p.open[i], Unknown, 0)
	}
	p.open = nil
}
