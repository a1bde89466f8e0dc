# shellcheck shell=bash
# shellcheck disable=SC2154 # up.sh and lib.sh set the variables before sourcing this
# hack/cluster/up-network.sh — sourced by up.sh (step 2: the host network and the isolation pods live in), in its order.
# ---- 2. host network and isolation --------------------------------------------------
t=$(now_ns)
# Remember the sysctls that the kubelet and the CNI bridge plugin change (in
# the data dir: it survives a wipe of /run without a reboot).
for s in "${SAVED_SYSCTLS[@]}"; do
  echo "$s=$(sysctl -n "$s")"
done > "$DATA_DIR/sysctl.orig"
if [[ -d $KUBELET_CONTAINER_LOGS_DIR ]]; then touch "$DATA_DIR/varlog-containers-existed"; fi

# The node address sits on one end of a veth pair that stays in the host
# namespace (this kernel has no dummy driver: `ip link add ... type dummy`
# fails with "Unknown device type"); the pair gives the link a carrier.
ip link add "$NODE_IF" type veth peer name "$NODE_IF-peer"
ip addr add "$NODE_IP/32" dev "$NODE_IF"
ip link set "$NODE_IF-peer" up
ip link set "$NODE_IF" up

# nftables: traffic from the pod network may reach only the node's address
# (kubelet, apiserver) and the lab network; everything else, in particular the
# real uplink, its addresses and 169.254.169.254, is dropped. Installed before
# anything can start a pod. Matching on the bridge name works before the CNI
# plugin creates the bridge.
nft -f - <<EOF
table inet $NFT_TABLE {
  # Packets from pods addressed to this machine (any of its addresses).
  chain input {
    type filter hook input priority filter - 10; policy accept;
    iifname "$BRIDGE" jump from_pods
    ip saddr $POD_CIDR jump from_pods
  }
  chain from_pods {
    # Replies to connections the node opened (kubelet probes, lab traffic).
    ct state established,related accept
    ip daddr $NODE_IP accept
    counter drop comment "pod to a host address other than the node"
  }
  # Packets from pods routed elsewhere.
  chain forward {
    type filter hook forward priority filter - 10; policy accept;
    iifname "$BRIDGE" jump from_pods_routed
    ip saddr $POD_CIDR jump from_pods_routed
  }
  chain from_pods_routed {
    # Pod to pod on the bridge: only seen here when br_netfilter is on.
    iifname "$BRIDGE" oifname "$BRIDGE" accept
    ip daddr $LAB_CIDR4 accept
    ip6 daddr $LAB_CIDR6 accept
    counter drop comment "pod to anything but the node and the lab"
  }
  # Belt and braces: nothing with a pod source address leaves by any other
  # interface, whatever the routing says.
  chain output {
    type filter hook output priority filter - 10; policy accept;
    ip saddr $POD_CIDR oifname != { "lo", "$BRIDGE" } ip daddr != $LAB_CIDR4 counter drop
  }
}
EOF

# Routing: packets arriving from the bridge may use every route of the main
# table except default routes (suppress_prefixlength 0), i.e. the bridge
# subnet and the lab's routes but never the uplink's default gateway; the next
# rule makes the rest unreachable. Local addresses are resolved earlier (local
# table, pref 0) and are filtered by nftables above.
for fam in -4 -6; do
  ip "$fam" rule add pref "$IP_RULE_PREF" iif "$BRIDGE" lookup main suppress_prefixlength 0
  ip "$fam" rule add pref $((IP_RULE_PREF + 1)) iif "$BRIDGE" unreachable
done

# Create the pod bridge ourselves (the CNI bridge plugin adopts it) so it
# exists, with its gateway address, before the first pod: check-isolation.sh
# can then test the network without a pod.
# Its MAC address is set, not inherited: a Linux bridge otherwise takes the
# lowest MAC of its ports and changes it as pods come and go, and a pod
# that resolved its gateway before is black-holed until its ARP entry goes
# stale (make e2e's probe pod went silent seconds in, when the runner's
# control pod was deleted). A set address never changes.
ip link add "$BRIDGE" type bridge
ip link set "$BRIDGE" address "$BRIDGE_MAC"
[[ $(cat "/sys/class/net/$BRIDGE/addr_assign_type") == 3 ]] || die "$BRIDGE: its MAC address did not stay set"
ip addr add "$POD_GW/${POD_CIDR#*/}" dev "$BRIDGE"
ip link set "$BRIDGE" up

# CNI: bridge + host-local. No ipMasq: pod traffic must never be NATed onto a
# real interface. isGateway gives pods a default route via the bridge so that
# the node IP and the lab are reachable; the rules above drop the rest.
mkdir -p "$CNI_CONF_DIR" "$DATA_DIR/cni"
cat > "$CNI_CONF_DIR/10-sandprobe.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "sandprobe",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "$DATA_DIR/cni/networks",
        "ranges": [[{ "subnet": "$POD_CIDR", "gateway": "$POD_GW", "rangeEnd": "$POD_RANGE_END" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    }
  ]
}
EOF
mark "network + nftables" "$t"
