# shellcheck shell=bash
# shellcheck disable=SC2034 # settings used by the scripts that source this
# Shared settings and helpers for hack/cluster/*.sh. Source it; don't run it.
#
# Everything the test cluster touches on the machine is named here, so that
# down.sh can undo exactly that and nothing else.

set -euo pipefail

cluster_lib_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "$cluster_lib_dir/../.." && pwd)"

# ---- locations ----------------------------------------------------------------
# State (pids, logs, PKI, kubeconfigs, configs, sockets): tmpfs, gone on reboot.
CLUSTER_DIR="${SANDPROBE_CLUSTER_DIR:-/run/sandprobe-cluster}"
# Data (etcd, kubelet root, containerd content/snapshots): wiped by down.sh.
DATA_DIR="${SANDPROBE_CLUSTER_DATA_DIR:-/var/lib/sandprobe-cluster}"
# Caches that survive between CI runs: built binaries, extracted .debs, images.
CACHE="${SANDPROBE_CACHE:-/var/cache/sandprobe}"

KUBECONFIG_ADMIN="$CLUSTER_DIR/admin.kubeconfig"
PKI="$CLUSTER_DIR/pki"
LOGS="$CLUSTER_DIR/logs"
PIDS="$CLUSTER_DIR/pids"
CONTAINERD_SOCK="$CLUSTER_DIR/containerd/containerd.sock"
CONTAINERD_STATE="$CLUSTER_DIR/containerd/state"
CNI_CONF_DIR="$CLUSTER_DIR/cni/net.d"
KUBELET_ROOT="$DATA_DIR/kubelet"
POD_LOGS_DIR="$DATA_DIR/pod-logs"
# The kubelet always symlinks container logs into this fixed directory.
KUBELET_CONTAINER_LOGS_DIR=/var/log/containers

# Binaries built by hack/k8s/build.sh and Debian packages unpacked (never
# installed, so no service starts) by ensure_runtime below.
K8S_BIN="$("$repo_root/hack/k8s/build.sh" --print-bin-dir)"
RUNTIME_DEBS=(containerd runc containernetworking-plugins runsc)
RUNTIME_ROOT="$CACHE/k8s/runtime"          # <RUNTIME_ROOT>/usr/bin/containerd ...
RUNTIME_BIN="$RUNTIME_ROOT/usr/bin"
CNI_BIN_DIR="$RUNTIME_ROOT/usr/lib/cni"
IMAGES_CACHE="$CACHE/k8s/images"

# cluster_source_hash: what the scripts and images that make the cluster hash
# to. up.sh records it in $CLUSTER_DIR/source-hash, so a test from another
# checkout (another version of the cluster) can tell the running cluster is
# not its own and rebuild it (internal/testenv.Cluster).
cluster_source_hash() {
  (cd "$cluster_lib_dir" && find . -type f ! -name '*.md' ! -name smoke.sh ! -name check-isolation.sh -print0 |
    LC_ALL=C sort -z | xargs -0 cat) | sha256sum | cut -c1-16
}

# ---- network --------------------------------------------------------------------
NODE_NAME=sandprobe-node
# The node's address lives on its own interface (a veth pair kept in the host
# namespace): a loopback --node-ip leaves the Node without an InternalIP and
# `kubectl logs` can't reach the kubelet.
NODE_IF=sp-node
NODE_IP=10.250.0.1
APISERVER_PORT=6443
APISERVER_URL="https://$NODE_IP:$APISERVER_PORT"
BRIDGE=sp-cni0
BRIDGE_MAC=02:73:70:63:6e:69 # locally administered ("spcni"); see up.sh
POD_CIDR=10.244.0.0/24
POD_GW=10.244.0.1
# host-local hands out .2-.199; .200-.254 are free for check-isolation.sh netns.
POD_RANGE_END=10.244.0.199
SERVICE_CIDR=10.96.0.0/24
SERVICE_IP=10.96.0.1
# The lab network (built by another part of the test environment) is the only
# routed destination pods may reach besides the node itself.
LAB_CIDR4="${SANDPROBE_LAB_CIDR4:-10.99.0.0/16}"
LAB_CIDR6="${SANDPROBE_LAB_CIDR6:-fd99::/48}"
# The lab's resolver: the only DNS server pods are given.
CLUSTER_DNS="${SANDPROBE_CLUSTER_DNS:-10.99.53.53}"
NFT_TABLE=sandprobe_cluster                # nft table inet sandprobe_cluster
IP_RULE_PREF=10990                         # ip rules pref 10990 and 10991

# Loopback ports, chosen away from the defaults so a developer's own etcd or
# envtest on the same machine doesn't collide.
ETCD_CLIENT_PORT=12379
ETCD_PEER_PORT=12380

# cgroup that holds every process we start (and, through inheritance, the
# containerd shims), so down.sh can stop all of them without guessing names.
CGROUP_NAME=sandprobe-cluster

# Sandbox ("pause") image, imported locally since there is no registry.
PAUSE_IMAGE=sandprobe.local/pause:1
PROBE_IMAGE=sandprobe.local/probe:1

# Sysctls the kubelet (kernel tunables) and the CNI bridge plugin
# (ip_forward) change; up.sh records them, down.sh restores them.
SAVED_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward
  net.ipv6.conf.all.forwarding)

# ---- helpers ----------------------------------------------------------------------
log() { printf '[cluster %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

require_root() { [[ $EUID == 0 ]] || die "must run as root"; }

# kc runs the cluster's kubectl as admin.
kc() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

# ctrc runs the containerd client against our containerd in the k8s.io namespace.
ctrc() { "$RUNTIME_BIN/ctr" --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"; }

# cgroup_roots prints every cgroup hierarchy mount (v1 controllers, named
# hierarchies and the v2 unified mount), one per line.
cgroup_roots() {
  awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/self/mounts | sort -u
}

# tracking_cgroup prints the cgroup dir used to track our processes: the
# pids controller on cgroup v1/hybrid, the unified root on pure cgroup v2.
tracking_cgroup() {
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    echo "/sys/fs/cgroup/$CGROUP_NAME"
  else
    echo "/sys/fs/cgroup/pids/$CGROUP_NAME"
  fi
}

# start_bg NAME CMD...: run CMD detached (own session, logs to $LOGS/NAME.log,
# pid in $PIDS/NAME.pid) inside the tracking cgroup.
start_bg() {
  local name="$1"; shift
  local cg; cg="$(tracking_cgroup)"
  mkdir -p "$cg" "$LOGS" "$PIDS"
  # The subshell moves itself into the cgroup, then execs the component, so
  # the component and all its children (shims, containers' runtimes) are
  # accounted there.
  # shellcheck disable=SC2016 # $$ and $@ are for the inner shell
  setsid bash -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' _ "$cg" "$@" \
    </dev/null >>"$LOGS/$name.log" 2>&1 &
  echo $! > "$PIDS/$name.pid"
}

# pid_alive NAME: the component started under NAME is still running.
pid_alive() {
  local f="$PIDS/$1.pid"
  [[ -f $f ]] && running "$(cat "$f")"
}

# running PID: the process exists and is not a zombie (our components are
# reparented to PID 1 once up.sh exits, and it may reap them late).
running() {
  local state
  state="$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ -n $state && $state != Z ]]
}

# wait_for DESC TIMEOUT_S CMD...: poll CMD every 0.2 s until it succeeds.
wait_for() {
  local desc="$1" timeout="$2"; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log "timed out after ${timeout}s waiting for $desc"
      return 1
    fi
    sleep 0.2
  done
}

# stop_pid NAME [TIMEOUT]: SIGTERM the component, SIGKILL after TIMEOUT s.
stop_pid() {
  local name="$1" timeout="${2:-10}" f="$PIDS/$1.pid" pid i
  [[ -f $f ]] || return 0
  pid="$(cat "$f")"
  if running "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < timeout * 10; i++)); do
      running "$pid" || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

# ms_since START_NS: milliseconds elapsed since a `date +%s%N` value.
now_ns() { date +%s%N; }
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }
