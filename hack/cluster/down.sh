#!/usr/bin/env bash
# Tear down the cluster started by hack/cluster/up.sh and leave the machine as
# it was: stop every process it started (and the NetworkPolicy engine of
# netpol.sh with its iptables chains and ipsets), unmount what the kubelet and
# containerd mounted, remove the kubepods cgroups, the CNI bridge, the dummy
# node interface, the ip rules and the nftables table, restore the sysctls
# that were changed, and delete the state and data directories.
#
# Safe to run twice, or without up.sh: every step checks before it acts.
# Caches (built binaries, unpacked packages) under $SANDPROBE_CACHE are kept.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root

t_start=$(now_ns)

# ---- 1. pods -------------------------------------------------------------------------
# With the control plane and the kubelet still up, delete pods the normal way
# so the kubelet stops their sandboxes and containerd runs CNI DEL and removes
# their network namespaces.
if pid_alive kubelet && pid_alive kube-apiserver && [[ -f $KUBECONFIG_ADMIN ]]; then
  if [[ -n "$(kc get pods -A -o name 2>/dev/null)" ]]; then
    log "deleting pods"
    kc delete pods -A --all --grace-period=1 --wait=true --timeout=30s >/dev/null 2>&1 \
      || log "pod deletion timed out; killing what is left"
  fi
fi

# ---- 2. processes ----------------------------------------------------------------------
# The NetworkPolicy engine first (if a test started it): stop kube-router and
# remove its chains, jump rules and ipsets (hack/cluster/netpol.sh).
"$cluster_lib_dir/netpol.sh" down || log "warning: the NetworkPolicy engine's teardown failed (hack/cluster/netpol.sh leftovers)"

# kubelet first (so it doesn't restart containers), then containerd, then the
# control plane; each gets SIGTERM and a grace period, then SIGKILL.
if [[ -d $PIDS ]]; then
  for name in kubelet containerd cilium-agent kube-scheduler kube-controller-manager kube-apiserver etcd; do
    if pid_alive "$name"; then log "stopping $name"; fi
    stop_pid "$name" 10
  done
fi

# kill_cgroup DIR: SIGKILL every process in the cgroup DIR and its children
# until it is empty. These are exactly the processes the cluster started:
# containers (kubepods) and containerd's shims and helpers (tracking cgroup).
kill_cgroup() {
  local dir="$1" i pid procs
  [[ -d $dir ]] || return 0
  for ((i = 0; i < 50; i++)); do
    procs="$(find "$dir" -name cgroup.procs -exec cat {} + 2>/dev/null || true)"
    [[ -z $procs ]] && return 0
    for pid in $procs; do kill -KILL "$pid" 2>/dev/null || true; done
    sleep 0.1
  done
  log "warning: processes left in $dir: ${procs//$'\n'/ }"
}

# rmdir_cgroup DIR: remove a cgroup directory tree, deepest first.
rmdir_cgroup() {
  [[ -d $1 ]] || return 0
  find "$1" -depth -type d -exec rmdir {} + 2>/dev/null || true
  [[ ! -d $1 ]] || log "warning: could not remove cgroup $1"
}

# containerd 1.6 puts its shims' sockets in a fixed directory shared with any
# other containerd (/run/containerd/s); each task's bundle records its shim's
# address, so collect ours now and remove them once the shims are dead.
# (The files have no trailing newline; sed reads each as its own line.)
mapfile -t shim_sockets < <(sed -n 's|^unix://||p' \
  "$CONTAINERD_STATE"/io.containerd.runtime.v2.task/*/*/address 2>/dev/null | sort -u)

mapfile -t cg_roots < <(cgroup_roots)
for root in "${cg_roots[@]}"; do
  kill_cgroup "$root/kubepods"
  kill_cgroup "$root/$CGROUP_NAME"
done
# A kube-router DaemonSet pod the API could not delete (netpol.sh up
# --daemonset with the API server already gone) died with kubepods just
# now; its rules outlive it. (Harmless and quiet when there are none.)
"$cluster_lib_dir/netpol.sh" down >/dev/null 2>&1 || "$cluster_lib_dir/netpol.sh" leftovers >&2 || true
# Cilium as the CNI (cilium.sh up): stopped with the components above once
# the pods were gone (their CNI DEL needs the agent); now what it installed:
# links, BPF programs and pins, iptables chains, ip rules, its state dir.
"$cluster_lib_dir/cilium.sh" down >/dev/null 2>&1 || { log "warning: Cilium's teardown left:"; "$cluster_lib_dir/cilium.sh" leftovers >&2; } || true

# ---- 3. mounts ----------------------------------------------------------------------------
# Pod volumes (kubelet root), container rootfs and shm mounts (containerd
# state and root), plus the network-namespace bind mounts containerd made for
# our pods. Deepest first; lazy as a last resort so a busy mount can't wedge
# teardown.
our_netns() {
  local ns
  for ns in /run/netns/cni-*; do
    [[ -e $ns ]] || continue
    # Ours if it holds an address in our pod CIDR (only our CNI config hands
    # those out).
    if [[ "$(ip -n "$(basename "$ns")" -4 -o addr show 2>/dev/null)" == *" ${POD_CIDR%.*}."* ]]; then
      echo "$ns"
    fi
  done
}
mapfile -t netns_list < <(our_netns)
mapfile -t mounts < <(findmnt -rn -o TARGET | awk -v a="$DATA_DIR/" -v b="$CLUSTER_DIR/" \
  'index($0, a) == 1 || index($0, b) == 1 || $0 == substr(a, 1, length(a) - 1) || $0 == substr(b, 1, length(b) - 1)' \
  | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2-)
for m in "${netns_list[@]}" "${mounts[@]}"; do
  [[ -n $m ]] || continue
  # findmnt escapes spaces etc. as \x20; mount paths here have none.
  umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "warning: could not unmount $m"
done
for ns in "${netns_list[@]}"; do [[ -n $ns ]] && rm -f "$ns"; done

for sock in "${shim_sockets[@]}"; do [[ -n $sock && -S $sock ]] && rm -f "$sock"; done

# ---- 4. cgroups -----------------------------------------------------------------------------
for root in "${cg_roots[@]}"; do
  rmdir_cgroup "$root/kubepods"
  rmdir_cgroup "$root/$CGROUP_NAME"
done

# ---- 5. network ---------------------------------------------------------------------------------
# check-isolation.sh leftovers (it cleans up itself; this covers a kill -9).
for ns in sp-iso-pod sp-iso-meta; do ip netns del "$ns" 2>/dev/null || true; done
ip link del sp-iso-meta-h 2>/dev/null || true
# veths still attached to the bridge (pods whose netns we could not remove).
if ip link show "$BRIDGE" &>/dev/null; then
  for dev in $(ip -o link show master "$BRIDGE" | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }'); do
    ip link del "$dev" 2>/dev/null || true
  done
  ip link del "$BRIDGE"
fi
ip link del "$NODE_IF" 2>/dev/null || true
for fam in -4 -6; do
  for pref in "$IP_RULE_PREF" $((IP_RULE_PREF + 1)); do
    while ip "$fam" rule del pref "$pref" 2>/dev/null; do :; done
  done
done
if command -v nft >/dev/null && nft list table inet "$NFT_TABLE" &>/dev/null; then
  nft delete table inet "$NFT_TABLE"
fi

# ---- 6. sysctls and files -------------------------------------------------------------------------
if [[ -f $DATA_DIR/sysctl.orig ]]; then
  while IFS='=' read -r key val; do
    if [[ -n $key ]]; then sysctl -qw "$key=$val" || true; fi
  done < "$DATA_DIR/sysctl.orig"
fi
# The kubelet's fixed symlink directory: drop our links, and the directory
# itself if the kubelet created it.
if [[ -d $KUBELET_CONTAINER_LOGS_DIR ]]; then
  find "$KUBELET_CONTAINER_LOGS_DIR" -maxdepth 1 -type l -lname "$POD_LOGS_DIR/*" -delete
  if [[ -d $DATA_DIR && ! -f $DATA_DIR/varlog-containers-existed ]]; then
    rmdir "$KUBELET_CONTAINER_LOGS_DIR" 2>/dev/null || true
  fi
fi
# --one-file-system: never follow a mount that failed to come off.
rm -rf --one-file-system "$DATA_DIR" "$CLUSTER_DIR"

log "cluster down in $(ms_since "$t_start") ms"
