package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/go-playground/validator/v10"
)

// Validate checks a defaulted policy and returns every problem at once.
func (p *Policy) Validate() error { return p.validate(nil) }

// why explains, per field, why a validator tag matters; indices are written [*].
var why = map[string]string{
	"spec.egress.allow[*].reason": "every allowance needs a reason",
	"spec.egress.allow[*].host":   "an allowance without a host allows nothing",
	"metadata.name":               "the name labels every metric and report",
	"spec.credentials[*].reason":  "every credential handed to a sandbox needs a reason",
	"spec.image.tools[*].name":    "a tool is found by its name",
}

var indexRE = regexp.MustCompile(`\[[0-9]+\]`)

func (p *Policy) validate(lines map[string]int, found ...*FieldError) error {
	c := &collector{lines: lines, errs: found}

	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			return ""
		}
		return name
	})
	if err := v.Struct(p); err != nil {
		var verrs validator.ValidationErrors
		if !errors.As(err, &verrs) {
			return &FieldError{Msg: "validate: " + err.Error()}
		}
		for _, fe := range verrs {
			pth := strings.TrimPrefix(fe.Namespace(), "Policy.")
			c.add(pth, tagMessage(fe, pth))
		}
	}

	if p.APIVersion != "" && p.APIVersion != APIVersion {
		c.add("apiVersion", fmt.Sprintf("must be %q, got %q", APIVersion, p.APIVersion))
	}
	if p.Kind != "" && p.Kind != Kind {
		c.add("kind", fmt.Sprintf("must be %q, got %q", Kind, p.Kind))
	}
	if p.Metadata.Name != "" && !dns1123Label(p.Metadata.Name) {
		c.add("metadata.name", "must be a DNS label: lower-case letters, digits and '-', at most 63 characters")
	}
	p.Spec.validate(c)
	return c.err()
}

func tagMessage(fe validator.FieldError, pth string) string {
	var msg string
	switch fe.Tag() {
	case "required":
		msg = "required"
	case "gte":
		msg = fmt.Sprintf("must be ≥ %s, got %v", fe.Param(), fe.Value())
	case "lte":
		msg = fmt.Sprintf("must be ≤ %s, got %v", fe.Param(), fe.Value())
	case "oneof":
		msg = fmt.Sprintf("must be one of %s, got %q", strings.Join(strings.Fields(fe.Param()), ", "), fe.Value())
	default:
		msg = fmt.Sprintf("fails %q", fe.Tag())
	}
	if w, ok := why[indexRE.ReplaceAllString(pth, "[*]")]; ok {
		msg += " — " + w
	}
	return msg
}

// writtenZeroPorts are the ports the file writes as 0, before the defaults
// would silently make them 443 (an allowance, a must-fail target) or every
// default port (the metadata target): a port is 1–65535, or left out.
func (p *Policy) writtenZeroPorts(lines map[string]int) []*FieldError {
	var out []*FieldError
	check := func(path string, port int) {
		if line, written := lines[path]; written && port == 0 {
			out = append(out, &FieldError{Path: path, Line: line, Msg: "must be 1–65535, got 0 — leave it out for the default"})
		}
	}
	e := &p.Spec.Egress
	for i := range e.Allow {
		check(fmt.Sprintf("spec.egress.allow[%d].port", i), e.Allow[i].Port)
	}
	// A target is decoded whole (string or object): its line is its own.
	for list, ts := range map[string][]Target{"hosts": e.MustFail.Hosts, "ips": e.MustFail.IPs} {
		for i := range ts {
			if at := fmt.Sprintf("spec.egress.mustFail.%s[%d]", list, i); ts[i].zeroPort {
				out = append(out, &FieldError{Path: at + ".port", Line: lines[at], Msg: "must be 1–65535, got 0 — leave it out for the default"})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	check("spec.egress.metadata.port", e.Metadata.Port)
	return out
}

// collector gathers FieldErrors and attaches line numbers from the decoder.
type collector struct {
	lines map[string]int
	errs  []*FieldError
}

func (c *collector) add(pth, msg string) {
	line := 0
	for q := pth; q != "" && line == 0; q = parentPath(q) {
		line = c.lines[q]
	}
	c.errs = append(c.errs, &FieldError{Path: pth, Line: line, Msg: msg})
}

func (c *collector) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	sort.SliceStable(c.errs, func(i, j int) bool {
		a, b := c.errs[i], c.errs[j]
		if a.Line != b.Line && a.Line != 0 && b.Line != 0 {
			return a.Line < b.Line
		}
		return false
	})
	out := make([]error, len(c.errs))
	for i, e := range c.errs {
		out[i] = e
	}
	return errors.Join(out...)
}

func parentPath(p string) string {
	if i := strings.LastIndexAny(p, ".["); i > 0 {
		return p[:i]
	}
	return ""
}

func (s *Spec) validate(c *collector) {
	s.validateSelection(c)
	s.Runtime.validate(c)
	s.Identity.validate(c)
	s.validatePrivileges(c)
	s.validateFilesystem(c)
	s.validateResources(c)
	s.validateSecrets(c)
	s.validateDevices(c)
	s.validateCredentials(c)
	s.validatePhases(c)
	s.validateTolerations(c)
	s.Egress.validate(c)
}

// validateSelection checks what marks a sandbox and where: the selector,
// the node selector and the declared namespaces.
func (s *Spec) validateSelection(c *collector) {
	if len(s.Selector.MatchLabels) == 0 {
		c.add("spec.selector.matchLabels", "required — without labels nothing marks a sandbox")
	}
	checkLabels(c, "spec.selector.matchLabels", s.Selector.MatchLabels)
	checkLabels(c, "spec.placement.nodeSelector", s.Placement.NodeSelector)
	seen := map[string]bool{}
	for i, ns := range s.Namespaces {
		pth := fmt.Sprintf("spec.namespaces[%d]", i)
		if !dns1123Label(ns) {
			c.add(pth, fmt.Sprintf("%q is not a valid namespace name", ns))
		}
		if seen[ns] {
			c.add(pth, fmt.Sprintf("%q is listed twice", ns))
		}
		seen[ns] = true
	}
}

// validatePrivileges checks the capabilities, the seccomp profile and the
// service-account token's path.
func (s *Spec) validatePrivileges(c *collector) {
	for i, capName := range s.Capabilities {
		if CapabilityNumber(capName) < 0 {
			c.add(fmt.Sprintf("spec.capabilities[%d]", i), fmt.Sprintf("unknown capability %q", capName))
		}
	}
	if s.Seccomp == SeccompLocalhost && s.SeccompProfile == "" {
		c.add("spec.seccompProfile", "required when spec.seccomp is Localhost")
	}
	if !strings.HasPrefix(s.TokenPath, "/") {
		c.add("spec.serviceAccountTokenPath", "must be an absolute path")
	}
}

// validateFilesystem checks the declared paths, the size limit, where the
// screenshot goes and the image reference.
func (s *Spec) validateFilesystem(c *collector) {
	checkPaths(c, "spec.filesystem.writable", s.Filesystem.Writable)
	checkPaths(c, "spec.filesystem.emptyAtStart", s.Filesystem.EmptyAtStart)
	if s.Filesystem.SizeLimit != "" {
		if _, err := ParseQuantity(s.Filesystem.SizeLimit); err != nil {
			c.add("spec.filesystem.sizeLimit", err.Error())
		}
	}
	if s.Browser.Screenshot {
		if !strings.HasPrefix(s.Browser.WriteTo, "/") {
			c.add("spec.browser.writeTo", "must be an absolute path")
		} else if s.Filesystem.ReadOnlyRoot && !s.Filesystem.WritableFor(s.Browser.WriteTo) {
			c.add("spec.browser.writeTo", fmt.Sprintf("%s is not under a writable path (spec.filesystem.writable): the screenshot could never be written", s.Browser.WriteTo))
		}
	}
	if s.Image.RequireDigest && s.Image.Ref != "" && !strings.Contains(s.Image.Ref, "@sha256:") {
		c.add("spec.image.ref", "requireDigest is set but the reference has no @sha256: digest")
	}
}

// validateSecrets checks the secret-name patterns are globs.
func (s *Spec) validateSecrets(c *collector) {
	for i, pat := range s.Secrets.EnvNamePatterns {
		pth := fmt.Sprintf("spec.secrets.envNamePatterns[%d]", i)
		if pat == "" {
			c.add(pth, "empty pattern")
		} else if _, err := path.Match(pat, "X"); err != nil {
			c.add(pth, fmt.Sprintf("bad glob %q: %v", pat, err))
		}
	}
}

// validateDevices checks the allowed devices are clean paths under /dev/.
func (s *Spec) validateDevices(c *collector) {
	for i, d := range s.Devices {
		if !strings.HasPrefix(d, "/dev/") || path.Clean(d) != d {
			c.add(fmt.Sprintf("spec.devices[%d]", i), fmt.Sprintf("must be a clean path under /dev/, got %q", d))
		}
	}
}

// validateCredentials checks each declared credential's mount path,
// Kubernetes scope and lifetime bound.
func (s *Spec) validateCredentials(c *collector) {
	for i, cr := range s.Credentials {
		if cr.MountPath != "" && !strings.HasPrefix(cr.MountPath, "/") {
			c.add(fmt.Sprintf("spec.credentials[%d].mountPath", i), "must be an absolute path")
		}
		if k := cr.Kubernetes; k != nil {
			k.validate(c, fmt.Sprintf("spec.credentials[%d].kubernetes", i))
		}
		if cr.MaxLifetime != nil && cr.MaxLifetime.Duration <= 0 {
			c.add(fmt.Sprintf("spec.credentials[%d].maxLifetime", i), "must be positive (leave it out to not bound the token's lifetime)")
		}
	}
}

// validateTolerations checks the probe pod's tolerations.
func (s *Spec) validateTolerations(c *collector) {
	for i, t := range s.Placement.Tolerations {
		if t.Operator == "Exists" && t.Value != "" {
			c.add(fmt.Sprintf("spec.placement.tolerations[%d].value", i), "must be empty when operator is Exists")
		}
	}
}

// validate checks the runtime classes and the isolation declared for them:
// a class whose isolation cannot be inferred from its name is declared.
func (r *Runtime) validate(c *collector) {
	for i, rc := range r.ClassNames {
		if !dns1123Subdomain(rc) {
			c.add(fmt.Sprintf("spec.runtime.classNames[%d]", i), fmt.Sprintf("%q is not a valid RuntimeClass name", rc))
			continue
		}
		if _, declared := r.Isolation[rc]; !declared {
			if _, ok := InferIsolation(rc); !ok {
				c.add(fmt.Sprintf("spec.runtime.classNames[%d]", i), fmt.Sprintf("the isolation of runtime class %q cannot be inferred from its name: declare it, spec.runtime.isolation: {%s: gvisor, vm or none}", rc, rc))
			}
		}
	}
	for class, iso := range r.Isolation {
		pth := "spec.runtime.isolation." + class
		if !slices.Contains(r.ClassNames, class) {
			c.add(pth, fmt.Sprintf("%q is not one of spec.runtime.classNames", class))
		}
		if iso != IsolationGVisor && iso != IsolationVM && iso != IsolationNone {
			c.add(pth, fmt.Sprintf("must be one of gvisor, vm, none, got %q", iso))
		}
	}
}

// validateResources checks the sandbox's limits and requests and the probe
// pod's requests: known resources, valid quantities.
func (s *Spec) validateResources(c *collector) {
	for _, kind := range []string{"resources.limits", "resources.requests", "probe.requests"} {
		m := s.Resources.Limits
		switch kind {
		case "resources.requests":
			m = s.Resources.Requests
		case "probe.requests":
			m = s.Probe.Requests
		}
		for _, name := range sortedKeys(m) {
			pth := "spec." + kind + "." + name
			switch name {
			case "cpu", "memory", "ephemeral-storage":
			default:
				c.add(pth, "unknown resource: use cpu, memory or ephemeral-storage")
				continue
			}
			if _, err := ParseQuantity(m[name]); err != nil {
				c.add(pth, err.Error())
			}
		}
	}
}

func (e *Egress) validate(c *collector) {
	e.validateProxy(c)
	if e.Timeout.Duration > 60e9 {
		c.add("spec.egress.timeout", fmt.Sprintf("must be at most 60s, got %s", e.Timeout.Duration))
	}
	rules := e.validateAllow(c)
	e.validateProof(c)
	validateMustFail(c, "hosts", e.MustFail.Hosts, false, rules)
	validateMustFail(c, "ips", e.MustFail.IPs, true, rules)
	e.Metadata.validate(c)
	if d := e.DNS.ClusterDomain; d != "" {
		if err := checkHostname(strings.TrimSuffix(d, ".")); err != nil {
			c.add("spec.egress.dns.clusterDomain", err.Error())
		}
	}
	for i, d := range e.DNS.Domains {
		if err := checkHostname(d); err != nil {
			c.add(fmt.Sprintf("spec.egress.dns.domains[%d]", i), err.Error())
		}
	}
	e.validateLocations(c)
	e.validateFronting(c)
}

// validateProxy checks the proxy is a forward proxy's URL with a port.
func (e *Egress) validateProxy(c *collector) {
	if e.Proxy != "" {
		u, err := url.Parse(e.Proxy)
		switch {
		case err != nil:
			c.add("spec.egress.proxy", fmt.Sprintf("not a URL: %v", err))
		case u.Scheme != "http" && u.Scheme != "https":
			c.add("spec.egress.proxy", fmt.Sprintf("scheme must be http or https, got %q", u.Scheme))
		case u.Hostname() == "":
			c.add("spec.egress.proxy", "missing host")
		case u.Port() == "":
			c.add("spec.egress.proxy", "missing port (a forward proxy has no default port: write http://host:3128)")
		}
	}
}

// validateMustFail checks the must-fail targets under field (hosts or
// ips; wantIP for ips): each parses, agrees with its port and expected
// verdict, and is not also allowed by one of rules (the allowances' host
// rules), which would have it both answer and fail.
func validateMustFail(c *collector, field string, ts []Target, wantIP bool, rules []HostRule) {
	for i, t := range ts {
		pth := fmt.Sprintf("spec.egress.mustFail.%s[%d]", field, i)
		d, err := ParseDestination(t.Target)
		if err != nil {
			c.add(pth, err.Error())
			continue
		}
		if wantIP && !d.IsIP() {
			c.add(pth, fmt.Sprintf("%q is a name: list it under mustFail.hosts", t.Target))
		}
		if t.Port != 0 && d.Port != 0 && t.Port != d.Port {
			c.add(pth+".port", fmt.Sprintf("%d contradicts the port in %q", t.Port, t.Target))
		}
		if t.Expect != "" && !slices.Contains(FailureVerdicts, t.Expect) {
			c.add(pth+".expect", fmt.Sprintf("must be one of %s, got %q", strings.Join(FailureVerdicts, ", "), t.Expect))
		}
		port := t.Port
		if port == 0 {
			port = d.Port
		}
		if port == 0 {
			port = DefaultMustFailPort
		}
		for j, r := range rules {
			if r.Host != "" && r.Matches(d.DialHost(), port) && !d.Prefix.IsValid() {
				c.add(pth, fmt.Sprintf("%s is also allowed by spec.egress.allow[%d] (%s): it cannot both answer and fail", d, j, r))
			}
		}
	}
}

// validateFronting checks an accepted-fronting declaration says why and
// has a proxy to front through.
func (e *Egress) validateFronting(c *collector) {
	if f := e.Fronting; f != nil {
		switch {
		case strings.TrimSpace(f.Accepted) == "":
			c.add("spec.egress.fronting.accepted", "empty: say why domain fronting through the proxy is accepted, or remove spec.egress.fronting")
		case e.Proxy == "":
			c.add("spec.egress.fronting", "set without spec.egress.proxy: there is no proxy to front through")
		}
	}
}

// validateAllow checks every allowance and returns their host rules (the
// zero rule for one that does not parse).
func (e *Egress) validateAllow(c *collector) []HostRule {
	rules := make([]HostRule, len(e.Allow))
	for i, a := range e.Allow {
		pth := fmt.Sprintf("spec.egress.allow[%d]", i)
		if a.Host == "" {
			continue // reported by validator
		}
		r, err := ParseHostRule(a.Host)
		if err != nil {
			c.add(pth+".host", err.Error())
			continue
		}
		if r.Port != 0 && a.Port != r.Port {
			c.add(pth+".port", fmt.Sprintf("%d contradicts the port in host %q", a.Port, a.Host))
		}
		r.Port = a.Port
		rules[i] = r
		if a.Reason != "" && strings.TrimSpace(a.Reason) == "" {
			c.add(pth+".reason", "blank — every allowance needs a reason")
		}
		if a.Probe != "" {
			if !r.Matches(a.Probe, a.Port) {
				c.add(pth+".probe", fmt.Sprintf("%q is not matched by %s, so probing it proves nothing about this allowance", a.Probe, r))
			} else if strings.Contains(a.Probe, "*") {
				c.add(pth+".probe", "must be a concrete name, not a pattern")
			}
		}
		for j := 0; j < i; j++ {
			if rules[j] == r {
				c.add(pth, fmt.Sprintf("duplicates spec.egress.allow[%d] (%s)", j, r))
			}
		}
	}
	return rules
}

// validateLocations checks where the proxy, the resolver and the
// in-cluster peers run.
func (e *Egress) validateLocations(c *collector) {
	if e.ProxyLocation != nil {
		checkLocation(c, "spec.egress.proxyLocation", e.ProxyLocation)
		switch ip, err := e.ProxyAddr(); {
		case e.Proxy == "":
			c.add("spec.egress.proxyLocation", "set without spec.egress.proxy: there is no proxy to locate")
		case err == nil && len(e.ProxyLocation.CIDRs) > 0 && !anyContains(e.ProxyLocation.Prefixes(), ip):
			c.add("spec.egress.proxyLocation.cidrs", fmt.Sprintf("none contains the proxy's address %s (spec.egress.proxy): the rendered policy would allow the wrong place", ip))
		}
	}
	if e.DNS.ResolverLocation != nil {
		checkLocation(c, "spec.egress.dns.resolverLocation", e.DNS.ResolverLocation)
		onlyAllowLocation(c, "spec.egress.dns.resolverLocation", e.DNS.ResolverLocation)
	}
	if e.ProxyLocation != nil {
		onlyAllowLocation(c, "spec.egress.proxyLocation", e.ProxyLocation)
	}
	for i, a := range e.Allow {
		if a.Location != nil {
			checkAllowLocation(c, fmt.Sprintf("spec.egress.allow[%d]", i), a)
		}
	}
}

// onlyAllowLocation refuses the fields only an allowance's location has.
func onlyAllowLocation(c *collector, pth string, l *Location) {
	if l.Service != "" {
		c.add(pth+".service", "only an allowance's location (spec.egress.allow[].location) names a Service")
	}
	if len(l.Ports) > 0 {
		c.add(pth+".ports", "only an allowance's location (spec.egress.allow[].location) has ports")
	}
}

// checkAllowLocation: an in-cluster peer is one service, named by one
// host that the sandbox resolves, in the namespace the location gives.
func checkAllowLocation(c *collector, pth string, a Allowance) {
	l := a.Location
	lp := pth + ".location"
	checkLocation(c, lp, l)
	if strings.Contains(a.Host, "*") {
		c.add(lp, fmt.Sprintf("set on the pattern %q: a location is where one service runs; allow it by its Service name", a.Host))
	}
	if l.Service != "" && !dns1123Label(l.Service) {
		c.add(lp+".service", fmt.Sprintf("%q is not a valid Service name", l.Service))
	}
	if ns := ServiceNamespace(NormalizeHost(a.Host)); ns != "" && l.Namespace != "" && ns != l.Namespace {
		c.add(lp+".namespace", fmt.Sprintf("%q, but the host %s names a Service in namespace %q", l.Namespace, a.Host, ns))
	}
	for j, p := range l.Ports {
		if p < 1 || p > 65535 {
			c.add(fmt.Sprintf("%s.ports[%d]", lp, j), fmt.Sprintf("must be 1-65535, got %d", p))
		}
	}
}

// ServiceNamespace reads the namespace out of a Kubernetes Service name:
// "svc.ns.svc" or "svc.ns.svc.<cluster domain>" ("" for any other name;
// "svc.ns" is too like an outside name to tell).
func ServiceNamespace(host string) string {
	labels := strings.Split(host, ".")
	if len(labels) >= 3 && labels[2] == "svc" {
		return labels[1]
	}
	return ""
}

// ProxyAddr is the proxy's address when spec.egress.proxy names one by
// address rather than by name.
func (e *Egress) ProxyAddr() (netip.Addr, error) {
	u, err := url.Parse(e.Proxy)
	if err != nil {
		return netip.Addr{}, err
	}
	a, err := netip.ParseAddr(u.Hostname())
	return a.Unmap(), err
}

func anyContains(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// checkLocation: exactly one form (pods or addresses), valid names and
// labels, and CIDRs that are canonical and narrower than the whole internet
// (a location is where one service runs, and the rendered rule opens it).
func checkLocation(c *collector, pth string, l *Location) {
	pods := l.Namespace != "" || l.PodSelector != nil || l.Service != ""
	switch {
	case pods && len(l.CIDRs) > 0:
		c.add(pth, "give either namespace (and podSelector) or cidrs, not both: a location is pods or addresses")
	case !pods && len(l.CIDRs) == 0:
		c.add(pth, "empty: give namespace (and podSelector) for pods, or cidrs for addresses")
	}
	if pods {
		switch {
		case l.Namespace == "":
			c.add(pth+".namespace", "required with podSelector or service: a pod selector alone would mean the sandbox's own namespace")
		case !dns1123Label(l.Namespace):
			c.add(pth+".namespace", fmt.Sprintf("%q is not a valid namespace name", l.Namespace))
		}
		if l.PodSelector != nil {
			if len(l.PodSelector.MatchLabels) == 0 {
				c.add(pth+".podSelector.matchLabels", "required: an empty selector means every pod of the namespace; leave podSelector out to say so")
			}
			checkLabels(c, pth+".podSelector.matchLabels", l.PodSelector.MatchLabels)
		}
	}
	seen := map[netip.Prefix]bool{}
	for i, s := range l.CIDRs {
		cp := fmt.Sprintf("%s.cidrs[%d]", pth, i)
		p, err := parseLocationCIDR(s)
		switch {
		case err != nil:
			c.add(cp, err.Error())
		case p.Masked() != p:
			c.add(cp, fmt.Sprintf("%q has host bits set (did you mean %q?)", s, p.Masked()))
		case p.Bits() == 0:
			c.add(cp, fmt.Sprintf("%q is every address: a location is where one service runs", s))
		case seen[p]:
			c.add(cp, fmt.Sprintf("%q is listed twice", s))
		}
		seen[p] = true
	}
}

func checkPaths(c *collector, field string, paths []string) {
	seen := map[string]bool{}
	for i, p := range paths {
		pth := field + "[" + strconv.Itoa(i) + "]"
		switch {
		case !strings.HasPrefix(p, "/"):
			c.add(pth, fmt.Sprintf("%q must be an absolute path", p))
		case p == "/":
			c.add(pth, "must not be / (that is the root itself)")
		case path.Clean(p) != p:
			c.add(pth, fmt.Sprintf("%q is not clean (did you mean %q?)", p, path.Clean(p)))
		case seen[p]:
			c.add(pth, fmt.Sprintf("%q is listed twice", p))
		}
		seen[p] = true
	}
}

var (
	labelNameRE  = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$`)
	labelValueRE = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$`)
	dnsLabelRE   = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

func checkLabels(c *collector, field string, m map[string]string) {
	for _, k := range sortedKeys(m) {
		pth := field + "." + k
		name := k
		if pre, n, ok := strings.Cut(k, "/"); ok {
			if !dns1123Subdomain(pre) {
				c.add(pth, fmt.Sprintf("label prefix %q is not a DNS subdomain", pre))
			}
			name = n
		}
		if !labelNameRE.MatchString(name) {
			c.add(pth, fmt.Sprintf("%q is not a valid label name", k))
		}
		if !labelValueRE.MatchString(m[k]) {
			c.add(pth, fmt.Sprintf("%q is not a valid label value", m[k]))
		}
	}
}

func dns1123Label(s string) bool { return dnsLabelRE.MatchString(s) }

func dns1123Subdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !dns1123Label(l) {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// validate refuses root anywhere in the identity unless allowRoot declares
// it: "uid: 0" alone is as likely a placeholder as a decision, and the
// default must never be the weakest choice.
func (id *Identity) validate(c *collector) {
	const hint = "a sandbox runs as a non-root identity; if it really must run as root, say so with spec.identity.allowRoot: true"
	var roots []string
	if id.UID == 0 {
		roots = append(roots, "spec.identity.uid")
	}
	if id.GID == 0 {
		roots = append(roots, "spec.identity.gid")
	}
	if id.FSGroup != nil && *id.FSGroup == 0 {
		roots = append(roots, "spec.identity.fsGroup")
	}
	for i, g := range id.SupplementalGroups {
		if g == 0 {
			roots = append(roots, fmt.Sprintf("spec.identity.supplementalGroups[%d]", i))
		}
	}
	switch {
	case len(roots) > 0 && !id.AllowRoot:
		for _, pth := range roots {
			what := "root"
			if pth != "spec.identity.uid" {
				what = "the root group"
			}
			c.add(pth, "0 is "+what+" — "+hint)
		}
	case len(roots) == 0 && id.AllowRoot:
		c.add("spec.identity.allowRoot", fmt.Sprintf("true, but no id is 0 (uid %d, gid %d): remove it, so the policy does not claim a weakening it does not use", id.UID, id.GID))
	}
}

func (k *KubeCredential) validate(c *collector, pth string) {
	if k.Kubeconfig != "" && k.Token != "" {
		c.add(pth, "kubeconfig and token are exclusive: a kubeconfig names its own user")
	}
	for _, f := range []struct{ name, v string }{{"kubeconfig", k.Kubeconfig}, {"token", k.Token}} {
		if f.v != "" && (strings.HasPrefix(f.v, "/") || path.Clean(f.v) != f.v || strings.HasPrefix(f.v, "..")) {
			c.add(pth+"."+f.name, fmt.Sprintf("must be a file name under mountPath, got %q", f.v))
		}
	}
	if k.Server != "" {
		if u, err := url.Parse(k.Server); err != nil || u.Scheme != "https" || u.Host == "" {
			c.add(pth+".server", fmt.Sprintf("must be an https:// URL, got %q", k.Server))
		}
		if k.Token == "" {
			c.add(pth+".server", "only with token: a kubeconfig names its own server")
		}
	}
	if k.CAFile != "" && k.Token == "" {
		c.add(pth+".caFile", "only with token: a kubeconfig names its own CA")
	}
	if k.Scope.Preset == "" && len(k.Scope.Allow) == 0 {
		c.add(pth+".scope", "declare what the credential may do: preset (view-only or none) and/or allow rules")
	}
	for j, r := range k.Scope.Allow {
		for _, v := range r.Verbs {
			if !slices.Contains(KubeVerbs, v) {
				c.add(fmt.Sprintf("%s.scope.allow[%d].verbs", pth, j), fmt.Sprintf("unknown verb %q (one of %s)", v, strings.Join(KubeVerbs, ", ")))
			}
		}
	}
	for j, ns := range k.Namespaces {
		if !dns1123Label(ns) {
			c.add(fmt.Sprintf("%s.namespaces[%d]", pth, j), fmt.Sprintf("must be a namespace name, got %q", ns))
		}
	}
}

// validatePhases: the workspace, its baseline and the caches are clean
// absolute paths, and none contradicts another: a baseline or a cache on
// the workspace (or a cache under a writable path) is one a phase can
// rewrite, and a workspace the phases share cannot be empty at start.
func (s *Spec) validatePhases(c *collector) {
	ph := s.Phases
	checkAbs := func(pth, p string) bool {
		switch {
		case !strings.HasPrefix(p, "/"):
			c.add(pth, fmt.Sprintf("%q must be an absolute path", p))
		case p == "/":
			c.add(pth, "must not be / (that is the root itself)")
		case path.Clean(p) != p:
			c.add(pth, fmt.Sprintf("%q is not clean (did you mean %q?)", p, path.Clean(p)))
		default:
			return true
		}
		return false
	}
	under := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	ws := ph.Workspace != "" && checkAbs("spec.phases.workspace", ph.Workspace)
	if ws && slices.Contains(s.Filesystem.EmptyAtStart, ph.Workspace) {
		c.add("spec.phases.workspace", fmt.Sprintf("%s is also in spec.filesystem.emptyAtStart: a workspace the phases share is not empty when a later phase starts", ph.Workspace))
	}
	if ph.Baseline != "" {
		switch {
		case ph.Workspace == "":
			c.add("spec.phases.baseline", "set without spec.phases.workspace: there is no workspace to compare with it")
		case checkAbs("spec.phases.baseline", ph.Baseline) && ws && under(ph.Baseline, ph.Workspace):
			c.add("spec.phases.baseline", fmt.Sprintf("%s is on the workspace %s: a phase could rewrite what vouches for the workspace; mount it read-only from elsewhere", ph.Baseline, ph.Workspace))
		}
	}
	seen := map[string]bool{}
	for i, cache := range ph.Caches {
		pth := fmt.Sprintf("spec.phases.caches[%d]", i)
		switch {
		case !checkAbs(pth, cache):
		case seen[cache]:
			c.add(pth, fmt.Sprintf("%q is listed twice", cache))
		case ws && under(cache, ph.Workspace):
			c.add(pth, fmt.Sprintf("%s is on the workspace %s: the phases write there, so the cache could never be read-only", cache, ph.Workspace))
		case s.Filesystem.WritableFor(cache):
			c.add(pth, fmt.Sprintf("%s is under a writable path (spec.filesystem.writable): the cache could never be read-only", cache))
		}
		seen[cache] = true
	}
}
