#!/usr/bin/env bash
# The test cluster's NetworkPolicy engine: kube-router's network-policy
# controller (the one k3s embeds), firewall only, beside the bridge CNI.
#
#   hack/cluster/netpol.sh build       build kube-router into the cache (stamped; ~2 min cold, instant warm)
#   hack/cluster/netpol.sh up          start it for the running cluster; returns once it enforces
#   hack/cluster/netpol.sh down        stop it and remove every chain, jump rule and ipset it made
#   hack/cluster/netpol.sh status      running or not, its chains and ipsets
#   hack/cluster/netpol.sh leftovers   print what of it is on the machine; exit 1 if anything is
#   hack/cluster/netpol.sh enforced NS POD   exit 0 if a NetworkPolicy restricts the pod's egress
#   hack/cluster/netpol.sh policies NS POD   the NetworkPolicies kube-router applies to its egress
#   hack/cluster/netpol.sh has-policy NS NAME   exit 0 if kube-router has programmed the NetworkPolicy
#   hack/cluster/netpol.sh rejected [POD_IP]  packets kube-router's REJECT rules have refused
#                                      (of the pod at POD_IP, or of every pod)
#   hack/cluster/netpol.sh --print-bin path of the kube-router binary (no build)
#
# Not part of up.sh: the cluster runs without a policy engine unless a test
# (hack/e2e.sh) starts one, so tests that do not need it do not pay for it.
# down.sh stops it and removes its rules whenever the cluster goes down.
#
# kube-router is pointed at the local cluster only (the admin kubeconfig),
# runs only its firewall (no BGP router, no service proxy, no CNI config, no
# load balancer), IPv4 only (the pod network is IPv4), and opens no port:
# health and metrics servers are off. It programs iptables (the nf_tables
# backend here) and ipset; the cluster's own nftables safety net
# (table inet sandprobe_cluster) stays in force underneath it: an engine
# that allows everything still lets pods reach nothing but the lab.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KR_VERSION=v2.1.0
KR_MODULE=github.com/cloudnativelabs/kube-router/v2
KR_DIR="$CACHE/kube-router/$KR_VERSION"
KR_BIN="$KR_DIR/bin/kube-router"
KR_STAMP="$KR_DIR/bin/.stamp"
# What kube-router's network-policy controller creates (filter table, IPv4).
KR_CHAIN_RE='^(KUBE-ROUTER-(INPUT|FORWARD|OUTPUT)|KUBE-NWPLCY-|KUBE-POD-FW-)'
KR_IPSET_RE='^(inet6:)?KUBE-(SRC|DST)-'

log() { printf '[netpol %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

kr_stamp_key() { printf '%s %s\n' "$KR_VERSION" "$(go env GOVERSION)"; }

build() {
  if [[ -x $KR_BIN && -f $KR_STAMP && "$(cat "$KR_STAMP")" == "$(kr_stamp_key)" ]]; then
    return 0
  fi
  log "building kube-router $KR_VERSION (go install, ~2 min cold)"
  local start=$SECONDS tmp
  mkdir -p "$KR_DIR/bin"
  tmp="$(mktemp -d "$KR_DIR/.build.XXXXXX")"
  # Built outside any checkout (go install pkg@version ignores the caller's
  # go.mod), static, into a temp dir first: a killed build never leaves a
  # binary a later run would trust.
  if ! (cd "$tmp" && CGO_ENABLED=0 GOTOOLCHAIN=local GOBIN="$tmp" GOFLAGS="${GOFLAGS:-} -trimpath" \
    go install -ldflags='-s -w' "$KR_MODULE/cmd/kube-router@$KR_VERSION"); then
    rm -rf "$tmp"
    die "go install $KR_MODULE/cmd/kube-router@$KR_VERSION failed"
  fi
  mv -f "$tmp/kube-router" "$KR_BIN"
  rm -rf "$tmp"
  kr_stamp_key >"$KR_STAMP"
  log "built kube-router $KR_VERSION in $((SECONDS - start))s: $KR_BIN"
}

# kr_chains: kube-router's chains in the filter table, one a line.
kr_chains() { iptables -w -t filter -S 2>/dev/null | awk '$1 == "-N" { print $2 }' | grep -E "$KR_CHAIN_RE" || true; }
# kr_jumps: the rules in the built-in chains that jump into kube-router's.
kr_jumps() { iptables -w -t filter -S 2>/dev/null | grep -E '^-A (INPUT|FORWARD|OUTPUT) .*-j KUBE-ROUTER-' || true; }
kr_ipsets() { ipset list -n 2>/dev/null | grep -E "$KR_IPSET_RE" || true; }

# enforcing: the first full sync is done (it ends by appending the explicit
# ACCEPT of policy-compliant traffic to KUBE-ROUTER-FORWARD) and FORWARD
# jumps there.
enforcing() {
  pid_alive kube-router || return 1
  # (grep without -q: an early exit would SIGPIPE iptables and, under
  # pipefail, fail the pipeline.)
  iptables -w -t filter -S KUBE-ROUTER-FORWARD 2>/dev/null | grep 'explicitly ACCEPT traffic that comply' >/dev/null || return 1
  iptables -w -t filter -S FORWARD 2>/dev/null | grep -- '-j KUBE-ROUTER-FORWARD' >/dev/null
}

up() {
  require_root
  command -v ipset >/dev/null || die "ipset is missing (make deps: hack/install-deps.sh)"
  command -v iptables >/dev/null || die "iptables is missing (make deps: hack/install-deps.sh)"
  [[ -s $KUBECONFIG_ADMIN ]] || die "the cluster is not up ($KUBECONFIG_ADMIN missing): run hack/cluster/up.sh"
  build
  if pid_alive kube-router; then
    log "kube-router already running (pid $(cat "$PIDS/kube-router.pid"))"
  else
    # Whatever a killed kube-router left would be mistaken for its work.
    remove_rules
    local t; t=$(now_ns)
    start_bg kube-router "$KR_BIN" \
      --kubeconfig="$KUBECONFIG_ADMIN" \
      --hostname-override="$NODE_NAME" \
      --run-firewall=true --run-router=false --run-service-proxy=false --run-loadbalancer=false \
      --enable-cni=false --enable-ipv4=true --enable-ipv6=false \
      --service-cluster-ip-range="$SERVICE_CIDR" \
      --health-port=0 --metrics-port=0 \
      --v=1
    if ! wait_for "kube-router to enforce" 60 enforcing; then
      tail -n 30 "$LOGS/kube-router.log" >&2 || true
      die "kube-router did not start enforcing; see $LOGS/kube-router.log"
    fi
    log "kube-router $KR_VERSION enforcing in $(ms_since "$t") ms (pid $(cat "$PIDS/kube-router.pid"), log $LOGS/kube-router.log)"
  fi
}

# remove_rules: delete exactly kube-router's jump rules, chains and ipsets,
# nothing else of the filter table (the kubelet's and the Docker test
# engine's chains live there too).
remove_rules() {
  local rule chain set
  while IFS= read -r rule; do
    [[ -n $rule ]] || continue
    # "-A FORWARD -m comment ... -j KUBE-ROUTER-FORWARD" -> "-D FORWARD ..."
    eval "iptables -w -t filter -D ${rule#-A }" || log "warning: could not delete: $rule"
  done < <(kr_jumps)
  mapfile -t chains < <(kr_chains)
  for chain in "${chains[@]}"; do iptables -w -t filter -F "$chain" || true; done
  for chain in "${chains[@]}"; do iptables -w -t filter -X "$chain" || log "warning: could not delete chain $chain"; done
  while IFS= read -r set; do
    [[ -n $set ]] && { ipset destroy "$set" || log "warning: could not destroy ipset $set"; }
  done < <(kr_ipsets)
}

down() {
  require_root
  if [[ -d $PIDS ]] && pid_alive kube-router; then log "stopping kube-router"; fi
  [[ -d $PIDS ]] && stop_pid kube-router 10
  remove_rules
  leftovers >/dev/null || { leftovers >&2 || true; die "kube-router's rules are still there after down"; }
}

leftovers() {
  local left=0 x
  for x in $(kr_chains); do echo "chain $x"; left=1; done
  while IFS= read -r x; do [[ -n $x ]] && { echo "jump $x"; left=1; }; done < <(kr_jumps)
  for x in $(kr_ipsets); do echo "ipset $x"; left=1; done
  if [[ -f $PIDS/kube-router.pid ]] && pid_alive kube-router; then echo "process kube-router pid $(cat "$PIDS/kube-router.pid")"; left=1; fi
  return $left
}

status() {
  if pid_alive kube-router; then
    if enforcing; then echo "kube-router $KR_VERSION: running (pid $(cat "$PIDS/kube-router.pid")), enforcing"
    else echo "kube-router $KR_VERSION: running (pid $(cat "$PIDS/kube-router.pid")), not enforcing yet"; fi
  else
    echo "kube-router $KR_VERSION: stopped"
  fi
  echo "chains: $(kr_chains | wc -l) ($(kr_chains | grep -c '^KUBE-POD-FW-' || true) pod firewalls, $(kr_chains | grep -c '^KUBE-NWPLCY-' || true) policy chains), ipsets: $(kr_ipsets | wc -l)"
}

# pod_policies NS POD: the NetworkPolicies kube-router applies to the pod's
# egress. Every local pod gets a firewall chain (its comments name the pod);
# a policy that selects the pod's egress adds "-s IP ... run through nw
# policy NAME" to it. A pod no policy selects runs through the default chain
# only: allowed everything.
pod_policies() {
  local rules chain
  rules=$(iptables -w -t filter -S 2>/dev/null)
  chain=$(awk -v tag="POD name:$2 namespace: $1" '$1 == "-A" && $2 ~ /^KUBE-POD-FW-/ && index($0, tag) { print $2; exit }' <<<"$rules")
  [[ -n $chain ]] || return 0
  awk -v c="$chain" '$1 == "-A" && $2 == c && $3 == "-s"' <<<"$rules" |
    sed -n 's/.*--comment "run through nw policy \([^"]*\)".*/\1/p'
}

# enforced NS POD: some NetworkPolicy restricts the pod's egress.
enforced() { [[ -n $(pod_policies "$1" "$2") ]]; }

# rejected [POD_IP]: the packet count of kube-router's REJECT rules: of the
# firewall of the pod at POD_IP, or summed over every pod firewall.
rejected() {
  local ip=${1:-} chain
  if [[ -n $ip ]]; then
    # The pod's firewall is the chain KUBE-ROUTER-FORWARD sends "-s IP" to.
    chain=$(iptables -w -t filter -S KUBE-ROUTER-FORWARD 2>/dev/null | awk -v ip="$ip/32" '$0 ~ " -s " ip " " { for (i = 1; i <= NF; i++) if ($i == "-j") print $(i + 1) }' | head -n 1)
    [[ -n $chain ]] || { echo 0; return 0; }
    iptables -w -t filter -L "$chain" -v -x -n 2>/dev/null | awk '$3 == "REJECT" { s += $1 } END { print s + 0 }'
    return 0
  fi
  iptables -w -t filter -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-POD-FW-/ { print $2 }' | while read -r chain; do
    iptables -w -t filter -L "$chain" -v -x -n 2>/dev/null | awk '$3 == "REJECT" { s += $1 } END { print s + 0 }'
  done | awk '{ s += $1 } END { print s + 0 }'
}

# has-policy NS NAME: kube-router has programmed the NetworkPolicy (its
# policy chains' comments name it: "... policy name: NAME namespace NS").
has_policy() {
  iptables -w -t filter -S 2>/dev/null | grep -E '^-A KUBE-NWPLCY-' | grep -F "policy name: $2 namespace $1" >/dev/null
}

case "${1:-}" in
  build) build ;;
  up) up ;;
  down) down ;;
  status) status ;;
  leftovers) leftovers ;;
  enforced) [[ $# == 3 ]] || die "usage: netpol.sh enforced NAMESPACE POD"; enforced "$2" "$3" ;;
  policies) [[ $# == 3 ]] || die "usage: netpol.sh policies NAMESPACE POD"; pod_policies "$2" "$3" ;;
  rejected) rejected "${2:-}" ;;
  has-policy) [[ $# == 3 ]] || die "usage: netpol.sh has-policy NAMESPACE NAME"; has_policy "$2" "$3" ;;
  --print-bin) echo "$KR_BIN" ;;
  -h | --help | "") sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' ;;
  *) echo "netpol.sh: unknown command $1" >&2; exit 2 ;;
esac
