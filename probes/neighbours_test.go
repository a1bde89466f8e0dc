package probes

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandprobe/sandprobe/result"
)

// TestPlanNeighbours: the neighbours come from the sandbox's place, not a
// list: its node's address (the downward API) on the kubelet's and a
// runtime's ports and the policy's node ports, and the API server's
// service address unless the policy reaches it on purpose. Outside
// Kubernetes there is no node address and no API server: nothing.
func TestPlanNeighbours(t *testing.T) {
	k8s := []string{NodeIPEnv + "=10.0.0.5", "KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443"}
	cases := []struct {
		name     string
		egress   string
		environ  []string
		want     []string
		unwanted []string
	}{
		{"kubernetes", "mustFail: {nodePorts: [5000]}", k8s,
			[]string{"node:10250 (kubelet)", "node:10255 (kubelet read-only)", "node:2375 (container runtime API)", "node:2376 (container runtime API, TLS)", "node:5000 (spec.egress.mustFail.nodePorts)", "kubernetes API 10.96.0.1:443"}, nil},
		{"the API server allowed by name", "allow: [{host: kubernetes.default.svc, reason: r}]", k8s,
			[]string{"node:10250 (kubelet)"}, []string{"kubernetes API 10.96.0.1:443"}},
		{"a node port allowed by address (a node-local cache)", "allow: [{host: 10.0.0.5, port: 5000, reason: r}]\n    mustFail: {nodePorts: [5000]}", k8s,
			[]string{"node:10250 (kubelet)"}, []string{"node:5000 (spec.egress.mustFail.nodePorts)"}},
		{"docker, local: no node address", "mustFail: {nodePorts: [5000]}", []string{"HOME=/tmp"}, nil,
			[]string{"node:10250 (kubelet)", "node:5000 (spec.egress.mustFail.nodePorts)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := mustPolicy(t, "  egress:\n    "+c.egress+"\n")
			got := map[string]Attempt{}
			for _, a := range planNeighbours(p.Spec.Egress, &p.Spec, c.environ, nodePorts()) {
				got[a.Subject] = a
				if a.Check != checkMustFail || a.ViaProxy {
					t.Errorf("%s: %+v, want a direct must-fail attempt", a.Subject, a)
				}
			}
			for _, w := range c.want {
				if _, ok := got[w]; !ok {
					t.Errorf("missing %q; have %v", w, got)
				}
			}
			for _, u := range c.unwanted {
				if _, ok := got[u]; ok {
					t.Errorf("%q planned, want it left out", u)
				}
			}
			if a, ok := got["node:10250 (kubelet)"]; ok && (a.Host != "10.0.0.5" || a.Port != 10250) {
				t.Errorf("kubelet attempt dials %s:%d", a.Host, a.Port)
			}
		})
	}
}

// TestNeighbourReachable: on loopback, the node's address is 127.0.0.1 and
// a node port the policy names has a real listener — an ipBlock for the
// node address let the sandbox in — so it fails naming the port; with the
// port closed it is denied.
func TestNeighbourReachable(t *testing.T) {
	open, closed := origin(t), closedPort(t)
	for _, c := range []struct {
		name string
		port int
		want result.Status
	}{
		{"an ipBlock for the node address", open, result.Fail},
		{"denied", closed, result.Pass},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := &Env{Policy: mustPolicy(t, fmt.Sprintf(`
  egress:
    mustFail: {nodePorts: [%d]}
    metadata: {address: 127.0.0.2, port: %d}
    dns: {arbitraryNames: allow}
    timeout: 1s
`, c.port, closed)), Environ: []string{NodeIPEnv + "=127.0.0.1"}}
			sub := fmt.Sprintf("node:%d (spec.egress.mustFail.nodePorts)", c.port)
			var f *result.Finding
			for _, x := range runEgress(context.Background(), env)[checkMustFail] {
				if x.Subject == sub {
					f = &x
				}
			}
			if f == nil {
				t.Fatalf("no finding for %s", sub)
			}
			if f.Status != c.want {
				t.Fatalf("%s: %s %q", sub, f.Status, f.Actual)
			}
			if c.want == result.Fail && (!strings.Contains(f.Actual, "answered") || !strings.Contains(f.Evidence, fmt.Sprintf("127.0.0.1:%d", c.port)) || f.Fix == "") {
				t.Errorf("a reachable neighbour must name its address, port and a fix: %+v", f)
			}
		})
	}
}

// TestControlDialsNeighbours: the control vantage derives the neighbours
// from its own place, under the same subjects, so its answer from a
// node's port is what proves the sandbox's deny of it.
func TestControlDialsNeighbours(t *testing.T) {
	open := origin(t)
	env := &Env{Policy: mustPolicy(t, fmt.Sprintf(`
  egress:
    mustFail: {nodePorts: [%d]}
    dns: {arbitraryNames: allow}
    timeout: 1s
`, open)), Environ: []string{NodeIPEnv + "=127.0.0.1"}, Now: time.Now}
	sub := fmt.Sprintf("node:%d (spec.egress.mustFail.nodePorts)", open)
	for _, f := range RunControl(context.Background(), env).Findings {
		if f.Subject == sub {
			if f.Check != checkMustFail || f.Class != "answered" {
				t.Errorf("control saw %s/%s for %s", f.Check, f.Class, sub)
			}
			return
		}
	}
	t.Errorf("the control did not dial %s", sub)
}
