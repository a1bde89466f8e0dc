package probes

import (
	"net"
	"net/netip"
	"strconv"

	"github.com/sandprobe/sandprobe/policy"
)

// The neighbours: what a sandbox must never reach next to it, derived
// rather than listed. Its node's own address (the downward API's
// status.hostIP, in NodeIPEnv) on the kubelet's ports and a container
// runtime's TCP API, the node ports the policy names (a node-local
// registry or cache), and the API server's service address unless the
// policy allows it. They are must-fail attempts like any other, under
// subjects without the address ("node:10250 (kubelet)"): the control
// vantage dials its own node's address under the same subject, and a
// kubelet answering it there proves the deny in the sandbox. Where the
// control gets nothing either, nothing listens: not applicable, never a
// pass (runner.ApplyControl).

// NodeIPEnv holds the node's address in a pod the runner renders (the
// downward API's status.hostIP).
const NodeIPEnv = "SANDPROBE_NODE_IP"

// NeighbourPrefix begins the subject of every derived node attempt.
const NeighbourPrefix = "node:"

// neighbourPort is a port on the node a sandbox must not reach.
type neighbourPort struct {
	port   int
	what   string
	scheme string
}

// nodePorts are the node services every sandbox is kept from: the
// kubelet's API (exec into any pod on the node) and its read-only port,
// and a container runtime's unauthenticated TCP API (a root shell on the
// node).
func nodePorts() []neighbourPort {
	return []neighbourPort{
		{10250, "kubelet", "https"},
		{10255, "kubelet read-only", "http"},
		{2375, "container runtime API", "http"},
		{2376, "container runtime API, TLS", "https"},
	}
}

// planNeighbours derives the neighbour attempts from the sandbox's
// environment; ports are the node's services (nodePorts() in a real run).
func planNeighbours(e policy.Egress, s *policy.Spec, environ []string, ports []neighbourPort) []Attempt {
	var plan []Attempt
	if node, err := netip.ParseAddr(envValue(environ, NodeIPEnv)); err == nil {
		all := append([]neighbourPort(nil), ports...)
		for _, p := range e.MustFail.NodePorts {
			all = append(all, neighbourPort{p, "spec.egress.mustFail.nodePorts", schemeFor(p)})
		}
		for _, p := range all {
			if allowsAddr(e, node, p.port) {
				continue
			}
			plan = append(plan, Attempt{Check: checkMustFail, Subject: NeighbourPrefix + strconv.Itoa(p.port) + " (" + p.what + ")",
				Host: node.String(), Port: p.port, Scheme: p.scheme})
		}
	}
	host, port := envValue(environ, "KUBERNETES_SERVICE_HOST"), envValue(environ, "KUBERNETES_SERVICE_PORT")
	if api, err := netip.ParseAddr(host); err == nil && port != "" && !apiServerAllowed(e, s, api, port) {
		n, _ := strconv.Atoi(port)
		plan = append(plan, Attempt{Check: checkMustFail, Subject: "kubernetes API " + net.JoinHostPort(host, port),
			Host: api.String(), Port: n, Scheme: "https"})
	}
	return plan
}

// allowsAddr: an allowance names the address (and port).
func allowsAddr(e policy.Egress, a netip.Addr, port int) bool {
	for _, al := range e.Allow {
		if ip, err := netip.ParseAddr(al.Host); err == nil && ip.Unmap() == a.Unmap() && (port == 0 || al.Port == port) {
			return true
		}
	}
	return false
}

// apiServerAllowed: the policy reaches the API server on purpose — an
// allowance names its address or its Service name, or a declared
// Kubernetes credential uses the in-cluster server.
func apiServerAllowed(e policy.Egress, s *policy.Spec, api netip.Addr, port string) bool {
	n, _ := strconv.Atoi(port)
	if allowsAddr(e, api, n) {
		return true
	}
	for _, al := range e.Allow {
		switch policy.NormalizeHost(al.Host) {
		case "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local":
			return true
		}
	}
	for _, c := range s.Credentials {
		if c.Kubernetes != nil {
			return true // creds.scope asks the API server with it
		}
	}
	return false
}
