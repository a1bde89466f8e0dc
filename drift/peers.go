package drift

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandprobe/sandprobe/policy"
)

// allowPeer is an in-cluster allowance with a declared location (a broker
// behind a Service): the rules that allow it name its pods, not its name.
type allowPeer struct {
	host    string
	ns      string
	pods    map[string]string // the location's pod labels; nil: every pod of ns
	service string
	ports   []int // the ports its pods listen on
	port    int   // the allowance's port (the Service's)
	reason  string
}

func newAllowPeer(a policy.Allowance) allowPeer {
	return allowPeer{host: policy.NormalizeHost(a.Host), ns: a.Location.Namespace, pods: a.Location.PodLabels(),
		service: a.Location.Service, ports: a.PeerPorts(), port: a.Port, reason: a.Reason}
}

func (p allowPeer) String() string {
	s := p.host + " (namespace " + p.ns
	if len(p.pods) > 0 {
		s += ", pods " + selectorText(p.pods)
	}
	parts := make([]string, len(p.ports))
	for i, n := range p.ports {
		parts[i] = fmt.Sprintf("%d/TCP", n)
	}
	return s + ", " + strings.Join(parts, ", ") + ")"
}

// peerVerdict is how a live in-cluster peer compares with the declared ones.
type peerVerdict struct {
	explained bool
	// widened names the declared peer whose namespace and ports the live
	// peer has, but whose pods it does not narrow to: every pod there.
	widened *allowPeer
}

// judgePeer compares a live peer — pods of namespace ns (known: the
// selector pins one) whose labels include podLabels, on ports — with the
// declared in-cluster peers. Expressions in the live selector only narrow
// it further, so its matchLabels decide.
func (m *egressModel) judgePeer(ns string, known bool, podLabels map[string]string, ports []portSpec) peerVerdict {
	var v peerVerdict
	if !known {
		return v
	}
	for i := range m.peers {
		p := &m.peers[i]
		if p.ns != ns || !portsWithin(ports, p.ports) {
			continue
		}
		if includesLabels(podLabels, p.pods) {
			return peerVerdict{explained: true}
		}
		if v.widened == nil && includesLabels(p.pods, podLabels) {
			v.widened = p // fewer of the declared labels: more pods
		}
	}
	return v
}

// includesLabels: every declared label is required by the live selector,
// so it selects the declared pods or fewer.
func includesLabels(live, declared map[string]string) bool {
	for k, v := range declared {
		if live[k] != v {
			return false
		}
	}
	return true
}

// portsWithin: the live ports are all TCP ports among the declared.
func portsWithin(ps []portSpec, declared []int) bool {
	if len(ps) == 0 {
		return false
	}
	for _, p := range ps {
		if p.named != "" || (p.end != 0 && p.end != p.port) || (p.proto != "TCP" && p.proto != "ANY") || !slices.Contains(declared, p.port) {
			return false
		}
	}
	return true
}

// netpolPeerNamespace is the namespace a NetworkPolicy peer's pods are
// in, when one: its namespaceSelector's pinned name, or without one the
// policy's own namespace.
func netpolPeerNamespace(sel *metav1.LabelSelector, own string) (string, bool) {
	if sel == nil {
		return own, true
	}
	if v, ok := sel.MatchLabels[namespaceNameLabel]; ok {
		return v, true
	}
	for _, r := range sel.MatchExpressions {
		if r.Key == namespaceNameLabel && r.Operator == metav1.LabelSelectorOpIn && len(r.Values) == 1 {
			return r.Values[0], true
		}
	}
	return "", false
}

// widenedFinding is a rule to a declared peer's namespace and ports that
// allows every pod there, not only the peer's.
func widenedFinding(check, subject, live, where, field string, p *allowPeer) ruleFinding {
	return ruleFinding{check: check, subject: subject,
		expected: "only the declared peer " + p.String(),
		actual:   live + ": every pod of namespace " + p.ns + ", not only the declared peer's",
		fix:      fmt.Sprintf("narrow %s of %s to the pods %s (spec.egress.allow's location of %s)", field, where, selectorText(p.pods), p.host),
	}
}

// peersText lists the declared in-cluster peers for Expected.
func (m *egressModel) peersText() string {
	if len(m.peers) == 0 {
		return ""
	}
	parts := make([]string, len(m.peers))
	for i, p := range m.peers {
		parts[i] = p.String()
	}
	return "; declared in-cluster peers: " + strings.Join(parts, ", ")
}

// explainPeerHost: a toFQDNs rule for a declared peer's own name on its
// port allows nothing more than the declaration (and matches nothing for
// a ClusterIP, which is why render writes toEndpoints).
func (m *egressModel) explainPeerHost(live policy.HostRule, ports []portSpec) bool {
	for _, p := range m.peers {
		if p.host == live.Host && onlyPort(ports, p.port) {
			return true
		}
	}
	return false
}
