#!/usr/bin/env bash
# Bring up a real single-node Kubernetes cluster on this machine:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and
# containerd (runc, plus gVisor's runsc as a second runtime handler), with a
# CNI bridge whose traffic can reach only the node and the lab network.
#
#   hack/cluster/up.sh        # then: export KUBECONFIG=/run/sandprobe-cluster/admin.kubeconfig
#   hack/cluster/down.sh      # undo everything
#
#   hack/cluster/up.sh --print-source-hash   # what this checkout's cluster hashes to
#
# Needs root. Builds the Kubernetes binaries first if they are not cached
# (hack/k8s/build.sh, ~15 min cold); with warm caches bring-up takes seconds.
# A half-present previous cluster is torn down first (down.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if [[ ${1:-} == --print-source-hash ]]; then cluster_source_hash; exit 0; fi
require_root

t_start=$(now_ns)
timings=()
mark() { timings+=("$(printf '%-28s %6d ms' "$1" "$(ms_since "$2")")"); }

# ---- 0. leftovers ---------------------------------------------------------------
if [[ -e $CLUSTER_DIR || -e $DATA_DIR ]] || ip link show "$BRIDGE" &>/dev/null \
  || ip link show "$NODE_IF" &>/dev/null || [[ -n "$(ip rule show pref "$IP_RULE_PREF")" ]] \
  || { command -v nft >/dev/null && nft list table inet "$NFT_TABLE" &>/dev/null; }; then
  log "a previous cluster is (partly) present; running down.sh first"
  "$cluster_lib_dir/down.sh"
fi

# ---- 1. tools and binaries --------------------------------------------------------
t=$(now_ns)

# apt_get ARGS...: apt-get, refreshing the package lists once if they are stale.
apt_get() {
  DEBIAN_FRONTEND=noninteractive apt-get -q "$@" && return 0
  log "apt-get $1 failed; running apt-get update and retrying"
  apt-get -q update >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get -q "$@"
}

# Host tools. nftables is only a CLI (its unit is never started here).
missing=()
for tool in nft:nftables openssl:openssl ip:iproute2 jq:jq curl:curl findmnt:util-linux; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if ((${#missing[@]})); then
  log "installing host tools: ${missing[*]}"
  apt_get install -y --no-install-recommends "${missing[@]}" >/dev/null
fi

# Kubernetes + etcd (no-op when cached).
"$repo_root/hack/k8s/build.sh" >&2

# containerd, runc, CNI plugins, runsc: Debian packages unpacked into the
# cache with dpkg-deb -x, never installed, so no service is started and the
# machine's own /usr/bin and /etc stay untouched.
ensure_runtime() {
  local want=(usr/bin/containerd usr/bin/containerd-shim-runc-v2 usr/bin/ctr usr/sbin/runc
    usr/bin/runsc usr/lib/cni/bridge usr/lib/cni/host-local usr/lib/cni/loopback)
  local f ok=1
  for f in "${want[@]}"; do [[ -x $RUNTIME_ROOT/$f ]] || ok=0; done
  if ((ok)) && [[ -f $RUNTIME_ROOT/.stamp ]]; then return 0; fi
  log "unpacking Debian packages: ${RUNTIME_DEBS[*]}"
  local debs="$CACHE/k8s/debs" tmp
  rm -rf "$debs"; mkdir -p "$debs"
  # APT::Sandbox::User=root: the cache dir is not readable by the _apt user.
  (cd "$debs" && apt_get -o APT::Sandbox::User=root download "${RUNTIME_DEBS[@]}" >/dev/null)
  tmp="$(mktemp -d "$CACHE/k8s/.runtime.XXXXXX")"
  for f in "$debs"/*.deb; do dpkg-deb -x "$f" "$tmp"; done
  (cd "$debs" && ls ./*.deb) > "$tmp/.stamp"
  rm -rf "$RUNTIME_ROOT"; mv "$tmp" "$RUNTIME_ROOT"
  for f in "${want[@]}"; do [[ -x $RUNTIME_ROOT/$f ]] || die "$f missing from the unpacked packages"; done
}
ensure_runtime
# Debian ships runc in /usr/sbin; the shim looks it up by BinaryName below.
RUNC="$RUNTIME_ROOT/usr/sbin/runc"

# The probe binary: the pause image's process and the smoke/isolation tests'
# program. Rebuilt only when its source changes.
images_src="$cluster_lib_dir/images"
probe_hash="$(cat "$images_src/go.mod" "$images_src"/probe/*.go | sha256sum | cut -c1-16)"
PROBE_BIN="$IMAGES_CACHE/probe-$probe_hash"
if [[ ! -x $PROBE_BIN ]]; then
  log "building the probe binary"
  mkdir -p "$IMAGES_CACHE"
  (cd "$images_src" && CGO_ENABLED=0 GOTOOLCHAIN=local go build -trimpath -ldflags='-s -w' \
    -o "$PROBE_BIN.tmp" ./probe) && mv "$PROBE_BIN.tmp" "$PROBE_BIN"
fi
mark "binaries (cached)" "$t"

mkdir -p "$CLUSTER_DIR" "$DATA_DIR" "$LOGS" "$PIDS" "$PKI" "$CLUSTER_DIR/bin"
chmod 700 "$CLUSTER_DIR"
cp "$PROBE_BIN" "$CLUSTER_DIR/bin/probe"
echo "$PROBE_BIN" > "$CLUSTER_DIR/probe-bin"

# ---- 2. host network and isolation, 3. PKI (openssl): their own files ------------
source "$cluster_lib_dir/up-network.sh"
source "$cluster_lib_dir/up-pki.sh"

# ---- 4. control plane ----------------------------------------------------------------
t=$(now_ns)
# etcd on loopback only; fsync off: the data is thrown away by down.sh.
start_bg etcd "$K8S_BIN/etcd" --name default --data-dir "$DATA_DIR/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" \
  --unsafe-no-fsync --log-level warn
wait_for etcd 30 curl -fsS "http://127.0.0.1:$ETCD_CLIENT_PORT/health" || die "etcd not healthy; see $LOGS/etcd.log"
mark "etcd healthy" "$t"

t=$(now_ns)
# The apiserver listens on the node address only (reachable from the host and,
# per the nftables rules, from pods). ValidatingAdmissionPolicy is GA and on by
# default; its plugin is part of the default admission chain.
start_bg kube-apiserver "$K8S_BIN/kube-apiserver" \
  --advertise-address "$NODE_IP" --bind-address "$NODE_IP" --secure-port "$APISERVER_PORT" \
  --etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --client-ca-file "$PKI/ca.crt" \
  --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
  --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority "$PKI/ca.crt" \
  --kubelet-preferred-address-types InternalIP \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$PKI/sa.pub" \
  --service-account-signing-key-file "$PKI/sa.key" \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --authorization-mode Node,RBAC \
  --enable-admission-plugins NodeRestriction \
  --allow-privileged=true \
  --profiling=false \
  --v=1
wait_for "kube-apiserver /readyz" 90 kc get --raw /readyz \
  || die "kube-apiserver not ready; see $LOGS/kube-apiserver.log"
mark "kube-apiserver ready" "$t"

t=$(now_ns)
start_bg kube-controller-manager "$K8S_BIN/kube-controller-manager" \
  --kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 \
  --service-account-private-key-file "$PKI/sa.key" \
  --root-ca-file "$PKI/ca.crt" \
  --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
  --use-service-account-credentials=true \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --leader-elect=false --profiling=false --v=1
start_bg kube-scheduler "$K8S_BIN/kube-scheduler" \
  --kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" \
  --authentication-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" \
  --authorization-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --leader-elect=false --profiling=false --v=1
mark "controller-manager/scheduler" "$t"

# ---- 5. containerd (runc, runsc) and the images: their own file -----------------------
source "$cluster_lib_dir/up-containerd.sh"

# ---- 6. kubelet ----------------------------------------------------------------------------
t=$(now_ns)
mkdir -p "$KUBELET_ROOT" "$POD_LOGS_DIR"
cat > "$CLUSTER_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
# Only holders of a certificate from the cluster CA get past authentication.
authorization: {mode: AlwaysAllow}
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
# The machine has a hybrid cgroup v1 layout and no systemd.
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
# Pods never see the host's (real-network) resolver: an empty resolvConf. Their
# only nameserver is the lab's resolver (reachable once \`lab attach-cluster\`
# links the pod network to the lab; until then the address is unroutable).
resolvConf: ""
clusterDNS: [$CLUSTER_DNS]
clusterDomain: cluster.local
podLogsDir: $POD_LOGS_DIR
# Imported images cannot be pulled again: never garbage-collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# Don't evict test pods because the shared disk is busy.
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
nodeStatusUpdateFrequency: 4s
EOF
start_bg kubelet "$K8S_BIN/kubelet" \
  --config "$CLUSTER_DIR/kubelet.yaml" \
  --kubeconfig "$CLUSTER_DIR/kubelet.kubeconfig" \
  --root-dir "$KUBELET_ROOT" \
  --cert-dir "$PKI/kubelet" \
  --hostname-override "$NODE_NAME" \
  --node-ip "$NODE_IP" \
  --v=1
node_ready() {
  [[ "$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}
wait_for "node $NODE_NAME Ready" 120 node_ready || die "node not Ready; see $LOGS/kubelet.log"
# The kubelet only logs unknown config fields and carries on without them.
if grep -q 'Using lenient decoding' "$LOGS/kubelet.log"; then
  die "kubelet.yaml has fields the kubelet does not know: $(grep 'Using lenient decoding' "$LOGS/kubelet.log" | head -1)"
fi
mark "node Ready" "$t"

# ---- 7. cluster objects --------------------------------------------------------------------
t=$(now_ns)
# RuntimeClass gvisor: the handler is configured above; whether gVisor pods
# really run under containerd here is written down in hack/cluster/README.md.
kc apply -f - >/dev/null <<EOF
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: runc}
handler: runc
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: gvisor
  annotations:
    sandprobe.dev/runtime: "gVisor runsc (Debian 0.0~20221219) --platform=ptrace --network=host, one sandbox per container, via containerd's runc v2 shim; see hack/cluster/README.md"
handler: runsc
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: gvisor-default
  annotations:
    sandprobe.dev/runtime: "as gvisor, but without --oci-seccomp (gVisor's default, as GKE Sandbox runs it): the pod's seccomp profile is not loaded inside"
handler: runsc-default
EOF
wait_for "default ServiceAccount" 60 kc get serviceaccount default -n default \
  || die "no default ServiceAccount; see $LOGS/kube-controller-manager.log"
mark "default ServiceAccount" "$t"

# ValidatingAdmissionPolicy must be served at v1 (GA since 1.30, on by
# default). Asked directly rather than through discovery (no client cache, and
# no `| grep -q` that could SIGPIPE kubectl under pipefail).
vap_served() {
  local out
  out="$(kc get --raw /apis/admissionregistration.k8s.io/v1)" || return 1
  [[ $out == *'"name":"validatingadmissionpolicies"'* ]]
}
wait_for "ValidatingAdmissionPolicy API" 30 vap_served || die "ValidatingAdmissionPolicy API is not served"

cluster_source_hash >"$CLUSTER_DIR/source-hash"
log "cluster up in $(ms_since "$t_start") ms"
printf '  %s\n' "${timings[@]}" >&2
echo "KUBECONFIG=$KUBECONFIG_ADMIN"
