package lab

// The lab's address plan, as data: everything lives in 10.99.0.0/16 and
// fd99::/48. Every namespace except sp-router has exactly one veth, whose
// peer is in sp-router; no lab interface ever exists in the root namespace.

// The namespaces.
const (
	NSSandbox = "sp-sandbox" // where the probe runs
	NSRouter  = "sp-router"  // forwards, holds the nftables "CNI" rules
	NSDNS     = "sp-dns"     // dnsmasq, the lab resolver
	NSProxy   = "sp-proxy"   // tinyproxy (or squid), the egress proxy
	NSAPI     = "sp-api"     // allowed host api.lab.test (a front)
	NSGit     = "sp-git"     // allowed hosts git.lab.test, objects.git.lab.test
	NSExt     = "sp-ext"     // must-fail destinations ("the outside")
	NSMeta    = "sp-meta"    // stand-in cloud metadata service
	NSControl = "sp-control" // the control vantage: the lab's side of the link, no sandbox rule
)

// Namespaces in creation order (router first).
var Namespaces = []string{NSRouter, NSSandbox, NSDNS, NSProxy, NSAPI, NSGit, NSExt, NSMeta, NSControl}

// Link is one namespace's veth to the router: "sp-r-<Short>" in sp-router,
// "sp-<Short>0" in NS, on V4.0/24 and V6::/64 with the router at .1 and ::1.
type Link struct{ NS, Short, V4, V6 string }

// Links of every namespace but the router.
var Links = []Link{
	{NSSandbox, "sbx", "10.99.1", "fd99:0:0:1"},
	{NSDNS, "dns", "10.99.53", "fd99:0:0:53"},
	{NSProxy, "prx", "10.99.31", "fd99:0:0:31"},
	{NSAPI, "api", "10.99.10", "fd99:0:0:10"},
	{NSGit, "git", "10.99.11", "fd99:0:0:11"},
	{NSExt, "ext", "10.99.20", "fd99:0:0:20"},
	{NSMeta, "meta", "10.99.169", "fd99:0:0:169"},
	{NSControl, "ctl", "10.99.40", "fd99:0:0:40"},
}

// Interfaces, addresses and ports with a name of their own.
const (
	IfRouterSandbox = "sp-r-sbx" // sandbox-facing interface in sp-router
	IfSandbox       = "sp-sbx0"  // the sandbox's only interface

	// attach-cluster: a second sandbox-facing link from the root namespace
	// (where a test cluster's pod bridge lives) into sp-router; pod traffic
	// is masqueraded onto AttachHostIP4 on the way in.
	IfRouterCluster = "sp-r-k8s"
	IfHostCluster   = "sp-k8s"
	AttachRouterIP4 = "10.99.250.1"
	AttachHostIP4   = "10.99.250.2"
	AttachPrefix    = 30
	AttachNftTable  = "inet sp_lab_attach" // in the root namespace

	RouterSandboxIP4 = "10.99.1.1"
	RouterSandboxIP6 = "fd99:0:0:1::1"
	SandboxIP4       = "10.99.1.2"
	SandboxIP6       = "fd99:0:0:1::2"
	ControlIP4       = "10.99.40.2"
	ControlIP6       = "fd99:0:0:40::2"

	ResolverIP4  = "10.99.53.53"
	ResolverIP6  = "fd99:0:0:53::53"
	ResolverPort = 53

	ProxyIP4          = "10.99.31.28"
	ProxyIP6          = "fd99:0:0:31::28"
	ProxyPort         = 3128
	ProxyURL          = "http://10.99.31.28:3128"
	ProxyURL6         = "http://[fd99:0:0:31::28]:3128"
	ProxyDeniedStatus = 403 // what tinyproxy answers for a filtered host

	HTTPPort  = 80
	HTTPSPort = 443

	GitWildcardIP4 = "10.99.11.11" // any other name under git.lab.test
	GitWildcardIP6 = "fd99:0:0:11::11"

	MetadataIP4  = "10.99.169.254"
	MetadataIP6  = "fd99:0:0:169::254"
	MetadataName = "metadata.lab.test"

	// The internet's DNS, in sp-ext (listening on every sp-ext address).
	AuthorityIP4  = "10.99.20.53"
	AuthorityIP6  = "fd99:0:0:20::53"
	AuthorityName = "ns.lab.test"
	CanaryZone    = "canary.lab.test"
	DNSOpenIP4    = "10.99.20.21" // what the canary zone answers (the exfil host)
	DNSOpenIP6    = "fd99:0:0:20::21"

	NftTable = "inet sp_cni"
	NftChain = "sandbox_out"
)

// Host is a named lab host.
type Host struct{ Name, IP4, IP6, NS string }

// AllowedHosts answer through the proxy.
var AllowedHosts = []Host{
	{"api.lab.test", "10.99.10.10", "fd99:0:0:10::10", NSAPI},
	{"git.lab.test", "10.99.11.10", "fd99:0:0:11::10", NSGit},
	{"objects.git.lab.test", "10.99.11.11", "fd99:0:0:11::11", NSGit},
}

// FrontedHosts are names an allowed host's server also serves but the
// proxy must not allow (sp-api is a front, as a CDN edge is).
var FrontedHosts = []Host{{"fronted.lab.test", "10.99.10.10", "fd99:0:0:10::10", NSAPI}}

// ProxyFlavours are the proxies `lab proxy` runs: tinyproxy filters on the CONNECT host (the default);
// squid also checks the TLS server name.
var ProxyFlavours = []string{"tinyproxy", "squid"}

// AllowedPatterns is the proxy's allow-list.
var AllowedPatterns = []string{"api.lab.test", "git.lab.test", "*.git.lab.test"}

// Standin is a stand-in for a cloud metadata address, in sp-meta.
type Standin struct {
	IP4, IP6  string
	StandsFor []string
}

// MetadataStandins stand in for instance metadata (AWS and its IPv6, GCP, Azure,
// OCI), container task metadata (ECS, Fargate), Alibaba Cloud.
var MetadataStandins = []Standin{
	{MetadataIP4, MetadataIP6, []string{"169.254.169.254", "fd00:ec2::254"}},
	{"10.99.169.2", "fd99:0:0:169::2", []string{"169.254.170.2"}},
	{"10.99.169.200", "fd99:0:0:169::200", []string{"100.100.100.200"}},
}

// MetadataPorts are the ports the metadata stand-ins answer on.
var MetadataPorts = []int{80, 443}

// Target is a must-fail destination with its own rule (NAME for IPv4,
// NAME6 for IPv6) and the flavour that rule blocks with.
type Target struct{ Key, IP4, IP6, Rule, Flavour string }

// RawTargets are must-fail raw IPs, live listeners in sp-ext.
var RawTargets = []Target{
	{"drop", "10.99.20.10", "fd99:0:0:20::10", "deny-raw-drop", "drop"},
	{"reset", "10.99.20.11", "fd99:0:0:20::11", "deny-raw-reset", "tcp-reset"},
	{"port-unreach", "10.99.20.12", "fd99:0:0:20::12", "deny-raw-port-unreach", "icmp-port-unreachable"},
	{"host-unreach", "10.99.20.13", "fd99:0:0:20::13", "deny-raw-host-unreach", "icmp-host-unreachable"},
	{"admin-prohib", "10.99.20.14", "fd99:0:0:20::14", "deny-raw-admin-prohibited", "icmp-admin-prohibited"},
	{"net-unreach", "10.99.20.15", "fd99:0:0:20::15", "deny-raw-net-unreach", "icmp-net-unreachable"},
}

// BlockedHosts are must-fail named hosts (Key is the name).
var BlockedHosts = []Target{
	{"blocked.lab.test", "10.99.20.20", "fd99:0:0:20::20", "default-deny", "drop"},
	{"exfil.lab.test", "10.99.20.21", "fd99:0:0:20::21", "deny-exfil", "tcp-reset"},
}

// BrokenStates are what `lab break` can switch on.
var BrokenStates = []string{"egress-open", "raw-ips-open", "metadata-open", "ipv6-open", "proxy-open", "proxy-bypass",
	"dns-open", "allowed-down", "flush-rule", "proxy-nolog", "proxy-allows-blocked", "quic-open"}

// nsAddrs are the addresses of a namespace's lab interface.
func nsAddrs(ns string) [][2]string {
	var out [][2]string
	switch ns {
	case NSSandbox:
		return [][2]string{{SandboxIP4, SandboxIP6}}
	case NSControl:
		return [][2]string{{ControlIP4, ControlIP6}}
	case NSDNS:
		return [][2]string{{ResolverIP4, ResolverIP6}}
	case NSProxy:
		return [][2]string{{ProxyIP4, ProxyIP6}}
	case NSMeta:
		for _, s := range MetadataStandins {
			out = append(out, [2]string{s.IP4, s.IP6})
		}
	case NSExt:
		for _, t := range append(append([]Target{}, RawTargets...), BlockedHosts...) {
			out = append(out, [2]string{t.IP4, t.IP6})
		}
		out = append(out, [2]string{AuthorityIP4, AuthorityIP6})
	default:
		for _, h := range AllowedHosts {
			if h.NS == ns {
				out = append(out, [2]string{h.IP4, h.IP6})
			}
		}
	}
	return out
}

// labRecords is every lab name the internet knows, with its addresses.
func labRecords() []Host {
	var out []Host
	out = append(out, AllowedHosts...)
	for _, b := range BlockedHosts {
		out = append(out, Host{Name: b.Key, IP4: b.IP4, IP6: b.IP6})
	}
	out = append(out, FrontedHosts...)
	return append(out,
		Host{Name: MetadataName, IP4: MetadataIP4, IP6: MetadataIP6},
		Host{Name: "proxy.lab.test", IP4: ProxyIP4, IP6: ProxyIP6},
		Host{Name: "resolver.lab.test", IP4: ResolverIP4, IP6: ResolverIP6},
		Host{Name: AuthorityName, IP4: AuthorityIP4, IP6: AuthorityIP6})
}
