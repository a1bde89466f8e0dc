package result

import (
	"fmt"
	"strings"
)

// Who stopped a network attempt (Attempt.StoppedBy).
const (
	StoppedByNetwork  = "network"  // a drop, a reset or an ICMP error on the path
	StoppedByProxy    = "proxy"    // the forward proxy refused the destination (its deny status)
	StoppedByResolver = "resolver" // the name did not resolve (NXDOMAIN, REFUSED, no answer)
	StoppedByUpstream = "upstream" // the proxy let the destination through; only the far end failed
)

// SignalClosedAtHello is the signal of a tunnel that closed at a
// ClientHello with nothing sent back: a proxy that checks SNI cutting it,
// or a front that drops names it does not serve. Only a control vantage
// asking the front directly tells the two apart.
const SignalClosedAtHello = "the tunnel closed at the ClientHello: nothing came back"

// Attempt is the evidence of one network attempt, so that a reader can tell
// a drop (errno ETIMEDOUT, waited ≈ timeout, stopped by the network) from a
// refusal (ECONNREFUSED, waited ≈ 0) from a proxy's deny (proxyStatus 403,
// stopped by the proxy) from an attempt that never ran (attempted false)
// without reading code. Times are seconds.
type Attempt struct {
	// Attempted is false when the attempt never ran (the run ended first):
	// such an attempt is an error, never a pass.
	Attempted bool `json:"attempted"`
	// Started is when it began, after the start of the egress run; an
	// attempt queued behind others (concurrency) starts late but still gets
	// its whole Timeout.
	Started float64 `json:"started"`
	// Waited is how long it waited for its outcome, of its own Timeout.
	Waited  float64 `json:"waited"`
	Timeout float64 `json:"timeout"`
	// StoppedBy names what stopped it (StoppedBy*); empty when it got through.
	StoppedBy string `json:"stoppedBy,omitempty"`
	// Errno is the system error of the dial or DNS exchange (ECONNREFUSED,
	// ETIMEDOUT, …), Signal what it means on the wire ("TCP reset or ICMP
	// port-unreachable", "no answer: dropped").
	Errno  string `json:"errno,omitempty"`
	Signal string `json:"signal,omitempty"`
	// ProxyStatus is the forward proxy's status line ("403 Filtered").
	ProxyStatus string `json:"proxyStatus,omitempty"`
	// Resolver is the DNS server that was asked, Rcode its answer (NXDOMAIN,
	// REFUSED, NOERROR).
	Resolver string `json:"resolver,omitempty"`
	Rcode    string `json:"rcode,omitempty"`
	// Addresses holds one entry per address dialled (a name's A and AAAA).
	Addresses []AddressAttempt `json:"addresses,omitempty"`
	// Resolved are the addresses a host name resolved to, where a control
	// vantage dialled it: the runner has the sandbox dial them when the
	// sandbox's own resolver stopped the name (a DNS-only block).
	Resolved []string `json:"resolved,omitempty"`
}

// AddressAttempt is one address of a multi-address attempt.
type AddressAttempt struct {
	Address string  `json:"address"`
	Class   string  `json:"class"`
	Errno   string  `json:"errno,omitempty"`
	Signal  string  `json:"signal,omitempty"`
	Waited  float64 `json:"waited"`
}

// Lines renders the evidence for people (JUnit bodies, verbose text).
func (a *Attempt) Lines() []string {
	if a == nil {
		return nil
	}
	if !a.Attempted {
		return []string{"attempt:  not attempted (the egress run ended before it could start)"}
	}
	out := []string{fmt.Sprintf("attempt:  started +%.3fs, waited %.3fs of its %gs timeout", a.Started, a.Waited, a.Timeout)}
	var stop []string
	if a.StoppedBy != "" {
		stop = append(stop, "by the "+a.StoppedBy)
	}
	if a.ProxyStatus != "" {
		stop = append(stop, "proxy answered "+a.ProxyStatus)
	}
	if a.Rcode != "" {
		r := "rcode " + a.Rcode
		if a.Resolver != "" {
			r += " from " + a.Resolver
		}
		stop = append(stop, r)
	}
	if e := errnoText(a.Errno, a.Signal); e != "" {
		stop = append(stop, e)
	}
	if len(stop) > 0 {
		label := "stopped:  "
		if a.StoppedBy == "" {
			label = "outcome:  "
		}
		out = append(out, label+strings.Join(stop, "; "))
	}
	for _, ad := range a.Addresses {
		line := fmt.Sprintf("address:  %s %s after %.3fs", ad.Address, ad.Class, ad.Waited)
		if e := errnoText(ad.Errno, ad.Signal); e != "" {
			line += " (" + e + ")"
		}
		out = append(out, line)
	}
	return out
}

func errnoText(errno, signal string) string {
	switch {
	case errno != "" && signal != "":
		return errno + " = " + signal
	case errno != "":
		return errno
	}
	return signal
}
