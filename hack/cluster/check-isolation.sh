#!/usr/bin/env bash
# Prove that the pod network of the test cluster cannot reach this machine's
# real interfaces nor the cloud metadata address 169.254.169.254, while it
# can reach the node address.
#
#   hack/cluster/check-isolation.sh            # from a netns on the pod bridge
#   hack/cluster/check-isolation.sh --pods     # and from real pods (runc, gvisor)
#   hack/cluster/check-isolation.sh --pods-only   # from real pods only: when the CNI is
#                                              # Cilium (hack/cluster/cilium.sh), pods are not on the bridge
#
# Needs a running cluster (hack/cluster/up.sh). Exits non-zero on any leak.
#
# Safety: every probe goes to an address of this machine or of a network
# namespace this script creates, so even with the isolation rules missing
# nothing is sent to a real network:
#   * the real uplink's own addresses (e.g. eth0's) are local addresses; a
#     listener is started on them, so "blocked" means the packet was dropped,
#     not merely refused;
#   * 169.254.169.254 is, for the duration of the test, routed to a network
#     namespace of ours (sp-iso-meta) that listens there and counts every
#     packet arriving from the pod network. The route is verified before the
#     first packet is sent.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root

with_pods=0 with_netns=1
[[ ${1:-} == --pods ]] && with_pods=1
[[ ${1:-} == --pods-only ]] && with_pods=1 with_netns=0
# The interface pod packets arrive on, for the routing safety check: the
# bridge, or (Cilium: lxc devices, routed by source) the node's.
route_iif=$BRIDGE
((with_netns)) || route_iif=$NODE_IF

nft list table inet "$NFT_TABLE" >/dev/null 2>&1 || die "nftables table $NFT_TABLE missing: is the cluster up?"
((!with_netns)) || ip link show "$BRIDGE" >/dev/null 2>&1 || die "bridge $BRIDGE missing: is the cluster up?"
PROBE="$CLUSTER_DIR/bin/probe"
[[ -x $PROBE ]] || die "$PROBE missing: is the cluster up?"

PORT=18080
META_IP=169.254.169.254
META_NS=sp-iso-meta META_HOST_IF=sp-iso-meta-h META_LINK_HOST=169.254.200.1 META_LINK_NS=169.254.200.2
POD_NS=sp-iso-pod POD_NS_IP=10.244.0.250
listener_pids=()

# remove_leftovers: our namespaces, links and route (also from a killed run).
remove_leftovers() {
  ip route del "$META_IP/32" dev "$META_HOST_IF" 2>/dev/null || true
  ip netns del "$META_NS" 2>/dev/null || true
  ip netns del "$POD_NS" 2>/dev/null || true
  ip link del "$META_HOST_IF" 2>/dev/null || true
  ip link del sp-iso-pod-h 2>/dev/null || true
}
cleanup() {
  local p
  for p in "${listener_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  remove_leftovers
  if ((with_pods)); then kc delete pod -l sandprobe.dev/check=isolation --wait=false >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
remove_leftovers
work="$(mktemp -d)"
trap cleanup EXIT

# ---- targets -------------------------------------------------------------------
# Real interfaces: those backed by a device (sysfs has a device link) plus
# those carrying a default route (the uplink); then every global IPv4
# address on them.
mapfile -t real_ifs < <({
  for d in /sys/class/net/*/device; do [[ -e $d ]] && basename "$(dirname "$d")"; done
  ip -4 route show default | awk '{ for (i = 1; i < NF; i++) if ($i == "dev") print $(i + 1) }'
} | sort -u)
real_ips=()
for ifc in "${real_ifs[@]}"; do
  while read -r a; do real_ips+=("${a%/*}"); done \
    < <(ip -4 -o addr show dev "$ifc" scope global | awk '{ print $4 }')
done
((${#real_ips[@]})) || log "note: no real global IPv4 address on this machine"
log "real interfaces: ${real_ifs[*]:-none}; addresses under test: ${real_ips[*]:-none}"

# Listeners: node address (must be reachable) and each real address (must not).
for ip in "$NODE_IP" "${real_ips[@]}"; do
  "$PROBE" listen "$ip:$PORT" > "$work/listen-$ip.log" 2>&1 &
  listener_pids+=($!)
done

# Fake metadata service in a namespace of ours, with a packet counter.
ip netns add "$META_NS"
ip link add "$META_HOST_IF" type veth peer name eth0 netns "$META_NS"
ip addr add "$META_LINK_HOST/30" dev "$META_HOST_IF"
ip link set "$META_HOST_IF" up
ip -n "$META_NS" addr add "$META_LINK_NS/30" dev eth0
ip -n "$META_NS" addr add "$META_IP/32" dev lo
ip -n "$META_NS" link set lo up
ip -n "$META_NS" link set eth0 up
ip -n "$META_NS" route add default via "$META_LINK_HOST"
ip netns exec "$META_NS" nft -f - <<EOF
table inet sp_iso_count {
  chain pre {
    type filter hook prerouting priority -300; policy accept;
    ip saddr $POD_CIDR counter name from_pods
  }
  counter from_pods {}
}
EOF
ip route add "$META_IP/32" via "$META_LINK_NS" dev "$META_HOST_IF"
ip netns exec "$META_NS" "$PROBE" listen "$META_IP:80" > "$work/listen-meta.log" 2>&1 &
listener_pids+=($!)

# A namespace on the pod bridge, configured like a pod (address in the pod
# CIDR, default route via the bridge).
if ((with_netns)); then
  ip netns add "$POD_NS"
  ip link add sp-iso-pod-h type veth peer name eth0 netns "$POD_NS"
  ip link set sp-iso-pod-h master "$BRIDGE" up
  ip -n "$POD_NS" addr add "$POD_NS_IP/${POD_CIDR#*/}" dev eth0
  ip -n "$POD_NS" link set lo up
  ip -n "$POD_NS" link set eth0 up
  ip -n "$POD_NS" route add default via "$POD_GW"
fi

# Forwarding is what the CNI bridge plugin turns on with the first pod; turn
# it on now so the forward path (and its nftables drop) is what gets tested.
sysctl -qw net.ipv4.ip_forward=1

# Safety check before any packet: 169.254.169.254 as seen from the pod bridge
# must resolve to our namespace (or be unreachable), never to the uplink.
route="$(ip route get "$META_IP" from "$POD_NS_IP" iif "$route_iif" 2>&1 || true)"
if [[ $route != *"dev $META_HOST_IF"* && $route != *unreachable* && $route != *"No route"* ]]; then
  die "unsafe: $META_IP from the pod network routes as: $route"
fi
for ip in "${real_ips[@]}"; do
  r="$(ip route get "$ip" from "$POD_NS_IP" iif "$route_iif" 2>&1 || true)"
  [[ $r == local* ]] || die "unsafe: $ip is not local: $r"
done
sleep 0.3 # listeners up

# ---- probes --------------------------------------------------------------------
fail=0
# expect WHO RESULT_FILE ADDR WANT...: check one probe result line.
expect() {
  local who="$1" file="$2" addr="$3"; shift 3
  local got
  got="$(jq -r --arg a "$addr" 'select(.addr == $a) | .result' "$file" 2>/dev/null | head -1)"
  local w
  for w in "$@"; do
    if [[ $got == "$w" ]]; then
      printf '  ok    %-10s %-24s %s\n' "$who" "$addr" "$got"
      return 0
    fi
  done
  printf '  FAIL  %-10s %-24s %s (want %s)\n' "$who" "$addr" "${got:-no result}" "$*"
  fail=1
}

targets=("$NODE_IP:$PORT" "$META_IP:80")
for ip in "${real_ips[@]}"; do targets+=("$ip:$PORT"); done

check_results() {
  local who="$1" file="$2" ip
  expect "$who" "$file" "$NODE_IP:$PORT" connected
  # Dropped (timeout) or rejected by routing (unreachable) are both blocked;
  # connected or refused would mean packets got through.
  expect "$who" "$file" "$META_IP:80" timeout unreachable
  for ip in "${real_ips[@]}"; do expect "$who" "$file" "$ip:$PORT" timeout unreachable; done
}

if ((with_netns)); then
  log "probing from netns $POD_NS ($POD_NS_IP on $BRIDGE)"
  ip netns exec "$POD_NS" "$PROBE" connect "${targets[@]}" > "$work/netns.json"
  check_results netns "$work/netns.json"
fi

if ((with_pods)); then
  for rc in runc gvisor; do
    log "probing from a pod with runtimeClassName $rc"
    name="isolation-$rc"
    args="$(printf '"%s",' "${targets[@]}")"
    kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $name
  labels: {sandprobe.dev/check: isolation}
spec:
  runtimeClassName: $rc
  restartPolicy: Never
  automountServiceAccountToken: false
  containers:
  - name: probe
    image: $PROBE_IMAGE
    imagePullPolicy: Never
    command: ["/probe", "connect", ${args%,}]
    securityContext:
      runAsUser: 65532
      runAsNonRoot: true
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: [ALL]}
      seccompProfile: {type: RuntimeDefault}
EOF
    if ! kc wait pod "$name" --for=jsonpath='{.status.phase}'=Succeeded --timeout=90s >/dev/null; then
      kc get pod "$name" -o wide >&2 || true
      printf '  FAIL  %-10s pod did not succeed\n' "$rc"
      fail=1
      continue
    fi
    kc logs "$name" > "$work/pod-$rc.json"
    check_results "pod/$rc" "$work/pod-$rc.json"
    kc delete pod "$name" --wait=false >/dev/null
  done
fi

# ---- evidence ----------------------------------------------------------------------
meta_packets="$(ip netns exec "$META_NS" nft list counter inet sp_iso_count from_pods | awk '/packets/ { print $2 }')"
if [[ $meta_packets != 0 ]]; then
  printf '  FAIL  %s packets from the pod network reached the fake %s\n' "$meta_packets" "$META_IP"
  fail=1
else
  printf '  ok    no packet from the pod network reached the fake %s\n' "$META_IP"
fi
for ip in "${real_ips[@]}"; do
  if grep -q accepted_from "$work/listen-$ip.log"; then
    printf '  FAIL  listener on %s accepted: %s\n' "$ip" "$(grep accepted_from "$work/listen-$ip.log" | head -3 | tr '\n' ' ')"
    fail=1
  fi
done
nft list table inet "$NFT_TABLE" | grep -E 'counter packets [1-9]' | sed 's/^\s*/  drops: /' || true

if ((fail)); then
  log "ISOLATION CHECK FAILED"
  exit 1
fi
log "isolation check passed"
