#!/usr/bin/env bash
# hack/leftovers.sh [docker|cluster|lab|envtest|tests]...
#
# Lists what the project's test environments left on this machine and exits
# 1 when anything is left that SANDPROBE_KEEP does not name; exit 0 prints
# "nothing left". `make test` runs it last, after `make down` (hack/down.sh)
# has stopped what it started, and hack/demo.sh ends with `leftovers.sh lab`,
# so a test or a script that leaks a daemon turns the run red. With no
# argument it checks everything:
#
#   docker   the private Docker engine (hack/docker): dockerd, containerd,
#            shims, runsc — whatever runs from /run/sandprobe-docker
#   cluster  the test cluster (hack/cluster): its processes (pid files, and
#            anything running from its state or data directory), kube-router
#            (hack/cluster/netpol.sh, host process or DaemonSet) and its rules,
#            Cilium (hack/cluster/cilium.sh) and what it installs, e2e's Pushgateway, its
#            node and bridge links, nftables tables, check-isolation netns
#   lab      the network lab (hack/lab): its daemons (dnsmasq, tinyproxy,
#            squid, the lab's Go servers), its network namespaces and what
#            attach-cluster adds to the root namespace (hack/lab/lab names)
#   envtest  kube-apiserver and etcd of envtest (their k8s_test_framework
#            dirs), kwok's controller and scheduler (the simulated fleet)
#   tests    what tests start and must stop themselves: Prometheus,
#            Alertmanager and Pushgateway servers, headless Chromium (chromedp), sandprobe
#            binaries (serve, probe) from bin/ or a test build
#
# SANDPROBE_KEEP="docker lab" (or cluster, or all; spaces or commas) names what
# is meant to stay: it is listed as kept and does not fail the check.
#
# Read-only: it stops nothing (make down does). It reads /proc, /run/netns,
# `ip link` and `nft`, so it needs root for the kernel state.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

LAB_DIR=${SANDPROBE_LAB_DIR:-/run/sandprobe-lab}
CLUSTER_DIR=${SANDPROBE_CLUSTER_DIR:-/run/sandprobe-cluster}
CLUSTER_DATA_DIR=${SANDPROBE_CLUSTER_DATA_DIR:-/var/lib/sandprobe-cluster}
DOCKER_RUN=/run/sandprobe-docker
CACHE=${SANDPROBE_CACHE:-/var/cache/sandprobe}
NETNS_DIR=/run/netns
keep=${SANDPROBE_KEEP:-}
keep=" ${keep//,/ } "

components=("$@")
((${#components[@]})) || components=(docker cluster lab envtest tests)
for c in "${components[@]}"; do
  case $c in
    docker | cluster | lab | envtest | tests) ;;
    *) echo "leftovers: unknown component $c (want docker, cluster, lab, envtest, tests)" >&2; exit 2 ;;
  esac
done

# Every process's command line, once: "PID<tab>EXE<tab>ARGV joined by spaces".
# This script and its children are not listed.
procs=()
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
  [[ -r $d/cmdline ]] || continue
  IFS= read -r -d '' argv < <(tr '\0' ' ' <"$d/cmdline" 2>/dev/null; printf '\0') || true
  [[ -n $argv ]] || continue # kernel threads
  exe=$(readlink "$d/exe" 2>/dev/null || true)
  procs+=("$pid"$'\t'"$exe"$'\t'"${argv% }")
done

left=0
kept=0
declare -A reported # pid → already listed
# found COMPONENT WHAT: one thing left behind.
found() {
  if [[ $keep == *" $1 "* || $keep == *" all "* ]]; then
    printf '  %-8s kept (SANDPROBE_KEEP): %s\n' "$1" "$2"
    kept=$((kept + 1))
  else
    printf '  %-8s %s\n' "$1" "$2"
    left=$((left + 1))
  fi
}

# procs_with COMPONENT SUBSTRING...: processes whose command line holds one
# of the substrings.
procs_with() {
  local comp=$1 p pid rest argv s
  shift
  for p in "${procs[@]}"; do
    pid=${p%%$'\t'*}
    rest=${p#*$'\t'}
    argv=${rest#*$'\t'}
    [[ -n ${reported[$pid]:-} ]] && continue
    for s in "$@"; do
      if [[ $argv == *"$s"* ]]; then
        reported[$pid]=1
        found "$comp" "process $pid: ${argv:0:160}"
        break
      fi
    done
  done
}

# procs_exe COMPONENT GLOB...: processes whose executable matches a glob.
procs_exe() {
  local comp=$1 p pid rest exe argv g
  shift
  for p in "${procs[@]}"; do
    pid=${p%%$'\t'*}
    rest=${p#*$'\t'}
    exe=${rest%%$'\t'*}
    argv=${rest#*$'\t'}
    [[ -n ${reported[$pid]:-} ]] && continue
    for g in "$@"; do
      # shellcheck disable=SC2053 # a glob on purpose
      if [[ $exe == $g ]]; then
        reported[$pid]=1
        found "$comp" "process $pid: ${argv:0:160}"
        break
      fi
    done
  done
}

# pidfiles COMPONENT DIR: the live processes of DIR/*.pid.
pidfiles() {
  local comp=$1 f pid
  for f in "$2"/*.pid; do
    [[ -f $f ]] || continue
    read -r pid <"$f" 2>/dev/null || continue
    if ! [[ $pid =~ ^[0-9]+$ ]] || ! kill -0 "$pid" 2>/dev/null; then continue; fi
    [[ -n ${reported[$pid]:-} ]] && continue
    reported[$pid]=1
    found "$comp" "$(basename "$f" .pid) (pid $pid, $f)"
  done
}

netns_named() {
  local comp=$1 pattern=$2 n
  [[ -d $NETNS_DIR ]] || return 0
  for n in "$NETNS_DIR"/*; do
    n=${n##*/}
    # shellcheck disable=SC2053
    [[ $n == $pattern ]] && found "$comp" "network namespace $n"
  done
}

for c in "${components[@]}"; do
  case $c in
    docker)
      pidfiles docker "$DOCKER_RUN"
      procs_with docker "$DOCKER_RUN/"
      ;;
    cluster)
      pidfiles cluster "$CLUSTER_DIR/pids"
      procs_with cluster "$CLUSTER_DIR/" "$CLUSTER_DATA_DIR/" "--web.listen-address=10.250.0.1:"
      # kube-router's DaemonSet containers (netpol.sh up --daemonset), either template.
      procs_with cluster "/kube-router --run-firewall" "/kube-router-rules.sh"
      netns_named cluster 'sp-iso-*'
      for l in sp-node sp-cni0 sp-iso-meta-h; do
        ip link show "$l" &>/dev/null && found cluster "link $l"
      done
      if command -v nft >/dev/null; then
        for t in sandprobe_cluster sandprobe_e2e_witness; do
          nft list table inet "$t" &>/dev/null && found cluster "nftables table inet $t"
        done
      fi
      # kube-router's chains, jumps and ipsets (hack/cluster/netpol.sh).
      if command -v iptables >/dev/null && iptables -S 2>/dev/null | grep -qE '^-N (KUBE-ROUTER-|KUBE-NWPLCY-|KUBE-POD-FW-)'; then
        found cluster "kube-router iptables chains (hack/cluster/netpol.sh leftovers)"
      fi
      # Cilium (hack/cluster/cilium.sh, make e2e CNI=cilium): the agent, its
      # links, iptables chains, ip rules, bpffs pins, /var/run/cilium, CNI files.
      procs_with cluster "$CACHE/cilium/"
      while IFS= read -r l; do
        [[ -n $l && $l != process* ]] && found cluster "cilium: $l"
      done < <(hack/cluster/cilium.sh leftovers 2>/dev/null)
      ;;
    lab)
      pidfiles lab "$LAB_DIR/pids"
      procs_with lab "$LAB_DIR/"
      # The namespaces, root-namespace link and nftables tables this
      # checkout's lab makes (`hack/lab/lab names`): what `lab down` removes.
      # Namespaces another version of the lab made are that version's.
      read -r -a lab_state < <(hack/lab/lab names)
      IFS='|' read -r lab_link lab_attach_table lab_table <<<"${lab_state[0]}"
      for n in "${lab_state[@]:1}"; do
        [[ -e $NETNS_DIR/$n ]] && found lab "network namespace $n"
      done
      ip link show "$lab_link" &>/dev/null && found lab "link $lab_link"
      if command -v nft >/dev/null; then
        for t in "$lab_attach_table" "$lab_table"; do
          nft list table inet "$t" &>/dev/null && found lab "nftables table inet $t"
        done
      fi
      ;;
    envtest)
      procs_with envtest k8s_test_framework
      # kwok's fleet (internal/testenv/kwok.go): its controller, and the
      # kube-scheduler and other Kubernetes binaries the cluster does not own.
      procs_exe envtest "$CACHE/kwok/*" "$CACHE/k8s/*"
      ;;
    tests)
      procs_with tests "--storage.tsdb.path=/tmp/" "--storage.path=/tmp/" "--web.listen-address=127.0.0.1:" chromedp-runner
      procs_exe tests "$PWD/bin/sandprobe" "$PWD/bin/sandprobe-probe" "/tmp/sandprobe-test-bin-*/sandprobe" "/tmp/sandprobe-test-bin-*/sandprobe-probe"
      ;;
  esac
done

if ((left > 0)); then
  echo "leftovers: $left thing(s) above outlived make test / make demo (stop them: make down; keep them on purpose: SANDPROBE_KEEP=...)" >&2
  exit 1
fi
if ((kept > 0)); then
  echo "leftovers: nothing left but what SANDPROBE_KEEP keeps"
else
  echo "leftovers: nothing left (${components[*]})"
fi
