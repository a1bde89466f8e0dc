package policy

import (
	"strings"
	"time"
)

// DefaultSecretPatterns are the environment variable names that count as
// credentials when a policy does not list its own.
var DefaultSecretPatterns = []string{"*_KEY", "*_TOKEN", "*_SECRET", "*PASSWORD*"}

// strictDefaults is the Policy a document is decoded onto. It holds the
// defaults of fields whose zero value is itself a (weak) choice — uid 0,
// a writable root, unpinned images — and so cannot be told "unset" once
// decoded: only what the file says overrides them. Every other default is
// filled in by Default.
func strictDefaults() Policy {
	return Policy{Spec: Spec{
		Identity:   Identity{UID: DefaultUID, GID: DefaultGID},
		Filesystem: Filesystem{ReadOnlyRoot: true},
		Image:      Image{RequireDigest: true},
	}}
}

// Default fills in every unset field with its documented default. It is
// idempotent and runs before validation, so validation sees what will be used.
// The defaults of uid, gid, readOnlyRoot and requireDigest are applied when a
// file is decoded (see strictDefaults): on a Policy built in Go their zero
// values stand, and validation refuses uid 0 without identity.allowRoot.
func (p *Policy) Default() {
	s := &p.Spec
	if s.Seccomp == "" {
		s.Seccomp = DefaultSeccomp
	}
	if s.ServiceAccount == "" {
		s.ServiceAccount = DefaultTokenExpectation
	}
	if s.TokenPath == "" {
		s.TokenPath = DefaultTokenPath
	}
	if s.NoNewPrivileges == nil {
		t := true
		s.NoNewPrivileges = &t
	}
	if s.Runtime.ClassNames == nil {
		s.Runtime.ClassNames = []string{} // "any runtime", written out by Effective
	}
	if s.Capabilities == nil {
		s.Capabilities = []string{}
	}
	for i, c := range s.Capabilities {
		s.Capabilities[i] = NormalizeCapability(c)
	}
	if s.Secrets.EnvNamePatterns == nil {
		s.Secrets.EnvNamePatterns = append([]string(nil), DefaultSecretPatterns...)
	}
	for i := range s.Image.Tools {
		if s.Image.Tools[i].Timeout.Duration == 0 {
			s.Image.Tools[i].Timeout.Duration = DefaultToolTimeout
		}
	}
	if s.Browser.Screenshot && s.Browser.WriteTo == "" {
		s.Browser.WriteTo = "/tmp"
	}
	if s.Browser.Timeout.Duration == 0 {
		s.Browser.Timeout.Duration = DefaultBrowserTimeout
	}
	if s.Probe.Deadline.Duration == 0 {
		s.Probe.Deadline.Duration = 2 * time.Minute
	}
	e := &s.Egress
	if e.Timeout.Duration == 0 {
		e.Timeout.Duration = DefaultEgressTimeout
	}
	e.defaultProof()
	if e.DNS.ArbitraryNames == "" {
		e.DNS.ArbitraryNames = "deny"
	}
	for i := range e.Allow {
		a := &e.Allow[i]
		if r, err := ParseHostRule(a.Host); err == nil {
			a.Host = r.Host
			if a.Port == 0 {
				a.Port = r.Port
			}
		}
		if a.Port == 0 {
			a.Port = DefaultAllowPort
		}
		if a.Scheme == "" {
			a.Scheme = defaultScheme(a.Port)
			if a.Location != nil && a.Scheme == "tcp" {
				// An in-cluster peer (a broker) must answer as an
				// application: a bare TCP accept could be anything in
				// the path. A peer that is no HTTP server says tcp.
				a.Scheme = "http"
			}
		}
		a.Probe = NormalizeHost(a.Probe)
	}
	for i := range e.DNS.Domains {
		e.DNS.Domains[i] = NormalizeHost(e.DNS.Domains[i])
	}
}

func defaultScheme(port int) string {
	switch port {
	case 443, 8443:
		return "https"
	case 80, 8080:
		return "http"
	}
	return "tcp"
}

// NormalizeCapability turns "cap_net_raw" or "NET_RAW" into "NET_RAW".
func NormalizeCapability(c string) string {
	c = strings.ToUpper(strings.TrimSpace(c))
	return strings.TrimPrefix(c, "CAP_")
}

// NoNewPrivs reports the effective no_new_privs expectation.
func (s *Spec) NoNewPrivs() bool { return s.NoNewPrivileges == nil || *s.NoNewPrivileges }

// WritableFor reports whether path lies in one of the declared writable paths.
func (f Filesystem) WritableFor(path string) bool {
	for _, w := range f.Writable {
		if path == w || strings.HasPrefix(path, strings.TrimSuffix(w, "/")+"/") {
			return true
		}
	}
	return false
}
