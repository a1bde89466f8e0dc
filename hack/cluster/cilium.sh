#!/usr/bin/env bash
# The test cluster's CNI when CNI=cilium: a real Cilium agent, built from the
# Go module proxy, run as a host process, enforcing CiliumNetworkPolicy.
#
#   hack/cluster/cilium.sh build         build agent, CNI plugin and cilium-dbg into the cache
#                                        (keyed by version; tens of minutes cold, instant warm)
#   hack/cluster/cilium.sh up [FLAG...] start the agent as the running cluster's CNI (extra agent
#                                        flags, e.g. --enable-policy=never, are passed on);
#                                        returns once it is ready and pods can start
#   hack/cluster/cilium.sh down [--force]   stop it and remove everything it installed
#                                        (--force: also without the mark cilium.sh up leaves)
#   hack/cluster/cilium.sh status        running or not, its endpoints and their policy enforcement
#   hack/cluster/cilium.sh enforced NS POD   exit 0 if the agent enforces egress policy on the pod
#   hack/cluster/cilium.sh has-policy NS NAME   exit 0 once the agent has imported the CNP
#   hack/cluster/cilium.sh synced        exit 0 once every endpoint runs the latest policy revision
#   hack/cluster/cilium.sh restart [FLAG...]   the agent again with FLAG... (a "CNI upgrade")
#   hack/cluster/cilium.sh endpoints     the agent's endpoints with their realized policy (JSON)
#   hack/cluster/cilium.sh drops         start printing the agent's drop and DNS-proxy events (JSON lines)
#   hack/cluster/cilium.sh leftovers     print what of it is on the machine; exit 1 if anything is
#   hack/cluster/cilium.sh --print-dir   the cache directory (no build)
#
# No operator: with --ipam kubernetes the agent takes the Node's podCIDR
# (set here: the controller-manager does not allocate), creates its own
# CiliumNode, CiliumEndpoints and CiliumIdentities (identity-allocation-mode
# crd), and the CRDs the operator would register are applied from the
# module's own YAML. What the operator adds is garbage collection of
# identities and endpoints, which a cluster that lives minutes never needs.
#
# Run as a host process like every cluster component (own session, the
# sandprobe-cluster cgroup, logs/cilium-agent.log): native routing, no
# kube-proxy replacement, legacy host routing (every pod packet still goes
# through the node's netfilter, so the cluster's nftables safety net stays in
# force underneath Cilium), no masquerade, no Hubble, no Envoy, no health
# endpoint, BPF only on the pods' lxc devices and the node's own sp-node.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

log() { printf '[cilium %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
# CILIUM_VERSION, CILIUM_DIR, CILIUM_BIN, CILIUM_LIB, CILIUM_SRC and build.
# shellcheck source=hack/cluster/cilium-build.sh
source "$cluster_lib_dir/cilium-build.sh"

# ---- running it ----------------------------------------------------------------------
CILIUM_STATE=/var/run/cilium               # the agent's fixed runtime dir (state, API socket)
CILIUM_CNI_CONF="$CNI_CONF_DIR/05-cilium.conflist"   # before the bridge's 10-sandprobe.conflist
CILIUM_CNI_BIN="$CNI_BIN_DIR/cilium-cni"   # a symlink while it runs; containerd has one bin_dir
CILIUM_BPFFS=/sys/fs/bpf
CILIUM_MOUNTED_BPFFS="$CLUSTER_DIR/cilium-mounted-bpffs"   # we mounted bpffs: unmount it at down
CILIUM_UP_MARK="$CLUSTER_DIR/cilium-up"    # up ran for this cluster: down may clean up
CILIUM_IP_RULE_PREF=$((IP_RULE_PREF + 2))  # 10992/10993: the pods' routing rules (no bridge to match)
# Cilium's own routing for its proxy: ip rules into tables 2004/2005.
CILIUM_PROXY_TABLES=(2004 2005)

CILIUM_FLAGS=(
  --k8s-kubeconfig-path="$KUBECONFIG_ADMIN"
  --lib-dir="$CILIUM_LIB" --state-dir="$CILIUM_STATE" --bpf-root="$CILIUM_BPFFS"
  --routing-mode=native --ipv4-native-routing-cidr="$POD_CIDR" --auto-direct-node-routes=false
  --ipam=kubernetes --k8s-require-ipv4-pod-cidr=true
  --enable-ipv4=true --enable-ipv6=false
  --kube-proxy-replacement=false --enable-host-legacy-routing=true
  --enable-ipv4-masquerade=false --enable-bpf-masquerade=false
  --devices="$NODE_IF" --direct-routing-device="$NODE_IF"
  --enable-hubble=false --enable-health-checking=false --enable-endpoint-health-checking=false
  --external-envoy-proxy=true --enable-envoy-config=false
  --cni-exclusive=false --write-cni-conf-when-ready=
  --enable-gops=false
  --identity-allocation-mode=crd --cluster-name=default --cluster-id=0
)

kcs() { kc "$@"; }

crds() { ls "$CILIUM_SRC"/pkg/k8s/apis/cilium.io/client/crds/v2/*.yaml "$CILIUM_SRC"/pkg/k8s/apis/cilium.io/client/crds/v2alpha1/*.yaml; }

agent_ready() { "$CILIUM_BIN/cilium-dbg" status --brief >/dev/null 2>&1; }

up() {
  require_root
  [[ -f $KUBECONFIG_ADMIN ]] || die "no cluster: run hack/cluster/up.sh first"
  build
  if pid_alive cilium-agent; then stop_agent; fi
  # Before anything changes: down cleans up only after an up of ours.
  touch "$CILIUM_UP_MARK"
  local t; t=$(now_ns)
  # The Node's podCIDR: --ipam kubernetes hands out addresses from it.
  local cidr; cidr=$(kc get node "$NODE_NAME" -o jsonpath='{.spec.podCIDR}')
  if [[ -z $cidr ]]; then
    kc patch node "$NODE_NAME" --type merge -p "{\"spec\":{\"podCIDR\":\"$POD_CIDR\",\"podCIDRs\":[\"$POD_CIDR\"]}}" >/dev/null
  fi
  local f
  for f in $(crds); do kc apply --server-side -f "$f" >/dev/null; done
  kc wait --for=condition=Established crd --all --timeout=60s >/dev/null
  # bpffs: the agent pins its maps and links there.
  if ! findmnt -rn -t bpf "$CILIUM_BPFFS" >/dev/null; then
    mount -t bpf bpffs "$CILIUM_BPFFS" && touch "$CILIUM_MOUNTED_BPFFS"
  fi
  # The safety net for pods behind lxc devices instead of the bridge
  # (up-network.sh matches the bridge): the same routing rules by source;
  # and in table inet sandprobe_cluster, what Cilium needs: the DNS proxy
  # receives the pods' queries to the lab resolver on the node (TPROXY),
  # the node reaches pods from cilium_host's address (in the pod CIDR).
  ip -4 rule del pref "$CILIUM_IP_RULE_PREF" 2>/dev/null || true
  ip -4 rule del pref $((CILIUM_IP_RULE_PREF + 1)) 2>/dev/null || true
  ip -4 rule add pref "$CILIUM_IP_RULE_PREF" from "$POD_CIDR" lookup main suppress_prefixlength 0
  ip -4 rule add pref $((CILIUM_IP_RULE_PREF + 1)) from "$POD_CIDR" unreachable
  nft -f - <<NFT
insert rule inet $NFT_TABLE from_pods ip daddr $CLUSTER_DNS meta l4proto { tcp, udp } th dport 53 accept comment "cilium: the DNS proxy (TPROXY)"
insert rule inet $NFT_TABLE output oifname "lxc*" accept comment "cilium: node to pod, from cilium_host"
insert rule inet $NFT_TABLE output oifname "cilium_host" accept comment "cilium: node to pod, from cilium_host"
NFT
  # The bridge up-network.sh made keeps its name (down.sh removes it) but
  # not its address: Cilium routes the pod CIDR to cilium_host and may give
  # a pod the bridge's .1.
  ip addr flush dev "$BRIDGE"
  # The CNI: the plugin beside the bridge's, a conflist that sorts first.
  ln -sfn "$CILIUM_BIN/cilium-cni" "$CILIUM_CNI_BIN"
  cat >"$CILIUM_CNI_CONF" <<CNI
{"cniVersion": "0.3.1", "name": "cilium", "plugins": [{"type": "cilium-cni", "enable-debug": false, "log-file": "$LOGS/cilium-cni.log"}]}
CNI
  start_agent "$@"
  log "cilium-agent $CILIUM_VERSION ready in $(ms_since "$t") ms ($(cilium_mode))"
}

start_agent() {
  rm -f "$LOGS/cilium-agent.log.prev"
  [[ -f $LOGS/cilium-agent.log ]] && mv "$LOGS/cilium-agent.log" "$LOGS/cilium-agent.log.prev"
  printf '%s\n' "$@" >"$CLUSTER_DIR/cilium-extra-flags"
  # K8S_NODE_NAME must name the Node, or the agent waits 5 min and dies.
  K8S_NODE_NAME=$NODE_NAME PATH="$CILIUM_BIN:$PATH" start_bg cilium-agent "$CILIUM_BIN/cilium-agent" "${CILIUM_FLAGS[@]}" "$@"
  wait_for "cilium-agent ready" 180 agent_ready || { tail -n 30 "$LOGS/cilium-agent.log" >&2; die "cilium-agent not ready; see $LOGS/cilium-agent.log"; }
}

stop_agent() { stop_pid cilium-agent 20; }

# cilium_mode: the agent's policy mode and version, as it says.
cilium_mode() {
  dbg config -a 2>/dev/null | awk '$1 == "PolicyEnforcement" || $1 == "EnablePolicy" { print "policy enforcement " $NF; exit }'
}

# restart [FLAG...]: the agent again, with FLAG... instead of the last extra flags.
restart() { stop_agent; start_agent "$@"; log "cilium-agent restarted $* ($(cilium_mode))"; }

dbg() { "$CILIUM_BIN/cilium-dbg" "$@"; }

# endpoint_json NS POD: the agent's endpoint of the pod (found by its
# address: v1.20's endpoints carry no pod name).
endpoint_json() {
  local ip; ip=$(kc -n "$1" get pod "$2" -o jsonpath='{.status.podIP}' 2>/dev/null) && [[ -n $ip ]] || return 1
  dbg endpoint list -o json 2>/dev/null | jq -ce --arg ip "$ip" \
    'first(.[] | select(any(.status.networking.addressing[]?; .ipv4 == $ip)))'
}
# enforced NS POD: the agent enforces egress policy on the pod's endpoint.
enforced() {
  local ep; ep=$(endpoint_json "$1" "$2") || return 1
  jq -e '.status.state == "ready" and (.status.policy.realized."policy-enabled" | IN("egress", "both"))' <<<"$ep" >/dev/null
}
# has_policy NS NAME: the agent has imported the CiliumNetworkPolicy.
has_policy() {
  dbg policy get -o json 2>/dev/null | jq -e --arg ns "$1" --arg n "$2" '.policy | fromjson |
    any(.[]; any(.Labels[]?; .key == "io.cilium.k8s.policy.name" and .value == $n)
      and any(.Labels[]?; .key == "io.cilium.k8s.policy.namespace" and .value == $ns))' >/dev/null
}
# synced: every endpoint runs the agent's latest policy revision.
synced() {
  local rev; rev=$(dbg policy get -o json 2>/dev/null | jq -e .revision) || return 1
  dbg endpoint list -o json 2>/dev/null | jq -e --argjson r "$rev" \
    'all(.[]; .status.state == "ready" and (.status.policy.realized."policy-revision" // 0) >= $r)' >/dev/null
}

status() {
  if pid_alive cilium-agent; then
    echo "cilium-agent $CILIUM_VERSION: running (pid $(cat "$PIDS/cilium-agent.pid")), $(cilium_mode)"
    dbg endpoint list 2>/dev/null | sed -n '1,20p'
  else
    echo "cilium-agent: not running"
  fi
}

drops() { exec "$CILIUM_BIN/cilium-dbg" monitor --type drop --type l7 -j; }

# ipt_chains: Cilium's iptables chains, "TABLE CHAIN" per line.
ipt_chains() {
  local t
  for t in filter nat mangle raw; do
    iptables -w -t "$t" -S 2>/dev/null | awk -v t="$t" '$1 == "-N" && $2 ~ /^(CILIUM_|OLD_CILIUM_)/ { print t, $2 }'
  done
}

remove_iptables() {
  local t c rule
  for t in filter nat mangle raw; do
    # Jumps into Cilium's chains from the built-in ones, then the chains.
    while read -r rule; do
      [[ -n $rule ]] || continue
      eval "iptables -w -t $t ${rule/-A /-D }" 2>/dev/null || true
    done < <(iptables -w -t "$t" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j (OLD_)?CILIUM_' | grep -vE '^-A (OLD_)?CILIUM_')
  done
  while read -r t c; do [[ -n $c ]] && iptables -w -t "$t" -F "$c" 2>/dev/null; done < <(ipt_chains)
  while read -r t c; do [[ -n $c ]] && iptables -w -t "$t" -X "$c" 2>/dev/null; done < <(ipt_chains)
}

# down [--force]: stop the agent and remove what it installed — only after
# an up of this cluster (its mark in the state dir), so that down.sh never
# touches a Cilium that is not ours; --force when the mark is gone (a wiped
# /run) and leftovers names Cilium's state.
down() {
  require_root
  stop_agent
  [[ -f $CILIUM_UP_MARK || ${1:-} == --force ]] || return 0
  # What the agent installed: its links (cilium_host, cilium_net, lxc*),
  # routes, tc/tcx programs, bpffs pins, /var/run/cilium (the agent's own
  # uninstall clean-up, as cilium's clean-cilium-state init container runs it).
  if [[ -x $CILIUM_BIN/cilium-dbg ]] && { ip -o link show | grep -qE ': (cilium_|lxc)' || [[ -d $CILIUM_STATE || -d $CILIUM_BPFFS/tc/globals || -d $CILIUM_BPFFS/cilium ]]; }; then
    "$CILIUM_BIN/cilium-dbg" post-uninstall-cleanup --all-state --force >>"$LOGS/cilium-cleanup.log" 2>&1 ||
      log "warning: cilium-dbg post-uninstall-cleanup failed; see $LOGS/cilium-cleanup.log"
  fi
  remove_iptables
  local p t
  for p in "$CILIUM_IP_RULE_PREF" $((CILIUM_IP_RULE_PREF + 1)); do
    while ip -4 rule show pref "$p" | grep -q .; do ip -4 rule del pref "$p" || break; done
  done
  for t in "${CILIUM_PROXY_TABLES[@]}"; do
    while ip -4 rule show lookup "$t" | grep -q .; do ip -4 rule del lookup "$t" || break; done
  done
  for t in "${CILIUM_PROXY_TABLES[@]}"; do ip -4 route flush table "$t" 2>/dev/null || true; done
  # The agent moves the local table's rule from pref 0 to 100 (its proxy
  # rule must come first) and leaves it there: put it back.
  if ip -4 rule show pref 100 | grep -q 'lookup local' && ! ip -4 rule show pref 0 | grep -q 'lookup local'; then
    ip -4 rule add pref 0 lookup local && ip -4 rule del pref 100 lookup local
  fi
  rm -rf "$CILIUM_BPFFS/cilium" "$CILIUM_BPFFS/tc/globals"/cilium_* 2>/dev/null || true
  rmdir "$CILIUM_BPFFS/tc/globals" "$CILIUM_BPFFS/tc" 2>/dev/null || true
  if [[ -f $CILIUM_MOUNTED_BPFFS ]] || { findmnt -rn -t bpf "$CILIUM_BPFFS" >/dev/null && [[ -z $(ls -A "$CILIUM_BPFFS") ]]; }; then
    umount "$CILIUM_BPFFS" 2>/dev/null || true
    rm -f "$CILIUM_MOUNTED_BPFFS"
  fi
  rm -rf "$CILIUM_STATE" /var/lib/cilium
  rm -f "$CILIUM_CNI_CONF" "$CILIUM_CNI_BIN" "$CILIUM_UP_MARK"
  [[ -z $(leftovers) ]]
}

# leftovers: what of Cilium is on the machine, one line each.
leftovers() {
  local l
  pid_alive cilium-agent && echo "process cilium-agent (pid $(cat "$PIDS/cilium-agent.pid"))"
  pgrep -f "$CILIUM_BIN/cilium-agent" >/dev/null && echo "process $CILIUM_BIN/cilium-agent"
  for l in $(ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | grep -E '^(cilium_|lxc)'); do echo "link $l"; done
  ipt_chains | sed 's/^/iptables chain /'
  for p in "$CILIUM_IP_RULE_PREF" $((CILIUM_IP_RULE_PREF + 1)); do
    ip -4 rule show pref "$p" | sed 's/^/ip rule /'
  done
  for t in "${CILIUM_PROXY_TABLES[@]}"; do
    ip -4 rule show lookup "$t" | sed 's/^/ip rule /'
    ip -4 route show table "$t" 2>/dev/null | sed "s/^/route table $t: /"
  done
  ip -4 rule show pref 0 | grep -q 'lookup local' || echo "ip rule: the local table is not at pref 0 ($(ip -4 rule show lookup local | head -n 1))"
  [[ -e $CILIUM_STATE ]] && echo "dir $CILIUM_STATE"
  [[ -e /var/lib/cilium ]] && echo "dir /var/lib/cilium"
  [[ -e $CILIUM_BPFFS/cilium || -n $(ls "$CILIUM_BPFFS"/tc/globals/cilium_* 2>/dev/null) ]] && echo "bpffs pins under $CILIUM_BPFFS"
  [[ -f $CILIUM_MOUNTED_BPFFS ]] && findmnt -rn -t bpf "$CILIUM_BPFFS" >/dev/null && echo "bpffs mounted at $CILIUM_BPFFS"
  findmnt -rn -o TARGET -t cgroup2 | grep -x /run/cilium/cgroupv2 | sed 's/^/mount /'
  [[ -e $CILIUM_CNI_CONF ]] && echo "file $CILIUM_CNI_CONF"
  [[ -L $CILIUM_CNI_BIN ]] && echo "file $CILIUM_CNI_BIN"
  return 0
}

case "${1:-}" in
  build) build ;;
  up) shift; up "$@" ;;
  restart) shift; restart "$@" ;;
  down) down "${2:-}" ;;
  status) status ;;
  enforced) enforced "$2" "$3" ;;
  has-policy) has_policy "$2" "$3" ;;
  synced) synced ;;
  drops) drops ;;
  endpoints) dbg endpoint list -o json ;;
  leftovers) l=$(leftovers); [[ -z $l ]] || { printf '%s\n' "$l"; exit 1; } ;;
  --print-dir) echo "$CILIUM_DIR" ;;
  *) die "usage: $0 build|up [FLAG...]|restart [FLAG...]|down|status|enforced NS POD|has-policy NS NAME|endpoints|drops|leftovers|--print-dir" ;;
esac
