package probes

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sandprobe/sandprobe/policy"
	"github.com/sandprobe/sandprobe/result"
)

// TestResolveAsTheCLibraryDoes: a pod's resolv.conf has a search list and
// ndots:5, so its processes ask for each expansion of an allowed name
// before the name itself, and the C library ends the walk at the first
// answer that is not NXDOMAIN, empty or SERVFAIL. A Cilium DNS rule that
// allows only the name REFUSES the first expansion: the agents cannot
// resolve it, although Go's resolver (which walks on) would. The probe
// sees it as the agents do; with the expansions allowed (what render
// writes), the cluster resolver's NXDOMAIN sends it on, and it passes.
func TestResolveAsTheCLibraryDoes(t *testing.T) {
	api := origin(t)
	search := []string{"factory-sandboxes.svc.cluster.local", "svc.cluster.local", "cluster.local"}
	for _, c := range []struct {
		name      string
		expansion dnsmessage.RCode // what the resolver answers for an expansion
		want      result.Status
		actual    string
	}{
		{"the expansions allowed (NXDOMAIN)", dnsmessage.RCodeNameError, result.Pass, "answered"},
		{"a DNS rule that refuses the expansions", dnsmessage.RCodeRefused, result.Fail, "search-list expansion registry.test.factory-sandboxes.svc.cluster.local"},
		{"SERVFAIL for an expansion (glibc walks on)", dnsmessage.RCodeServerFailure, result.Pass, "answered"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newDNSServer(t, func(name string) dnsAnswer {
				if name == "registry.test" {
					return dnsAnswer{rcode: dnsmessage.RCodeSuccess, addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
				}
				return dnsAnswer{rcode: c.expansion}
			})
			p := mustPolicy(t, fmt.Sprintf("  egress:\n    allow: [{host: registry.test, port: %d, scheme: http, reason: r}]\n    timeout: 2s\n", api))
			client, err := NewNetClient(p.Spec.Egress)
			if err != nil {
				t.Fatal(err)
			}
			client.dns = dnsConfig{servers: []string{srv.addr}, search: search, ndots: 5, attempts: 1, timeout: time.Second, hosts: map[string][]string{}}
			a := Attempt{Check: checkAllowed, Subject: fmt.Sprintf("registry.test:%d", api), Host: "registry.test", Port: api, Scheme: "http"}
			r := client.RunAttempts(context.Background(), []Attempt{a}, OptionsFor(p.Spec.Egress))[0]
			f := judge(a, r, p.Spec.Egress)
			if f.Status != c.want || !strings.Contains(f.Actual+f.Evidence, c.actual) {
				t.Fatalf("%s %q (%s), want %s containing %q", f.Status, f.Actual, f.Evidence, c.want, c.actual)
			}
			if c.want == result.Fail && (f.Class != policy.VerdictDNSRefused || !strings.Contains(f.Fix, "search-list expansions") || !strings.Contains(f.Actual, "never ask for")) {
				t.Errorf("a refused expansion must say the agents never get to the name, and how to fix it: %+v", f)
			}
		})
	}
}
