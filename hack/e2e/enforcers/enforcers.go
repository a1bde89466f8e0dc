package main

import (
	"cmp"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

const (
	kubeRouter = "kube-router's NetworkPolicy"
	safetyNet  = "the cluster's safety net"
	proxyDeny  = "the proxy's deny"
	resolver   = "the lab resolver"
	nobody     = "nobody"
	// notApplicable: where the control got nothing either.
	notApplicable = "nothing answers it (not applicable)"
)

// neighbour: the neighbours the probe derives (its node's kubelet and
// runtime ports, the API server's service address). The node's own address
// is not routed, so the witness (forward hook) never sees them; the control
// proves them.
var neighbour = regexp.MustCompile(`^egress\.must-fail (node:\d+ \(.*\)|kubernetes API \S+)$`)

// conn is one new connection the witness saw: source, destination,
// protocol (its name or number) and destination port.
type conn struct {
	src, dst, proto string
	port            int
}

// witnessSets reads the pre, mid and post sets of `nft -j list table`:
// how many new connections each stage saw per conn (its element's
// counter; 1 for an element without one).
func witnessSets(path string) (map[string]map[conn]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Nftables []struct {
			Set *struct {
				Name string            `json:"name"`
				Elem []json.RawMessage `json:"elem"`
			} `json:"set"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("witness %s: %w", path, err)
	}
	sets := map[string]map[conn]int{"pre": {}, "mid": {}, "post": {}}
	for _, item := range doc.Nftables {
		if item.Set == nil || sets[item.Set.Name] == nil {
			continue
		}
		for _, raw := range item.Set.Elem {
			if c, n, ok := parseElem(raw); ok {
				sets[item.Set.Name][c] += n
			}
		}
	}
	return sets, nil
}

// parseElem reads {"concat": [...]} or, with a timeout or a counter,
// {"elem": {"val": {"concat": [...]}, "counter": {"packets": N}}}.
func parseElem(raw json.RawMessage) (conn, int, bool) {
	var e struct {
		Concat []any `json:"concat"`
		Elem   struct {
			Val struct {
				Concat []any `json:"concat"`
			} `json:"val"`
			Counter *struct {
				Packets int `json:"packets"`
			} `json:"counter"`
		} `json:"elem"`
	}
	if json.Unmarshal(raw, &e) != nil {
		return conn{}, 0, false
	}
	n := 1
	if e.Elem.Counter != nil {
		n = e.Elem.Counter.Packets
	}
	c := e.Concat
	if c == nil {
		c = e.Elem.Val.Concat
	}
	if len(c) < 4 {
		return conn{}, 0, false
	}
	port, ok := c[3].(float64)
	if !ok {
		return conn{}, 0, false
	}
	return conn{src: fmt.Sprint(c[0]), dst: fmt.Sprint(c[1]), proto: fmt.Sprint(c[2]), port: int(port)}, n, true
}

// labInfo is what of lab.json the attribution needs: each name's IPv4
// address and the proxy's address and port.
type labInfo struct {
	names     map[string]string
	proxyIP   string
	proxyPort int
}

func labAddresses(path string) (labInfo, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return labInfo{}, err
	}
	type host struct {
		Name string `json:"name"`
		IPv4 string `json:"ipv4"`
	}
	var lab struct {
		Allowed []host `json:"allowed"`
		Blocked []host `json:"blocked"`
		Proxy   struct {
			host
			Port int `json:"port"`
		} `json:"proxy"`
		Resolver host  `json:"resolver"`
		Metadata *host `json:"metadata"`
	}
	if err := json.Unmarshal(b, &lab); err != nil {
		return labInfo{}, fmt.Errorf("lab json %s: %w", path, err)
	}
	names := map[string]string{}
	for _, h := range slices.Concat(lab.Allowed, lab.Blocked, []host{lab.Proxy.host, lab.Resolver}) {
		names[h.Name] = h.IPv4
	}
	if lab.Metadata != nil && lab.Metadata.Name != "" && lab.Metadata.IPv4 != "" {
		names[lab.Metadata.Name] = lab.Metadata.IPv4
	}
	return labInfo{names: names, proxyIP: lab.Proxy.IPv4, proxyPort: lab.Proxy.Port}, nil
}

// verdict is one egress test case of the run.
type verdict struct{ suite, name, status, body string }

type junitCase struct {
	Name      string    `xml:"name,attr"`
	Classname string    `xml:"classname,attr"`
	Failure   *junitMsg `xml:"failure"`
	Error     *junitMsg `xml:"error"`
	Skipped   *junitMsg `xml:"skipped"`
	SystemOut string    `xml:"system-out"`
}

type junitMsg struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

type junitSuite struct {
	Name   string       `xml:"name,attr"`
	Cases  []junitCase  `xml:"testcase"`
	Suites []junitSuite `xml:"testsuite"`
}

// verdicts reads the sandprobe.egress cases of every test suite.
func verdicts(path string) ([]verdict, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var root junitSuite
	if err := xml.NewDecoder(f).Decode(&root); err != nil {
		return nil, fmt.Errorf("junit %s: %w", path, err)
	}
	var out []verdict
	var walk func(s junitSuite, top bool)
	walk = func(s junitSuite, top bool) {
		if !top || len(s.Cases) > 0 {
			out = append(out, egressCases(s)...)
		}
		for _, sub := range s.Suites {
			walk(sub, false)
		}
	}
	walk(root, true)
	return out, nil
}

func egressCases(s junitSuite) []verdict {
	var out []verdict
	for _, c := range s.Cases {
		if c.Classname != "sandprobe.egress" {
			continue
		}
		v := verdict{suite: s.Name, name: c.Name, status: "pass", body: c.SystemOut}
		for _, m := range []struct {
			msg    *junitMsg
			status string
		}{{c.Failure, "FAIL"}, {c.Error, "error"}, {c.Skipped, "skip"}} {
			if m.msg != nil {
				v.status, v.body = m.status, m.msg.Message+" "+m.msg.Text
				break
			}
		}
		out = append(out, v)
	}
	return out
}

// dest reads "egress.must-fail HOST:PORT", "... via proxy", "... direct",
// and the direct DNS queries of egress.dns-bypass: "IP:53/udp", "IP:53/tcp".
var dest = regexp.MustCompile(`^(egress\.[a-z-]+) (\S+?):(\d+)(?:/(udp|tcp))?( via proxy| direct)?$`)

var protoNames = map[string][]string{"tcp": {"tcp", "6"}, "udp": {"udp", "17"}}

type judge struct {
	sets map[string]map[conn]int
	ips  map[string]bool
	lab  labInfo
	// cilium: the agent's drops and DNS refusals (make e2e CNI=cilium);
	// nil under kube-router. nodeIP: the node's address, for the neighbours.
	cilium *ciliumEvents
	nodeIP string
}

// seen says at which points the witness saw a probe pod dial dst:port.
func (j judge) seen(dst string, port int, proto string) map[string]int {
	where := map[string]int{}
	for stage, elems := range j.sets {
		for c, n := range elems {
			if j.ips[c.src] && c.dst == dst && c.port == port && slices.Contains(protoNames[proto], c.proto) {
				where[stage] += n
			}
		}
	}
	return where
}

func stages(where map[string]int) string {
	var s []string
	for k := range where {
		s = append(s, k)
	}
	slices.Sort(s)
	return strings.Join(s, "/")
}

var ipv4Literal = regexp.MustCompile(`^[0-9.]+$`)

// attribute says what was dialled and who stopped it or let it through.
func (j judge) attribute(v verdict) (dialled, who string) {
	if neighbour.MatchString(v.name) {
		_, dialled, _ = strings.Cut(v.name, " ")
		switch v.status {
		case "skip":
			return dialled, notApplicable + ": the control got nothing either"
		case "pass":
			if j.cilium != nil {
				// Cilium translates a ClusterIP in the pod's datapath (even
				// without kube-proxy replacement) before policy: the API
				// server's Service is dropped as its endpoint, the node's 6443.
				dst, port, after := j.nodeIP, atoi(strings.TrimPrefix(strings.Fields(dialled)[0], "node:")), ""
				if strings.HasPrefix(dialled, "kubernetes API") {
					dst, port, after = j.nodeIP, 6443, fmt.Sprintf(" after its service translation to %s:6443", j.nodeIP)
				}
				if why, ok := j.dropped(dst, port, "tcp"); ok {
					return dialled, ciliumPolicy + " (dropped in the pod's datapath" + after + ": " + why + "; the control reached it)"
				}
				return dialled, nobody + " seen by Cilium: it did not answer the sandbox (the control reached it)"
			}
			return dialled, kubeRouter + " (INPUT: the node's own address; the control reached it)"
		}
		return dialled, nobody + ": it answered the sandbox"
	}
	if strings.HasPrefix(v.name, "egress.dns-exfil") {
		if v.status == "pass" {
			if n := j.refusedNames(exfilName(v.name)); n > 0 {
				return "a random name", fmt.Sprintf("%s (REFUSED the name %d time(s))", ciliumDNS, n)
			}
			return "a random name", resolver + " (answers no name it does not serve)"
		}
		return "a random name", nobody + ": the name resolved"
	}
	m := dest.FindStringSubmatch(v.name)
	if m == nil {
		return "?", "?"
	}
	check, host, port, proto, how := m[1], m[2], atoi(m[3]), cmp.Or(m[4], "tcp"), strings.TrimSpace(m[5])
	if how == "via proxy" {
		return j.viaProxy(v, check, host, port)
	}
	ip := j.lab.names[host]
	if ipv4Literal.MatchString(host) {
		ip = strings.Trim(host, "[]")
	}
	if ip == "" {
		return fmt.Sprintf("%s:%d", host, port), "? (no lab address for " + host + ")"
	}
	where := j.seen(ip, port, proto)
	dialled = fmt.Sprintf("%s:%d", ip, port)
	if proto != "tcp" {
		dialled += "/" + proto
	}
	if ip != host {
		dialled += " (" + host + ")"
	}
	if why, ok := j.dropped(ip, port, proto); ok && where["post"] == 0 {
		who = ciliumPolicy + " (dropped in the pod's datapath: " + why + ")"
		if n := j.refusedNames(func(q string) bool { return q == host }); n > 0 {
			who += fmt.Sprintf("; its DNS proxy REFUSED the name %d time(s)", n)
		}
		return dialled, who
	}
	return dialled, directWho(v, where)
}

func directWho(v verdict, where map[string]int) string {
	// The witness counts each dial. The probe dials a deny once more after
	// a settle delay (a new pod may run before the engine isolates it), so
	// a first dial can leave the node and a pass still be the engine's:
	// kube-router (between mid and post) stopped the later ones.
	stopped := where["mid"] - where["post"]
	switch {
	case v.status == "pass" && where["post"] > 0 && stopped > 0:
		return fmt.Sprintf("%s (REJECT at the node, once its sync had isolated the new pod: %d of %d dials stopped)", kubeRouter, stopped, where["mid"])
	case where["post"] > 0 && v.status == "FAIL":
		return nobody + ": it left the node for the lab and answered"
	case where["post"] > 0:
		return nobody + ": it left the node for the lab (refused by the target itself)"
	case where["mid"] > 0:
		return kubeRouter + " (REJECT at the node)"
	case where["pre"] > 0:
		return safetyNet + " (dropped at the node)"
	}
	return "never left the pod"
}

func (j judge) viaProxy(v verdict, check, host string, port int) (dialled, who string) {
	where := j.seen(j.lab.proxyIP, j.lab.proxyPort, "tcp")
	dialled = fmt.Sprintf("CONNECT %s:%d at %s:%d", host, port, j.lab.proxyIP, j.lab.proxyPort)
	switch {
	case where["post"] == 0:
		return dialled, "never reached the proxy (" + cmp.Or(stages(where), "not seen") + ")"
	case check == "egress.allowed" && v.status == "pass":
		return dialled, "the proxy let it through (allowed)"
	case check == "egress.allowed":
		return dialled, "the proxy refused an allowed host"
	case v.status == "pass":
		return dialled, proxyDeny
	}
	return dialled, nobody + ": the proxy let it through"
}

func atoi(s string) int {
	n := 0
	fmt.Sscan(s, &n)
	return n
}

// report prints one row per verdict and the tally, and with healthy
// returns what was not enforced as the e2e cluster promises.
func report(w io.Writer, cases []verdict, j judge, healthy bool) []string {
	type row struct{ name, status, dialled, who string }
	var rows []row
	var bad []string
	tally := map[string]int{}
	var order []string
	for _, v := range cases {
		if strings.HasPrefix(v.name, "egress.allowed") {
			continue
		}
		dialled, who := j.attribute(v)
		rows = append(rows, row{v.name, v.status, dialled, who})
		key := strings.SplitN(strings.SplitN(who, " (", 2)[0], ":", 2)[0]
		if tally[key] == 0 {
			order = append(order, key)
		}
		tally[key]++
		if healthy && !(v.status == "skip" && strings.HasPrefix(who, notApplicable)) {
			if want := promised(v.name, j.cilium != nil); v.status != "pass" || !strings.HasPrefix(who, want) {
				bad = append(bad, fmt.Sprintf("%s: %s, %s (want pass by %s)", v.name, v.status, who, want))
			}
		}
	}
	wn, wd := 10, 10
	for _, r := range rows {
		wn, wd = max(wn, len(r.name)), max(wd, len(r.dialled))
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%-*s  %-5s %-*s  %s\n", wn, r.name, r.status, wd, r.dialled, r.who)
	}
	slices.SortStableFunc(order, func(a, b string) int { return tally[b] - tally[a] })
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%s %d", k, tally[k])
	}
	fmt.Fprintln(w, "enforced by: "+strings.Join(parts, ", "))
	return bad
}

// promised is who the e2e cluster promises stops an attempt: under
// kube-router, its NetworkPolicy and the lab resolver; under Cilium, its
// CiliumNetworkPolicy and its DNS proxy (the resolver forwards every name).
func promised(name string, cilium bool) string {
	switch {
	case strings.Contains(name, " via proxy"):
		return proxyDeny
	case strings.HasPrefix(name, "egress.dns-exfil") && cilium:
		return ciliumDNS
	case strings.HasPrefix(name, "egress.dns-exfil"):
		return resolver
	case cilium:
		return ciliumPolicy
	}
	return kubeRouter
}
