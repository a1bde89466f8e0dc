package lab

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// errnos: what a TCP connect from the sandbox ends with, per blocking
// flavour, for IPv4 and IPv6 (hack/lab/README.md measures them).
var errnos = map[string][2]string{
	"drop": {"ETIMEDOUT", "ETIMEDOUT"}, "tcp-reset": {"ECONNREFUSED", "ECONNREFUSED"},
	"icmp-port-unreachable": {"ECONNREFUSED", "ECONNREFUSED"}, "icmp-host-unreachable": {"EHOSTUNREACH", "EHOSTUNREACH"},
	"icmp-admin-prohibited": {"EHOSTUNREACH", "EACCES"}, "icmp-net-unreachable": {"ENETUNREACH", "ENETUNREACH"},
}

func envKey(s string) string {
	s, _, _ = strings.Cut(s, ".")
	return strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
}

// writeEnv writes lab.env (shell, `. lab.env`).
func (l *Lab) writeEnv() error {
	var b strings.Builder
	kv := func(k string, v any) { fmt.Fprintf(&b, "%s='%v'\n", k, v) }
	fmt.Fprintf(&b, "# sandprobe network lab (%s); source me\n", time.Now().UTC().Format("2006-01-02T15:04:05Z"))
	for _, p := range [][2]string{{"LAB_DIR", l.Dir}, {"LAB_NETNS", NSSandbox}, {"LAB_NETNS_PATH", "/run/netns/" + NSSandbox},
		{"LAB_ROUTER_NETNS", NSRouter}, {"LAB_CONTROL_NETNS", NSControl}, {"LAB_CONTROL_IP4", ControlIP4},
		{"LAB_RESOLV_CONF", etcNetns + "/" + NSSandbox + "/resolv.conf"}, {"LAB_SANDBOX_IP4", SandboxIP4}, {"LAB_SANDBOX_IP6", SandboxIP6},
		{"LAB_GATEWAY_IP4", RouterSandboxIP4}, {"LAB_GATEWAY_IP6", RouterSandboxIP6}, {"LAB_RESOLVER", ResolverIP4},
		{"LAB_RESOLVER6", ResolverIP6}, {"LAB_RESOLVER_PORT", fmt.Sprint(ResolverPort)}, {"LAB_PROXY_URL", ProxyURL},
		{"LAB_PROXY_URL6", ProxyURL6}, {"LAB_PROXY_HOST", ProxyIP4}, {"LAB_PROXY_HOST6", ProxyIP6}, {"LAB_PROXY_PORT", fmt.Sprint(ProxyPort)},
		{"LAB_PROXY_DENIED_STATUS", fmt.Sprint(ProxyDeniedStatus)}, {"LAB_PROXY_LOG_TINYPROXY", l.Dir + "/proxy/access.log"},
		{"LAB_PROXY_LOG_SQUID", l.Dir + "/proxy/squid/access.log"}} {
		kv(p[0], p[1])
	}
	fmt.Fprintf(&b, "LAB_SERVED_DIR='%s/served' # srv-*.log: time client host port scheme path, per request answered\n", l.Dir)
	kv("LAB_CA", l.Dir+"/ca.pem")
	kv("LAB_HTTP_PORT", HTTPPort)
	kv("LAB_HTTPS_PORT", HTTPSPort)
	var names []string
	for _, h := range AllowedHosts {
		k := "LAB_ALLOWED_" + envKey(h.Name)
		kv(k, h.Name)
		kv(k+"_IP4", h.IP4)
		kv(k+"_IP6", h.IP6)
		names = append(names, h.Name)
	}
	kv("LAB_ALLOWED_HOSTS", strings.Join(names, " "))
	kv("LAB_ALLOWED_PATTERNS", strings.Join(AllowedPatterns, " "))
	l.envTargets(&b, kv)
	return os.WriteFile(filepath.Join(l.Dir, "lab.env"), []byte(b.String()), 0o644)
}

func (l *Lab) envTargets(b *strings.Builder, kv func(string, any)) {
	var names, raw4, raw6, meta4, meta6, ports []string
	for _, t := range BlockedHosts {
		k := "LAB_BLOCKED_" + envKey(t.Key)
		kv(k, t.Key)
		kv(k+"_IP4", t.IP4)
		kv(k+"_IP6", t.IP6)
		kv(k+"_FLAVOUR", t.Flavour)
		kv(k+"_RULE", t.Rule)
		names = append(names, t.Key)
	}
	kv("LAB_BLOCKED_HOSTS", strings.Join(names, " "))
	for _, t := range RawTargets {
		k := "LAB_RAW_" + envKey(t.Key)
		kv(k+"_IP4", t.IP4)
		kv(k+"_IP6", t.IP6)
		kv(k+"_FLAVOUR", t.Flavour)
		kv(k+"_RULE", t.Rule)
		raw4, raw6 = append(raw4, t.IP4), append(raw6, t.IP6)
	}
	kv("LAB_RAW_IP4S", strings.Join(raw4, " "))
	kv("LAB_RAW_IP6S", strings.Join(raw6, " "))
	for _, s := range MetadataStandins {
		meta4, meta6 = append(meta4, s.IP4), append(meta6, s.IP6)
	}
	for _, p := range MetadataPorts {
		ports = append(ports, fmt.Sprint(p))
	}
	for _, p := range [][2]string{{"LAB_METADATA_NAME", MetadataName}, {"LAB_METADATA_IP4", MetadataIP4}, {"LAB_METADATA_IP6", MetadataIP6},
		{"LAB_METADATA_PORT", fmt.Sprint(HTTPPort)}, {"LAB_METADATA_IP4S", strings.Join(meta4, " ")}, {"LAB_METADATA_IP6S", strings.Join(meta6, " ")},
		{"LAB_METADATA_PORTS", strings.Join(ports, " ")}, {"LAB_NXDOMAIN_EXAMPLE", "nosuchhost.lab.test"},
		{"LAB_AUTHORITY_IP4", AuthorityIP4}, {"LAB_AUTHORITY_IP6", AuthorityIP6}, {"LAB_AUTHORITY_LOG", l.Dir + "/dns/queries.log"},
		{"LAB_CANARY_ZONE", CanaryZone}, {"LAB_NFT_TABLE", NftTable}, {"LAB_NFT_CHAIN", NftChain},
		{"LAB_NFT_RULES", strings.Join(RuleNames(), " ")}, {"LAB_BROKEN_STATES", strings.Join(BrokenStates, " ")}} {
		kv(p[0], p[1])
	}
}

type jsonTarget struct {
	Name       string `json:"name,omitempty"`
	Key        string `json:"key,omitempty"`
	IPv4       string `json:"ipv4"`
	IPv6       string `json:"ipv6"`
	Ports      []int  `json:"ports"`
	Rule       string `json:"rule,omitempty"`
	Rule6      string `json:"rule6,omitempty"`
	Flavour    string `json:"flavour,omitempty"`
	Errno4     string `json:"errno_ipv4,omitempty"`
	Errno6     string `json:"errno_ipv6,omitempty"`
	DirectRule string `json:"direct_rule,omitempty"`
	DirectFl   string `json:"direct_flavour,omitempty"`
	DirectE4   string `json:"direct_errno_ipv4,omitempty"`
	DirectE6   string `json:"direct_errno_ipv6,omitempty"`
}

func target(name, key string, t Target) jsonTarget {
	e := errnos[t.Flavour]
	return jsonTarget{Name: name, Key: key, IPv4: t.IP4, IPv6: t.IP6, Ports: []int{HTTPPort, HTTPSPort}, Rule: t.Rule, Rule6: t.Rule + "6",
		Flavour: t.Flavour, Errno4: e[0], Errno6: e[1]}
}

// writeJSON writes lab.json: lab.env's data, structured.
func (l *Lab) writeJSON() error {
	type m = map[string]any
	var allowed, blocked, raw []jsonTarget
	for _, h := range AllowedHosts {
		allowed = append(allowed, jsonTarget{Name: h.Name, IPv4: h.IP4, IPv6: h.IP6, Ports: []int{HTTPPort, HTTPSPort},
			DirectRule: "deny-direct-allowed", DirectFl: "icmp-admin-prohibited", DirectE4: "EHOSTUNREACH", DirectE6: "EACCES"})
	}
	for _, t := range BlockedHosts {
		blocked = append(blocked, target(t.Key, "", t))
	}
	for _, t := range RawTargets {
		raw = append(raw, target("", t.Key, t))
	}
	var standins []m
	for _, s := range MetadataStandins {
		standins = append(standins, m{"ipv4": s.IP4, "ipv6": s.IP6, "stands_for": s.StandsFor})
	}
	doc := m{
		"lab_dir": l.Dir, "netns": NSSandbox, "netns_path": "/run/netns/" + NSSandbox, "router_netns": NSRouter, "control_netns": NSControl,
		"namespaces": Namespaces, "resolv_conf": etcNetns + "/" + NSSandbox + "/resolv.conf",
		"sandbox":  m{"ipv4": SandboxIP4, "ipv6": SandboxIP6, "gateway_ipv4": RouterSandboxIP4, "gateway_ipv6": RouterSandboxIP6},
		"resolver": m{"ipv4": ResolverIP4, "ipv6": ResolverIP6, "port": ResolverPort, "name": "resolver.lab.test"},
		"proxy": m{"url": ProxyURL, "url6": ProxyURL6, "ipv4": ProxyIP4, "ipv6": ProxyIP6, "port": ProxyPort, "name": "proxy.lab.test",
			"connect_ports": []int{443, 80}, "allowed_status": 200, "denied_status": ProxyDeniedStatus, "denied_reason": "Filtered",
			"denied_port_status": 403, "denied_port_reason": "Access violation", "upstream_failed_status": 500, "upstream_failed_reason": "Unable to connect"},
		"ca": l.Dir + "/ca.pem", "http_port": HTTPPort, "https_port": HTTPSPort, "allowed_patterns": AllowedPatterns,
		"allowed": allowed, "blocked": blocked, "raw": raw,
		"metadata": m{"name": MetadataName, "ipv4": MetadataIP4, "ipv6": MetadataIP6, "port": HTTPPort, "ports": MetadataPorts,
			"rule": "deny-metadata", "rule6": "deny-metadata6", "flavour": "drop", "errno_ipv4": "ETIMEDOUT", "errno_ipv6": "ETIMEDOUT", "standins": standins},
		"nxdomain_example": "nosuchhost.lab.test",
		"authority": m{"name": AuthorityName, "ipv4": AuthorityIP4, "ipv6": AuthorityIP6, "log": l.Dir + "/dns/queries.log",
			"canary_zone": CanaryZone, "listens_on": "every sp-ext address, udp+tcp 53"},
		"dns_open_ipv4": DNSOpenIP4, "dns_open_ipv6": DNSOpenIP6,
		"nft":           m{"netns": NSRouter, "table": NftTable, "chain": NftChain, "rules": RuleNames()},
		"broken_states": BrokenStates,
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(l.Dir, "lab.json"), append(b, '\n'), 0o644)
}
