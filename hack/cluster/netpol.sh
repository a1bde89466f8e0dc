#!/usr/bin/env bash
# The test cluster's NetworkPolicy engine: kube-router's network-policy
# controller (the one k3s embeds), firewall only, beside the bridge CNI.
#
#   hack/cluster/netpol.sh build       build kube-router into the cache (stamped; ~2 min cold, instant warm)
#   hack/cluster/netpol.sh up          start it for the running cluster; returns once it enforces
#   hack/cluster/netpol.sh up --daemonset   the same binary as a DaemonSet (kube-system/kube-router,
#                                      hostNetwork, privileged), the way clusters run their CNI agent
#   hack/cluster/netpol.sh manifest [--firewall-off]   the DaemonSet's YAML (--firewall-off: the
#                                      template of a broken upgrade: Ready, its rules gone, enforcing nothing)
#   hack/cluster/netpol.sh down        stop it (either mode) and remove every chain, jump rule and ipset it made
#   hack/cluster/netpol.sh status      running or not (which mode), its chains and ipsets
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
# kr_chains, kr_jumps, kr_ipsets, remove_rules: what kube-router programs
# and how to remove exactly that (shared with the DaemonSet's image).
KR_RULES="$cluster_lib_dir/kube-router-rules.sh"
# shellcheck source=hack/cluster/kube-router-rules.sh
source "$KR_RULES"
# The DaemonSet mode (up --daemonset): its objects, all named kube-router.
KR_DS_NS=kube-system
KR_DS=kube-router

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

# kube-router's flags in both modes (host process and DaemonSet), beside
# --kubeconfig / the in-cluster config and --hostname-override.
KR_FLAGS=(
  --run-firewall=true --run-router=false --run-service-proxy=false --run-loadbalancer=false
  --enable-cni=false --enable-ipv4=true --enable-ipv6=false
  --service-cluster-ip-range="$SERVICE_CIDR"
  --health-port=0 --metrics-port=0
  --v=1
)

# api_up: the cluster's API server answers (down must work without it).
api_up() { [[ -s $KUBECONFIG_ADMIN ]] && kc get --raw /readyz --request-timeout=3s >/dev/null 2>&1; }

# ds_exists / ds_ready: the DaemonSet is there / rolled out, every pod of
# its current template Ready.
ds_exists() { api_up && kc -n "$KR_DS_NS" get daemonset "$KR_DS" >/dev/null 2>&1; }
ds_ready() {
  local st gen obs want updated ready avail
  st=$(kc -n "$KR_DS_NS" get daemonset "$KR_DS" -o jsonpath='{.metadata.generation} {.status.observedGeneration} {.status.desiredNumberScheduled} {.status.updatedNumberScheduled} {.status.numberReady} {.status.numberAvailable}' 2>/dev/null) || return 1
  read -r gen obs want updated ready avail <<<"$st"
  [[ -n $avail && $gen == "$obs" && $want -gt 0 && $updated == "$want" && $ready == "$want" && $avail == "$want" ]]
}

# agent_running: kube-router runs, as a host process or as a DaemonSet.
agent_running() { pid_alive kube-router || ds_ready; }

# enforcing: the first full sync is done (it ends by appending the explicit
# ACCEPT of policy-compliant traffic to KUBE-ROUTER-FORWARD) and FORWARD
# jumps there.
enforcing() {
  agent_running || return 1
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
  if ds_exists; then
    log "switching from the DaemonSet to the host process"
    down_daemonset
  fi
  if pid_alive kube-router; then
    log "kube-router already running (pid $(cat "$PIDS/kube-router.pid"))"
  else
    # Whatever a killed kube-router left would be mistaken for its work.
    remove_rules
    local t; t=$(now_ns)
    start_bg kube-router "$KR_BIN" \
      --kubeconfig="$KUBECONFIG_ADMIN" \
      --hostname-override="$NODE_NAME" \
      "${KR_FLAGS[@]}"
    if ! wait_for "kube-router to enforce" 60 enforcing; then
      tail -n 30 "$LOGS/kube-router.log" >&2 || true
      die "kube-router did not start enforcing; see $LOGS/kube-router.log"
    fi
    log "kube-router $KR_VERSION enforcing in $(ms_since "$t") ms (pid $(cat "$PIDS/kube-router.pid"), log $LOGS/kube-router.log)"
  fi
}

# The DaemonSet mode: image_ref, ensure_image, manifest, up_daemonset,
# ds_pods, down_daemonset.
source "$(dirname "${BASH_SOURCE[0]}")/netpol-daemonset.sh"

down() {
  require_root
  if [[ -d $PIDS ]] && pid_alive kube-router; then log "stopping kube-router"; fi
  [[ -d $PIDS ]] && stop_pid kube-router 10
  down_daemonset
  remove_rules
  leftovers >/dev/null || { leftovers >&2 || true; die "kube-router's rules are still there after down"; }
}

# ds_procs: processes of the DaemonSet's containers (either template), as
# "PID ARGV" lines: the script at the container's root, not a path naming it
# (a linter given hack/cluster/kube-router-rules.sh is no kube-router).
ds_procs() { pgrep -a -f '^/kube-router( |$)|(^| )/kube-router-rules\.sh([ ;]|$)' 2>/dev/null || true; }

leftovers() {
  local left=0 x
  for x in $(kr_chains); do echo "chain $x"; left=1; done
  while IFS= read -r x; do [[ -n $x ]] && { echo "jump $x"; left=1; }; done < <(kr_jumps)
  for x in $(kr_ipsets); do echo "ipset $x"; left=1; done
  if [[ -f $PIDS/kube-router.pid ]] && pid_alive kube-router; then echo "process kube-router pid $(cat "$PIDS/kube-router.pid")"; left=1; fi
  if ds_exists; then echo "daemonset $KR_DS_NS/$KR_DS"; left=1; fi
  while IFS= read -r x; do [[ -n $x ]] && { echo "process (DaemonSet container) $x"; left=1; }; done < <(ds_procs)
  return $left
}

status() {
  if pid_alive kube-router; then
    if enforcing; then echo "kube-router $KR_VERSION: running (host process, pid $(cat "$PIDS/kube-router.pid")), enforcing"
    else echo "kube-router $KR_VERSION: running (host process, pid $(cat "$PIDS/kube-router.pid")), not enforcing yet"; fi
  elif ds_exists; then
    local tmpl
    tmpl=$(kc -n "$KR_DS_NS" get daemonset "$KR_DS" -o jsonpath='{.spec.template.metadata.annotations.sandprobe\.dev/kube-router-template}' 2>/dev/null)
    if enforcing; then echo "kube-router $KR_VERSION: DaemonSet $KR_DS_NS/$KR_DS ($tmpl template; pods $(ds_pods | tr '\n' ' ')), enforcing"
    else echo "kube-router $KR_VERSION: DaemonSet $KR_DS_NS/$KR_DS ($tmpl template; pods $(ds_pods | tr '\n' ' ')), not enforcing"; fi
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
  up)
    case "${2:-}" in
      "") up ;;
      --daemonset) up_daemonset ;;
      *) die "usage: netpol.sh up [--daemonset]" ;;
    esac
    ;;
  manifest)
    [[ -s $KR_BIN ]] || die "kube-router is not built: netpol.sh build"
    case "${2:-}" in "" | --firewall-off) manifest "${2:-}" ;; *) die "usage: netpol.sh manifest [--firewall-off]" ;; esac
    ;;
  down) down ;;
  status) status ;;
  leftovers) leftovers ;;
  enforced) [[ $# == 3 ]] || die "usage: netpol.sh enforced NAMESPACE POD"; enforced "$2" "$3" ;;
  policies) [[ $# == 3 ]] || die "usage: netpol.sh policies NAMESPACE POD"; pod_policies "$2" "$3" ;;
  rejected) rejected "${2:-}" ;;
  has-policy) [[ $# == 3 ]] || die "usage: netpol.sh has-policy NAMESPACE NAME"; has_policy "$2" "$3" ;;
  --print-bin) echo "$KR_BIN" ;;
  -h | --help | "") sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' ;;
  *) echo "netpol.sh: unknown command $1" >&2; exit 2 ;;
esac
