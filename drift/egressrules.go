package drift

// The egress rules judge a pod against the union of the egress policies
// that select it, so they are not rows with a check of their own: they run
// in netpol.go (NetworkPolicy), cilium.go (CiliumNetworkPolicy and its
// clusterwide kind) and adminnetpol.go (AdminNetworkPolicy,
// BaselineAdminNetworkPolicy, ClusterNetworkPolicy) once every policy is
// indexed. Their rows carry what the catalogue lists.
const (
	NetpolEgressUnrestricted = "drift.netpol.egress-unrestricted"
	NetpolAnyDestination     = "drift.netpol.any-destination"
	NetpolWorld              = "drift.netpol.world"
	NetpolIPBlock            = "drift.netpol.ipblock"
	NetpolPort               = "drift.netpol.port"
	NetpolPeer               = "drift.netpol.peer"

	CiliumFQDNExtra      = "drift.cilium.fqdn-extra"
	CiliumFQDNMissing    = "drift.cilium.fqdn-missing"
	CiliumWorld          = "drift.cilium.world"
	CiliumCIDR           = "drift.cilium.cidr"
	CiliumAnyDestination = "drift.cilium.any-destination"
	CiliumPeer           = "drift.cilium.peer"
	CiliumDNSNames       = "drift.cilium.dns-names"

	ANPWorld  = "drift.anp.world"
	ANPCIDR   = "drift.anp.cidr"
	ANPPeer   = "drift.anp.peer"
	ANPDomain = "drift.anp.domain"
)

var egressRules = []row{
	{Rule{NetpolEgressUnrestricted, "at least one NetworkPolicy (or Cilium policy) restricts the sandbox's egress", high,
		"apply the NetworkPolicy from `sandprobe render --format egress` (policyTypes: [Egress]) in the pod's namespace; where one is there already, add the selector's labels the pod lacks"}, nil},
	{Rule{NetpolAnyDestination, "no egress rule selecting a sandbox has an empty `to` (every destination)", high,
		"list the destinations in `to`"}, nil},
	{Rule{NetpolWorld, "no egress rule selecting a sandbox opens 0.0.0.0/0 or ::/0", high,
		"remove the ipBlock or narrow it to a declared address"}, nil},
	{Rule{NetpolIPBlock, "every ipBlock a sandbox may reach is a declared allowance", medium,
		"remove the ipBlock or declare the address in spec.egress.allow"}, nil},
	{Rule{NetpolPort, "every allowed destination is limited to its declared port", medium,
		"list only the declared port in the rule's ports"}, nil},
	{Rule{NetpolPeer, "in-cluster peers are limited to cluster DNS, the declared proxy and the declared in-cluster peers (their pods, on their ports)", medium,
		"remove the peer or narrow it to DNS (port 53), the proxy or a declared peer's pods"}, nil},

	{Rule{CiliumFQDNExtra, "every toFQDNs name or pattern is covered by a declared allowance on its port", medium,
		"remove the name or declare it in spec.egress.allow"}, nil},
	{Rule{CiliumFQDNMissing, "every declared name is allowed by the Cilium policies (info: the sandbox cannot reach it)", low,
		"add the name to a toFQDNs rule, or drop the allowance"}, nil},
	{Rule{CiliumWorld, "no Cilium rule opens toEntities world/all or a /0 CIDR", high,
		"remove the entity or CIDR"}, nil},
	{Rule{CiliumCIDR, "every toCIDR/toCIDRSet is a declared address", medium,
		"remove the CIDR or declare the address in spec.egress.allow"}, nil},
	{Rule{CiliumAnyDestination, "no Cilium egress rule allows ports to every destination (toPorts without a peer)", high,
		"add toFQDNs/toEndpoints/toCIDR to the rule"}, nil},
	{Rule{CiliumPeer, "in-cluster Cilium peers are limited to cluster DNS, the declared proxy and the declared in-cluster peers (their pods, on their ports)", medium,
		"remove the peer or narrow it to DNS (port 53), the proxy or a declared peer's pods"}, nil},

	{Rule{CiliumDNSNames, "every matchPattern of a Cilium DNS rule is a declared allowance or under the cluster domain, unless spec.egress.dns.arbitraryNames is allow (a wider pattern is a DNS channel out)", high,
		"narrow the rule's dns names to the declared ones (`sandprobe render --egress cilium`)"}, nil},

	{Rule{ANPWorld, "no admin or baseline admin network policy Allow opens 0.0.0.0/0 or ::/0 to a sandbox (an admin Allow overrides every NetworkPolicy)", high,
		"remove the network from the Allow rule"}, nil},
	{Rule{ANPCIDR, "every network an admin network policy allows a sandbox is a declared address", medium,
		"remove the network or declare the address in spec.egress.allow"}, nil},
	{Rule{ANPPeer, "in-cluster peers an admin network policy allows a sandbox are limited to cluster DNS, the declared proxy and the declared in-cluster peers (their pods, on their ports)", medium,
		"remove the peer or narrow it to DNS (port 53), the proxy or a declared peer's pods"}, nil},
	{Rule{ANPDomain, "every domain name an admin network policy allows a sandbox is covered by a declared allowance", medium,
		"remove the name or declare it in spec.egress.allow"}, nil},
}
