package egresslog

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// The agentbox-style JSON audit: one JSON object per line (JSON Lines), one
// line per attempt, written by the proxy when it decides — what the small
// allow-list proxies built for agent sandboxes write with Go's log/slog
// JSON handler. sandprobe defines the fields it reads (docs/egress.md):
//
//	{"time":"2026-12-02T05:31:40.168Z","sandbox":"sandboxes/agent-7","client":"10.0.1.5",
//	 "method":"CONNECT","host":"api.github.com","port":443,"decision":"deny",
//	 "reason":"not on the allow-list","status":403,"bytes_out":0,"bytes_in":0,
//	 "user_agent":"sandprobe/1.4 nonce=…","proxy_user":"sandprobe-…"}
//
// Common spellings are read too: ts or timestamp for time (RFC 3339 or
// Unix seconds); action, verdict or allowed (a boolean) for decision, with
// allow/allowed/accept/permit/pass and deny/denied/block/blocked/reject/
// drop/refused; domain for host; target, dest or url ("host:port" or a
// URL) for host and port together; src, client_ip or remote_addr for
// client; ua for user_agent; user for proxy_user.
type auditLine struct {
	Time       json.RawMessage `json:"time"`
	TS         json.RawMessage `json:"ts"`
	Timestamp  json.RawMessage `json:"timestamp"`
	Sandbox    string          `json:"sandbox"`
	Client     string          `json:"client"`
	Src        string          `json:"src"`
	ClientIP   string          `json:"client_ip"`
	RemoteAddr string          `json:"remote_addr"`
	Method     string          `json:"method"`
	Host       string          `json:"host"`
	Domain     string          `json:"domain"`
	Port       json.Number     `json:"port"`
	Target     string          `json:"target"`
	Dest       string          `json:"dest"`
	URL        string          `json:"url"`
	Decision   string          `json:"decision"`
	Action     string          `json:"action"`
	Verdict    string          `json:"verdict"`
	Allowed    *bool           `json:"allowed"`
	Status     int             `json:"status"`
	BytesOut   *int64          `json:"bytes_out"`
	BytesIn    *int64          `json:"bytes_in"`
	UserAgent  string          `json:"user_agent"`
	UA         string          `json:"ua"`
	ProxyUser  string          `json:"proxy_user"`
	User       string          `json:"user"`
}

// jsonScratch is a worker's reusable decoding space: the strings a line
// decodes to are packed into one buffer the record's slices point into.
type jsonScratch struct {
	audit  auditLine
	hubble hubbleLine
	buf    []byte
}

// pack copies strings into the scratch buffer and returns a slice for
// each (nil for ""), valid until the next line.
func (j *jsonScratch) pack(ss ...string) [][2]int {
	j.buf = j.buf[:0]
	out := make([][2]int, len(ss))
	for i, s := range ss {
		start := len(j.buf)
		j.buf = append(j.buf, s...)
		out[i] = [2]int{start, len(j.buf)}
	}
	return out
}

func (j *jsonScratch) slice(p [2]int) []byte {
	if p[0] == p[1] {
		return nil
	}
	return j.buf[p[0]:p[1]:p[1]]
}

func first(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

func parseJSONAudit(line []byte, r *Record, ps *parseState) (bool, string) {
	if line[0] != '{' {
		return false, "not a JSON object"
	}
	a := &ps.json.audit
	*a = auditLine{}
	if err := json.Unmarshal(line, a); err != nil {
		return false, "not a JSON audit record: " + err.Error()
	}
	if t := firstRaw(a.Time, a.TS, a.Timestamp); len(t) > 0 {
		ms, ok := jsonTime(t)
		if !ok {
			return false, "time is neither RFC 3339 nor Unix seconds"
		}
		r.Time = ms
	}
	host, port := first(a.Host, a.Domain), 0
	if p, err := a.Port.Int64(); err == nil && p > 0 && p <= 65535 {
		port = int(p)
	}
	if t := first(a.Target, a.Dest, a.URL); t != "" {
		var h []byte
		var p int
		var ok bool
		if strings.Contains(t, "://") {
			h, p, ok = urlHostPort([]byte(t), false)
		} else {
			h, p, ok = hostPort([]byte(t))
		}
		if ok {
			if host == "" {
				host = string(h)
			}
			if port == 0 {
				port = p
			}
		}
	}
	if host == "" {
		return false, "no host, domain, target, dest or url"
	}
	switch d := strings.ToLower(first(a.Decision, a.Action, a.Verdict)); d {
	case "allow", "allowed", "accept", "accepted", "permit", "permitted", "pass", "forwarded":
		r.Decision = Allowed
	case "deny", "denied", "block", "blocked", "reject", "rejected", "drop", "dropped", "refused", "refuse":
		r.Decision = Denied
	case "":
		if a.Allowed != nil {
			r.Decision = map[bool]Decision{true: Allowed, false: Denied}[*a.Allowed]
		}
	}
	client := first(a.Client, a.Src, a.ClientIP, a.RemoteAddr)
	if strings.Count(client, ":") == 1 || strings.HasPrefix(client, "[") {
		if h, _, ok := hostPort([]byte(client)); ok {
			client = string(h) // "10.0.0.5:41234" or "[fd00::5]:41234"
		}
	}
	p := ps.json.pack(client, a.Sandbox, a.Method, host, first(a.UserAgent, a.UA), first(a.ProxyUser, a.User))
	r.Client, r.Sandbox, r.Method, r.Host, r.Agent, r.User = ps.json.slice(p[0]), ps.json.slice(p[1]), ps.json.slice(p[2]), ps.json.slice(p[3]), ps.json.slice(p[4]), ps.json.slice(p[5])
	r.Port, r.Status = port, a.Status
	if a.BytesOut != nil {
		r.BytesOut = *a.BytesOut
	}
	if a.BytesIn != nil {
		r.BytesIn = *a.BytesIn
	}
	return true, ""
}

func firstRaw(rs ...json.RawMessage) json.RawMessage {
	for _, r := range rs {
		if len(r) > 0 && string(r) != "null" {
			return r
		}
	}
	return nil
}

// jsonTime reads an RFC 3339 string or a number of Unix seconds.
func jsonTime(raw json.RawMessage) (int64, bool) {
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0, false
		}
		return isoMillis([]byte(s))
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return 0, false
	}
	return int64(f * 1000), true
}

// Hubble flows as JSON: what `hubble observe -o json` prints (a
// GetFlowsResponse per line, the flow under "flow") and what the flow
// exporter writes; a bare flow object is read too. One connection is its
// first packet: a TCP SYN without ACK, any UDP datagram. Replies, ingress,
// DNS (port 53: spec.egress.dns has its own checks) and L7 events are not
// attempts. FORWARDED, AUDIT (a policy in audit mode that would have
// dropped it), REDIRECTED (to the L7 proxy) and TRANSLATED are allowed;
// DROPPED and ERROR denied.
type hubbleLine struct {
	Flow *hubbleFlow `json:"flow"`
	hubbleFlow
}

type hubbleFlow struct {
	Time    string `json:"time"`
	Verdict string `json:"verdict"`
	IP      *struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
	} `json:"IP"`
	L4 *struct {
		TCP *struct {
			DestinationPort int             `json:"destination_port"`
			Flags           map[string]bool `json:"flags"`
		} `json:"TCP"`
		UDP *struct {
			DestinationPort int `json:"destination_port"`
		} `json:"UDP"`
	} `json:"l4"`
	Source *struct {
		Namespace string `json:"namespace"`
		PodName   string `json:"pod_name"`
	} `json:"source"`
	DestinationNames []string        `json:"destination_names"`
	TrafficDirection string          `json:"traffic_direction"`
	IsReply          *bool           `json:"is_reply"`
	L7               json.RawMessage `json:"l7"`
}

func parseHubble(line []byte, r *Record, ps *parseState) (bool, string) {
	if line[0] != '{' {
		return false, "not a JSON object"
	}
	h := &ps.json.hubble
	*h = hubbleLine{}
	if err := json.Unmarshal(line, h); err != nil {
		return false, "not a Hubble flow: " + err.Error()
	}
	f := &h.hubbleFlow
	if h.Flow != nil {
		f = h.Flow
	}
	if f.Verdict == "" && f.IP == nil {
		if bytes.Contains(line, []byte(`"node_status"`)) || bytes.Contains(line, []byte(`"lost_events"`)) {
			return false, "" // not a flow: said nothing about egress
		}
		return false, "not a Hubble flow (no verdict, no IP)"
	}
	port, ok := f.opening()
	if !ok {
		return false, ""
	}
	r.Port = port
	if f.Time != "" {
		if ms, ok := isoMillis([]byte(f.Time)); ok {
			r.Time = ms
		}
	}
	switch f.Verdict {
	case "FORWARDED", "AUDIT", "REDIRECTED", "TRANSLATED":
		r.Decision = Allowed
	case "DROPPED", "ERROR":
		r.Decision = Denied
	}
	host := f.IP.Destination
	if len(f.DestinationNames) > 0 {
		host = f.DestinationNames[0]
	}
	sandbox := ""
	if f.Source != nil && f.Source.PodName != "" {
		sandbox = f.Source.Namespace + "/" + f.Source.PodName
	}
	p := ps.json.pack(f.IP.Source, sandbox, host)
	r.Client, r.Sandbox, r.Host = ps.json.slice(p[0]), ps.json.slice(p[1]), ps.json.slice(p[2])
	return true, ""
}

// opening is the destination port of a flow that opens a connection out
// of the pod: a TCP SYN or a UDP datagram, not a reply, not DNS, not an
// L7 record; false for any other flow.
func (f *hubbleFlow) opening() (int, bool) {
	if f.IP == nil || f.L4 == nil || len(f.L7) > 0 || f.TrafficDirection == "INGRESS" || (f.IsReply != nil && *f.IsReply) {
		return 0, false
	}
	var port int
	switch {
	case f.L4.TCP != nil:
		if !f.L4.TCP.Flags["SYN"] || f.L4.TCP.Flags["ACK"] {
			return 0, false // mid-connection
		}
		port = f.L4.TCP.DestinationPort
	case f.L4.UDP != nil:
		port = f.L4.UDP.DestinationPort
	default:
		return 0, false
	}
	return port, port != 53
}

// Envoy's default access log format (configuration/observability/access_log):
//
//	[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%"
//	%RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION%
//	%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%"
//	"%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"
//
// The destination is the authority (CONNECT's host:port); the client the
// first X-Forwarded-For address, the default format has no other. A 403
// (RBAC, ext_authz) or a 404 with NR (no route for the host) is Envoy's
// refusal; a 0 a client that went away.
func parseEnvoy(line []byte, r *Record, _ *parseState) (bool, string) {
	if len(line) < 2 || line[0] != '[' {
		return false, "no [START_TIME]"
	}
	end := bytes.IndexByte(line, ']')
	if end < 0 {
		return false, "no [START_TIME]"
	}
	t, ok := isoMillis(line[1:end])
	if !ok {
		return false, "START_TIME is not an ISO 8601 time"
	}
	r.Time = t
	req, rest, ok := quoted(line[end+1:])
	if !ok {
		return false, "no \"METHOD PATH PROTOCOL\""
	}
	r.Method, _ = field(req)
	f, rest := field(rest)
	code, ok := atoi(f)
	if !ok {
		return false, "no RESPONSE_CODE"
	}
	r.Status = int(code)
	flags, rest := field(rest)
	f, rest = field(rest)
	if n, ok := atoi(f); ok {
		r.BytesOut = n
	}
	f, rest = field(rest)
	if n, ok := atoi(f); ok {
		r.BytesIn = n
	}
	_, rest = field(rest) // DURATION
	_, rest = field(rest) // upstream service time
	xff, rest, ok1 := quoted(rest)
	ua, rest, ok2 := quoted(rest)
	_, rest, ok3 := quoted(rest)
	authority, _, ok4 := quoted(rest)
	if !(ok1 && ok2 && ok3 && ok4) {
		return false, "fewer quoted fields than Envoy's default format"
	}
	if !dash(xff) {
		if i := bytes.IndexByte(xff, ','); i >= 0 {
			xff = xff[:i]
		}
		r.Client = bytes.TrimSpace(xff)
	}
	if !dash(ua) {
		r.Agent = ua
	}
	connect := string(r.Method) == "CONNECT"
	if !dash(authority) {
		r.Host, r.Port, _ = hostPort(authority)
		if r.Port == 0 {
			r.Port = map[bool]int{true: 443, false: 80}[connect]
		}
	}
	switch {
	case code == 403 || (code == 404 && bytes.Contains(flags, []byte("NR"))) || bytes.Contains(flags, []byte("UAEX")):
		r.Decision = Denied
	case code == 0:
		r.Decision = Unknown
	default:
		r.Decision = Allowed
	}
	return true, ""
}
