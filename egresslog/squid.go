package egresslog

import (
	"bytes"

	"github.com/sandprobe/sandprobe/internal/fields"
)

// Squid's native format (logformat squid; src/log/FormatSquidNative.cc):
//
//	time.ms elapsed client TAG/status bytes method URL user HIER/peer type
//
// time is when the transaction ended (Unix seconds and milliseconds),
// elapsed its length in milliseconds, bytes what went to the client.
// Two endings are read besides: log_mime_hdrs on (" [request headers]
// [reply headers]", Squid's %-quoting), where the request's User-Agent
// is; and sandprobe's recommended format, the native one plus the bytes
// the client sent and its User-Agent (docs/egress.md):
//
//	logformat sandprobe %ts.%03tu %6tr %>a %Ss/%03>Hs %<st %rm %ru %[un %Sh/%<a %mt %>st "%{User-Agent}>h"
func parseSquidNative(line []byte, r *Record, _ *parseState) (bool, string) {
	// The ten native fields at once (what ten field calls would give);
	// those the line lacks are empty.
	var sp [10]fields.Span
	n, restAt := fields.Split(line, sp[:])
	for k := n; k < len(sp); k++ {
		sp[k] = fields.Span{Start: len(line), End: len(line)}
	}
	f := line[sp[0].Start:sp[0].End]
	dot := bytes.IndexByte(f, '.')
	if dot <= 0 {
		return false, "no Unix time in the first field"
	}
	secs, ok1 := atoi(f[:dot])
	ms, ok2 := atoi(f[dot+1:])
	if !ok1 || !ok2 || len(f)-dot-1 != 3 {
		return false, "no Unix time in the first field"
	}
	elapsed, ok := atoi(line[sp[1].Start:sp[1].End])
	if !ok {
		return false, "no elapsed milliseconds in the second field"
	}
	r.Time = secs*1000 + ms - elapsed // when the request came in
	r.Client = line[sp[2].Start:sp[2].End]
	f = line[sp[3].Start:sp[3].End]
	slash := bytes.IndexByte(f, '/')
	if slash <= 0 {
		return false, "no TAG/status in the fourth field"
	}
	tag := f[:slash]
	status, ok := atoi(f[slash+1:])
	if !ok {
		return false, "no TAG/status in the fourth field"
	}
	r.Status = int(status)
	if r.BytesIn, ok = atoi(line[sp[4].Start:sp[4].End]); !ok {
		return false, "no byte count in the fifth field"
	}
	r.Method = line[sp[5].Start:sp[5].End]
	url := line[sp[6].Start:sp[6].End]
	if user := line[sp[7].Start:sp[7].End]; !dash(user) {
		r.User = user
	}
	hier := line[sp[8].Start:sp[8].End]
	if len(url) == 0 || len(hier) == 0 {
		return false, "fewer fields than Squid's native format"
	}
	// sp[9] is the content type.
	r.Host, r.Port, _ = urlHostPort(url, string(r.Method) == "CONNECT")
	r.Decision = squidDecision(tag, status, hier)
	squidExtras(line[restAt:], r)
	return true, ""
}

// squidExtras reads what follows the native (or common) fields: the
// client's byte count and "User-Agent" of sandprobe's format, or the
// request headers of log_mime_hdrs.
func squidExtras(rest []byte, r *Record) {
	rest = bytes.TrimLeft(rest, " ")
	if len(rest) == 0 {
		return
	}
	if rest[0] == '[' {
		end := bytes.IndexByte(rest, ']')
		if end > 0 {
			r.Agent = mimeHeader(rest[1:end], "user-agent:")
		}
		return
	}
	f, after := field(rest)
	if n, ok := atoi(f); ok {
		r.BytesOut = n
		rest = after
	}
	if ua, _, ok := quoted(rest); ok && !dash(ua) {
		r.Agent = ua
	}
}

// mimeHeader finds a header (name lower case, with its colon) in Squid's
// quoted header blob, where line ends are written %0D%0A.
func mimeHeader(blob []byte, name string) []byte {
	for len(blob) > 0 {
		end := bytes.Index(blob, []byte("%0D%0A"))
		line := blob
		if end >= 0 {
			line, blob = blob[:end], blob[end+6:]
		} else {
			blob = nil
		}
		if len(line) > len(name) && hasPrefixFold(line, name) {
			return bytes.TrimSpace(line[len(name):])
		}
	}
	return nil
}

func hasPrefixFold(b []byte, lowerPrefix string) bool {
	if len(b) < len(lowerPrefix) {
		return false
	}
	for i := 0; i < len(lowerPrefix); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lowerPrefix[i] {
			return false
		}
	}
	return true
}

// squidDecision: Squid's own refusals carry a DENIED tag (TCP_DENIED,
// TCP_DENIED_REPLY, …); a 403 or 407 that no server sent (HIER_NONE) is
// Squid's error page too. A 000 is a client that went away before an
// answer, and an ssl-bump step (NONE_NONE/200 CONNECT with no server
// yet) decides nothing: the bumped request after it does.
func squidDecision(tag []byte, status int64, hier []byte) Decision {
	noServer := bytes.HasPrefix(hier, []byte("HIER_NONE"))
	switch {
	case bytes.Contains(tag, []byte("DENIED")):
		return Denied
	case (status == 403 || status == 407) && noServer:
		return Denied
	case status == 0:
		return Unknown
	case bytes.HasPrefix(tag, []byte("NONE")) && noServer && status == 200:
		return Unknown
	}
	return Allowed
}

// The common log format (Squid's logformat common; Apache's), and
// combined, which adds "referer" "user-agent":
//
//	client ident user [02/Jan/2006:15:04:05 -0700] "METHOD URL HTTP/1.1" status bytes [TAG:HIER]
//
// The time is when the transaction ended. Squid appends TAG:HIERARCHY;
// without it a 403 or 407 is taken as the proxy's refusal.
func parseCommon(line []byte, r *Record, _ *parseState) (bool, string) {
	var rest []byte
	r.Client, rest = field(line)
	_, rest = field(rest) // ident
	var user []byte
	user, rest = field(rest)
	if !dash(user) {
		r.User = user
	}
	rest = bytes.TrimLeft(rest, " ")
	if len(rest) < 28 || rest[0] != '[' || rest[27] != ']' {
		return false, "no [dd/Mon/yyyy:hh:mm:ss +zzzz] time in the fourth field"
	}
	t, ok := clfTime(rest[1:27])
	if !ok {
		return false, "no [dd/Mon/yyyy:hh:mm:ss +zzzz] time in the fourth field"
	}
	r.Time = t
	req, rest, ok := quoted(rest[28:])
	if !ok {
		return false, "no \"METHOD URL PROTOCOL\" request"
	}
	var url []byte
	r.Method, req = field(req)
	url, _ = field(req)
	f, rest := field(rest)
	status, ok := atoi(f)
	if !ok {
		return false, "no status after the request"
	}
	r.Status = int(status)
	f, rest = field(rest)
	if n, ok := atoi(f); ok {
		r.BytesIn = n
	} else if !dash(f) {
		return false, "no byte count after the status"
	}
	if _, after, ok := quoted(rest); ok { // combined: "referer" "user-agent"
		ua, after2, ok2 := quoted(after)
		if ok2 {
			if !dash(ua) {
				r.Agent = ua
			}
			rest = after2
		}
	}
	beforeTag := rest
	tagHier, rest := field(rest)
	r.Host, r.Port, _ = urlHostPort(url, string(r.Method) == "CONNECT")
	if c := bytes.IndexByte(tagHier, ':'); c > 0 && tagHier[0] != '[' {
		r.Decision = squidDecision(tagHier[:c], status, tagHier[c+1:])
		squidExtras(rest, r)
	} else {
		switch status {
		case 403, 407:
			r.Decision = Denied
		case 0:
			r.Decision = Unknown
		default:
			r.Decision = Allowed
		}
		squidExtras(beforeTag, r)
	}
	return true, ""
}

// clfTime parses "02/Jan/2006:15:04:05 -0700" to Unix milliseconds.
func clfTime(b []byte) (int64, bool) {
	if len(b) != 26 || b[2] != '/' || b[6] != '/' || b[11] != ':' || b[14] != ':' || b[17] != ':' || b[20] != ' ' {
		return 0, false
	}
	d, ok1 := digits(b[0:2])
	mo := month(b[3:6])
	y, ok2 := digits(b[7:11])
	h, ok3 := digits(b[12:14])
	mi, ok4 := digits(b[15:17])
	s, ok5 := digits(b[18:20])
	oh, ok6 := digits(b[22:24])
	om, ok7 := digits(b[24:26])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) || mo == 0 || (b[21] != '+' && b[21] != '-') {
		return 0, false
	}
	off := (oh*60 + om) * 60
	if b[21] == '-' {
		off = -off
	}
	return (daysFromCivil(y, mo, d)*86400 + h*3600 + mi*60 + s - off) * 1000, true
}
