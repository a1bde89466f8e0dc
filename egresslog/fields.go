package egresslog

import (
	"bytes"
	"time"
)

// field returns the next space-separated field of b and what follows it.
func field(b []byte) (f, rest []byte) {
	i := 0
	for i < len(b) && b[i] == ' ' {
		i++
	}
	b = b[i:]
	j := bytes.IndexByte(b, ' ')
	if j < 0 {
		return b, nil
	}
	return b[:j], b[j+1:]
}

// quoted returns the next "quoted" field (without its quotes, escapes
// left as written) and what follows; ok false when b does not start
// (after spaces) with a quote or the quote does not close.
func quoted(b []byte) (f, rest []byte, ok bool) {
	i := 0
	for i < len(b) && b[i] == ' ' {
		i++
	}
	if i >= len(b) || b[i] != '"' {
		return nil, b, false
	}
	b = b[i+1:]
	for j := 0; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return b[:j], b[j+1:], true
		}
	}
	return nil, nil, false
}

// atoi parses a non-negative decimal; ok false on anything else.
func atoi(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// dash is the "no value" of every text format.
func dash(b []byte) bool { return len(b) == 1 && b[0] == '-' }

// hostPort splits "host:port", "[v6]:port", "host" or "v6" (no brackets,
// more than one colon). port is 0 when absent.
func hostPort(b []byte) (host []byte, port int, ok bool) {
	if len(b) == 0 {
		return nil, 0, false
	}
	if b[0] == '[' {
		end := bytes.IndexByte(b, ']')
		if end < 0 {
			return nil, 0, false
		}
		host, rest := b[1:end], b[end+1:]
		if len(rest) == 0 {
			return host, 0, true
		}
		if rest[0] != ':' {
			return nil, 0, false
		}
		p, ok := atoi(rest[1:])
		return host, int(p), ok && p <= 65535
	}
	i := bytes.LastIndexByte(b, ':')
	if i < 0 {
		return b, 0, true
	}
	if bytes.IndexByte(b[:i], ':') >= 0 {
		return b, 0, true // a bare IPv6 address
	}
	p, ok := atoi(b[i+1:])
	if !ok || p > 65535 {
		return nil, 0, false
	}
	return b[:i], int(p), true
}

// urlHostPort takes the destination out of what a proxy logs as the
// request target: "host:port" (CONNECT) or "scheme://[userinfo@]host[:port]/…";
// the port defaults by scheme (http 80, https and wss 443, ftp 21).
func urlHostPort(u []byte, connect bool) (host []byte, port int, ok bool) {
	if connect {
		return hostPort(u)
	}
	i := bytes.Index(u, []byte("://"))
	if i <= 0 {
		return nil, 0, false
	}
	scheme, rest := u[:i], u[i+3:]
	if j := bytes.IndexAny(rest, "/?#"); j >= 0 {
		rest = rest[:j]
	}
	if j := bytes.LastIndexByte(rest, '@'); j >= 0 {
		rest = rest[j+1:]
	}
	host, port, ok = hostPort(rest)
	if !ok || len(host) == 0 {
		return nil, 0, false
	}
	if port == 0 {
		port = defaultPort(scheme)
	}
	return host, port, true
}

func defaultPort(scheme []byte) int {
	switch string(scheme) { // no allocation: the compiler compares in place
	case "http", "ws", "HTTP":
		return 80
	case "https", "wss", "HTTPS":
		return 443
	case "ftp":
		return 21
	}
	return 0
}

// daysFromCivil is the number of days from 1970-01-01 to y-m-d
// (proleptic Gregorian), without time.Date's cost per line.
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

var months = [12]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

// month parses "Jan".."Dec" (1..12), 0 when not a month.
func month(b []byte) int64 {
	if len(b) != 3 {
		return 0
	}
	for i, m := range months {
		if b[0] == m[0] && b[1] == m[1] && b[2] == m[2] {
			return int64(i + 1)
		}
	}
	return 0
}

// digits parses exactly len(b) decimal digits.
func digits(b []byte) (int64, bool) { return atoi(b) }

// isoMillis parses "2006-01-02T15:04:05[.fff…](Z|±hh:mm)" to Unix
// milliseconds, the layout Envoy, Hubble and most JSON audits write;
// anything else goes through time.Parse.
func isoMillis(b []byte) (int64, bool) {
	if len(b) >= 20 && b[4] == '-' && b[7] == '-' && (b[10] == 'T' || b[10] == ' ') && b[13] == ':' && b[16] == ':' {
		y, ok1 := digits(b[0:4])
		mo, ok2 := digits(b[5:7])
		d, ok3 := digits(b[8:10])
		h, ok4 := digits(b[11:13])
		mi, ok5 := digits(b[14:16])
		s, ok6 := digits(b[17:19])
		if ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && mo >= 1 && mo <= 12 {
			ms, rest := millis(b[19:])
			off, known, ok := zoneOffset(rest)
			if !known {
				return parseTimeSlow(b)
			}
			if !ok {
				return 0, false
			}
			secs := daysFromCivil(y, mo, d)*86400 + h*3600 + mi*60 + s - off
			return secs*1000 + ms, true
		}
	}
	return parseTimeSlow(b)
}

// millis reads an optional fraction of a second (".fff…") as
// milliseconds, and returns what follows it.
func millis(rest []byte) (int64, []byte) {
	var ms int64
	if len(rest) > 0 && rest[0] == '.' {
		k := 1
		scale := int64(100)
		for k < len(rest) && rest[k] >= '0' && rest[k] <= '9' {
			ms += int64(rest[k]-'0') * scale
			scale /= 10
			k++
		}
		rest = rest[k:]
	}
	return ms, rest
}

// zoneOffset reads a zone, "Z" or "±hh:mm", as seconds east of UTC; known
// is false for any other layout, ok false for one that is not numbers.
func zoneOffset(rest []byte) (off int64, known, ok bool) {
	switch {
	case len(rest) == 1 && rest[0] == 'Z':
		return 0, true, true
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, ok1 := digits(rest[1:3])
		om, ok2 := digits(rest[4:6])
		if !ok1 || !ok2 {
			return 0, true, false
		}
		off = (oh*60 + om) * 60
		if rest[0] == '-' {
			off = -off
		}
		return off, true, true
	}
	return 0, false, false
}

func parseTimeSlow(b []byte) (int64, bool) {
	t, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		return 0, false
	}
	return t.UnixMilli(), true
}
