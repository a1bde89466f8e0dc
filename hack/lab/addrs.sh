# shellcheck shell=bash
# Address plan of the sandprobe network lab. Sourced by hack/lab/lab and
# hack/lab/selftest.sh. Everything lives in 10.99.0.0/16 and fd99::/48.
#
# Every namespace except sp-router has exactly one veth, whose peer is in
# sp-router. No lab interface ever exists in the root namespace.

LAB_DIR=${SANDPROBE_LAB_DIR:-/run/sandprobe-lab}

# ---- namespaces -----------------------------------------------------------
NS_SANDBOX=sp-sandbox   # where the probe runs
NS_ROUTER=sp-router     # forwards, holds the nftables "CNI" rules
NS_DNS=sp-dns           # dnsmasq, the lab resolver
NS_PROXY=sp-proxy       # tinyproxy, the egress proxy
NS_API=sp-api           # allowed host api.lab.test
NS_GIT=sp-git           # allowed hosts git.lab.test, objects.git.lab.test
NS_EXT=sp-ext           # must-fail destinations ("the outside")
NS_META=sp-meta         # stand-in cloud metadata service
NS_CONTROL=sp-control   # the control vantage: the lab's side of the link, no sandbox rule
# order matters for creation: router first.
LAB_NAMESPACES=("$NS_ROUTER" "$NS_SANDBOX" "$NS_DNS" "$NS_PROXY" "$NS_API" "$NS_GIT" "$NS_EXT" "$NS_META" "$NS_CONTROL")

# link table: namespace  short  v4-subnet(/24, router=.1)  v6-prefix(/64, router=::1)
# veth names: "sp-r-<short>" in sp-router, "sp-<short>0" in the namespace.
LAB_LINKS=(
  "$NS_SANDBOX sbx 10.99.1 fd99:0:0:1"
  "$NS_DNS     dns 10.99.53 fd99:0:0:53"
  "$NS_PROXY   prx 10.99.31 fd99:0:0:31"
  "$NS_API     api 10.99.10 fd99:0:0:10"
  "$NS_GIT     git 10.99.11 fd99:0:0:11"
  "$NS_EXT     ext 10.99.20 fd99:0:0:20"
  "$NS_META    meta 10.99.169 fd99:0:0:169"
  "$NS_CONTROL ctl 10.99.40 fd99:0:0:40"
)
IF_ROUTER_SANDBOX=sp-r-sbx      # sandbox-facing interface in sp-router
IF_SANDBOX=sp-sbx0              # the sandbox's only interface

# `lab attach-cluster`: a second sandbox-facing link, from the root namespace
# (where a test cluster's pod bridge lives) into sp-router. Pod traffic is
# masqueraded onto ATTACH_HOST_IP4 on the way in, so the lab sees one more
# sandbox address inside 10.99/16 and every rule applies to pods unchanged.
IF_ROUTER_CLUSTER=sp-r-k8s      # in sp-router
IF_HOST_CLUSTER=sp-k8s          # in the root namespace
ATTACH_ROUTER_IP4=10.99.250.1
ATTACH_HOST_IP4=10.99.250.2
ATTACH_PREFIX=30
ATTACH_NFT_TABLE="inet sp_lab_attach"   # in the root namespace

ROUTER_SANDBOX_IP4=10.99.1.1
ROUTER_SANDBOX_IP6=fd99:0:0:1::1
SANDBOX_IP4=10.99.1.2
SANDBOX_IP6=fd99:0:0:1::2
# The control vantage dials every must-fail destination where no sandbox
# rule applies (the router forwards it like a service namespace's traffic):
# a deny counts only where the control got an answer.
CONTROL_IP4=10.99.40.2
CONTROL_IP6=fd99:0:0:40::2

# ---- services -------------------------------------------------------------
RESOLVER_IP4=10.99.53.53
RESOLVER_IP6=fd99:0:0:53::53
RESOLVER_PORT=53

PROXY_IP4=10.99.31.28
PROXY_IP6=fd99:0:0:31::28
PROXY_PORT=3128
PROXY_URL="http://$PROXY_IP4:$PROXY_PORT"
PROXY_URL6="http://[$PROXY_IP6]:$PROXY_PORT"
PROXY_DENIED_STATUS=403        # what tinyproxy answers for a filtered host (CONNECT and GET)

HTTP_PORT=80
HTTPS_PORT=443

# allowed hosts: name ip4 ip6 namespace
ALLOWED_HOSTS=(
  "api.lab.test 10.99.10.10 fd99:0:0:10::10 $NS_API"
  "git.lab.test 10.99.11.10 fd99:0:0:11::10 $NS_GIT"
  "objects.git.lab.test 10.99.11.11 fd99:0:0:11::11 $NS_GIT"
)
# Names the allowed hosts' servers also serve but the proxy must not allow:
# sp-api is a "front" (a CDN edge) for api.lab.test and these, with one
# certificate for all. Domain fronting (egress.sni-mismatch) is a tunnel
# opened for api.lab.test that carries a ClientHello for one of them.
#   name ip4 ip6 namespace
FRONTED_HOSTS=(
  "fronted.lab.test 10.99.10.10 fd99:0:0:10::10 $NS_API"
)
# The proxy's flavours (`lab proxy NAME`): tinyproxy filters on the CONNECT
# host alone (the default); squid also checks the TLS server name (ssl_bump
# peek at step 1, splice the allowed names, terminate the rest).
PROXY_FLAVOURS=(tinyproxy squid)
# proxy allow-list patterns (tinyproxy FilterType ere, matched on the host)
ALLOWED_PATTERNS=("api.lab.test" "git.lab.test" "*.git.lab.test")
# any other name under git.lab.test resolves here too (dnsmasq wildcard)
GIT_WILDCARD_IP4=10.99.11.11
GIT_WILDCARD_IP6=fd99:0:0:11::11

METADATA_IP4=10.99.169.254
METADATA_IP6=fd99:0:0:169::254
METADATA_NAME=metadata.lab.test
# Stand-ins for the usual cloud metadata addresses, all in sp-meta, reached
# only through sp-router (the real addresses are never routed anywhere):
#   ip4 ip6 stands-for...
METADATA_STANDINS=(
  "$METADATA_IP4 $METADATA_IP6 169.254.169.254 fd00:ec2::254" # instance metadata: AWS (and its IPv6), GCP, Azure, OCI
  "10.99.169.2 fd99:0:0:169::2 169.254.170.2"                 # container task metadata: ECS, Fargate
  "10.99.169.200 fd99:0:0:169::200 100.100.100.200"           # Alibaba Cloud
)
METADATA_PORTS=(80 443)

# must-fail raw IPs: key ip4 ip6 rule-name flavour   (all live HTTP/HTTPS listeners in sp-ext)
# rule name for IPv6 is "<rule>6".
RAW_TARGETS=(
  "drop            10.99.20.10 fd99:0:0:20::10 deny-raw-drop            drop"
  "reset           10.99.20.11 fd99:0:0:20::11 deny-raw-reset           tcp-reset"
  "port-unreach    10.99.20.12 fd99:0:0:20::12 deny-raw-port-unreach    icmp-port-unreachable"
  "host-unreach    10.99.20.13 fd99:0:0:20::13 deny-raw-host-unreach    icmp-host-unreachable"
  "admin-prohib    10.99.20.14 fd99:0:0:20::14 deny-raw-admin-prohibited icmp-admin-prohibited"
  "net-unreach     10.99.20.15 fd99:0:0:20::15 deny-raw-net-unreach     icmp-net-unreachable"
)
# must-fail named hosts: name ip4 ip6 rule-name flavour
BLOCKED_HOSTS=(
  "blocked.lab.test 10.99.20.20 fd99:0:0:20::20 default-deny drop"
  "exfil.lab.test   10.99.20.21 fd99:0:0:20::21 deny-exfil   tcp-reset"
)
# The internet's DNS, in sp-ext: an "authority" that knows every lab name,
# answers every name under the canary zone (a wildcard), NXDOMAIN for any
# other name, and logs every query it is asked. It listens on every sp-ext
# address (so each must-fail IP is also an outside resolver, as 1.1.1.1 is),
# and the broken resolver of dns-open forwards to it.
AUTHORITY_IP4=10.99.20.53
AUTHORITY_IP6=fd99:0:0:20::53
AUTHORITY_NAME=ns.lab.test
CANARY_ZONE=canary.lab.test
# what the canary zone's wildcard answers (the exfil host)
DNS_OPEN_IP4=10.99.20.21
DNS_OPEN_IP6=fd99:0:0:20::21

# nftables
NFT_TABLE="inet sp_cni"
NFT_CHAIN=sandbox_out

BROKEN_STATES=(egress-open raw-ips-open metadata-open ipv6-open proxy-open proxy-bypass dns-open allowed-down flush-rule proxy-nolog proxy-allows-blocked)
