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

# ---- 3. PKI (openssl) ----------------------------------------------------------------
t=$(now_ns)
# new_key FILE: an ECDSA P-256 key (fast to generate, supported everywhere here).
new_key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; chmod 600 "$1"; }

# new_cert NAME SUBJECT EXTENSIONS: key + certificate signed by the cluster CA.
new_cert() {
  local name="$1" subj="$2" ext="$3"
  new_key "$PKI/$name.key"
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 30 -out "$PKI/$name.crt" \
    -extfile <(printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n%s\n' "$ext") \
    2>/dev/null
  rm -f "$PKI/$name.csr"
}
client='extendedKeyUsage=clientAuth'
server='extendedKeyUsage=serverAuth'

new_key "$PKI/ca.key"
openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=sandprobe-cluster-ca" -days 30 \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out "$PKI/ca.crt" 2>/dev/null
new_cert apiserver "/CN=kube-apiserver" \
  "$server
subjectAltName=IP:$NODE_IP,IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
new_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
new_cert admin "/O=system:masters/CN=sandprobe-admin" "$client"
new_cert controller-manager "/CN=system:kube-controller-manager" "$client"
new_cert scheduler "/CN=system:kube-scheduler" "$client"
new_cert kubelet-client "/O=system:nodes/CN=system:node:$NODE_NAME" "$client"
new_cert kubelet-serving "/CN=$NODE_NAME" "$server
subjectAltName=IP:$NODE_IP,DNS:$NODE_NAME"
# Service-account token signing key pair (RSA, the most widely verifiable).
openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null

# kubeconfig NAME CERT: a kubeconfig with embedded credentials.
kubeconfig() {
  local out="$CLUSTER_DIR/$1.kubeconfig" cert="$2"
  cat > "$out" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sandprobe
  cluster:
    server: $APISERVER_URL
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $cert
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$cert.crt")
    client-key-data: $(base64 -w0 "$PKI/$cert.key")
contexts:
- name: sandprobe
  context: {cluster: sandprobe, user: $cert}
current-context: sandprobe
EOF
  chmod 600 "$out"
}
kubeconfig admin admin
kubeconfig controller-manager controller-manager
kubeconfig scheduler scheduler
kubeconfig kubelet kubelet-client
mark "pki + kubeconfigs" "$t"

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

# ---- 5. containerd ---------------------------------------------------------------------
t=$(now_ns)
# gVisor: runsc, driven by containerd's runc shim through a wrapper that adds
# the flags this machine needs (see runsc-wrapper.sh for why). Copied so the
# running cluster does not depend on the checkout.
cp "$cluster_lib_dir/runsc-wrapper.sh" "$CLUSTER_DIR/bin/runsc"
mkdir -p "$LOGS/runsc"

mkdir -p "$CLUSTER_DIR/containerd" "$DATA_DIR/containerd"
cat > "$CLUSTER_DIR/containerd/config.toml" <<EOF
# Generated by hack/cluster/up.sh. Private sockets and directories: this
# containerd never collides with one the machine may run for other purposes.
version = 2
root = "$DATA_DIR/containerd"
state = "$CONTAINERD_STATE"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$DATA_DIR/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # root here lacks CAP_SYS_RESOURCE: without this every sandbox fails when
  # runc tries to lower oom_score_adj below the shim's own value.
  restrict_oom_score_adj = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$RUNC"
        Root = "$CLUSTER_DIR/runc"
        SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
        BinaryName = "$CLUSTER_DIR/bin/runsc"
        Root = "$CLUSTER_DIR/runsc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$CNI_CONF_DIR"
    max_conf_num = 1
EOF
# PATH: containerd finds containerd-shim-runc-v2 there, CNI plugins find iptables.
SANDPROBE_RUNSC="$RUNTIME_BIN/runsc" SANDPROBE_RUNSC_LOG_DIR="$LOGS/runsc" \
PATH="$RUNTIME_BIN:$PATH" start_bg containerd "$RUNTIME_BIN/containerd" \
  --config "$CLUSTER_DIR/containerd/config.toml" --log-level warn
wait_for containerd 30 ctrc version || die "containerd not up; see $LOGS/containerd.log"
mark "containerd up" "$t"

t=$(now_ns)
# Images: no registry, so the sandbox image and the probe image are built
# from the static probe binary and imported.
"$cluster_lib_dir/import-image.sh" "$PAUSE_IMAGE" "$CLUSTER_DIR/bin/probe" /probe pause >&2
"$cluster_lib_dir/import-image.sh" "$PROBE_IMAGE" "$CLUSTER_DIR/bin/probe" /probe report >&2
mark "images imported" "$t"

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
