package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Under Cilium (make e2e CNI=cilium) a denied connection never reaches the
// witness: bpf_lxc drops it on the pod's own device, before the node's
// forward hook. What proves Cilium stopped it is Cilium's own account: the
// agent's monitor (`cilium-dbg monitor --type drop --type l7 -j`, kept per
// run by hack/e2e/lib.sh), whose drop events name the packet and the reason,
// and whose DNS records name each query its DNS proxy refused.
const (
	ciliumPolicy = "Cilium's CiliumNetworkPolicy"
	ciliumDNS    = "Cilium's DNS proxy"
)

// ciliumEvents is what one run's monitor output holds: policy drops per
// conn (with their reason) and the names the DNS proxy denied.
type ciliumEvents struct {
	drops  map[conn]map[string]int // conn → reason → packets
	denied map[string]int          // query name (no trailing dot) → refusals
}

// readCiliumEvents reads the JSON events of cilium-dbg monitor -j. Its
// output is not clean JSON lines: besides its banner, an event is at times
// cut short and the next one follows on the same line (seen with v1.20.2),
// so each event is decoded from where it starts, and a cut one is skipped.
func readCiliumEvents(path string) (*ciliumEvents, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ev := &ciliumEvents{drops: map[conn]map[string]int{}, denied: map[string]int{}}
	for _, start := range eventStarts.FindAllIndex(b, -1) {
		var e struct {
			Type    string `json:"type"`
			Reason  string `json:"reason"`
			Verdict string `json:"verdict"`
			Summary *struct {
				UDP string `json:"udp"`
				L3  *struct{ Src, Dst string }
				L4  *struct{ Src, Dst string }
			} `json:"summary"`
			DNS *struct {
				Query string `json:"Query"`
			} `json:"dns"`
		}
		if json.NewDecoder(bytes.NewReader(b[start[0]:])).Decode(&e) != nil {
			continue
		}
		switch {
		case e.Type == "drop" && e.Summary != nil && e.Summary.L3 != nil && e.Summary.L4 != nil:
			proto := "tcp"
			if e.Summary.UDP != "" {
				proto = "udp"
			}
			port, _ := strconv.Atoi(e.Summary.L4.Dst)
			c := conn{src: e.Summary.L3.Src, dst: e.Summary.L3.Dst, proto: proto, port: port}
			if ev.drops[c] == nil {
				ev.drops[c] = map[string]int{}
			}
			ev.drops[c][e.Reason]++
		case e.Type == "logRecord" && e.DNS != nil && e.Verdict == "Denied":
			ev.denied[strings.TrimSuffix(strings.ToLower(e.DNS.Query), ".")]++
		}
	}
	return ev, nil
}

// eventStarts: where a monitor event begins (a drop starts with its CPU,
// a DNS record with its type).
var eventStarts = regexp.MustCompile(`\{"(cpu|type)":`)

// dropped says whether Cilium dropped the probe pods' packets to dst:port,
// and why ("Policy denied, 3 packets").
func (j judge) dropped(dst string, port int, proto string) (string, bool) {
	if j.cilium == nil {
		return "", false
	}
	reasons := map[string]int{}
	for c, rs := range j.cilium.drops {
		if j.ips[c.src] && c.dst == dst && c.port == port && c.proto == proto {
			for r, n := range rs {
				reasons[r] += n
			}
		}
	}
	var parts []string
	for r, n := range reasons {
		parts = append(parts, fmt.Sprintf("%s, %d packet(s)", r, n))
	}
	sort.Strings(parts) // one order whatever the map's
	return strings.Join(parts, "; "), len(parts) > 0
}

// refusedNames: how many queries for the names match accepts Cilium's DNS
// proxy refused.
func (j judge) refusedNames(match func(string) bool) int {
	if j.cilium == nil {
		return 0
	}
	n := 0
	for q, c := range j.cilium.denied {
		if match(q) {
			n += c
		}
	}
	return n
}

// exfilName matches the queries one egress.dns-exfil verdict stands for:
// "... name HOST" that name, "... canary *.ZONE" and "... *.DOMAIN" the
// probe's random names under it (sandprobe-<hex>.ZONE).
func exfilName(verdict string) func(string) bool {
	subject := strings.TrimSpace(strings.TrimPrefix(verdict, "egress.dns-exfil"))
	if host, ok := strings.CutPrefix(subject, "name "); ok {
		return func(q string) bool { return q == host }
	}
	zone := strings.TrimPrefix(strings.TrimPrefix(subject, "canary "), "*.")
	return func(q string) bool {
		label, ok := strings.CutSuffix(q, "."+zone)
		return ok && strings.HasPrefix(label, "sandprobe-") && !strings.Contains(label, ".")
	}
}
