#!/usr/bin/env bash
# make e2e: sandprobe's headline story on a real single-node cluster with a
# real NetworkPolicy engine.
#
#   cluster up (hack/cluster) → kube-router's NetworkPolicy controller
#   (hack/cluster/netpol.sh) → lab up, pod network attached in engine mode
#   (the lab only routes; nothing but the NetworkPolicy keeps sandboxes in) →
#   build and import the sandprobe image → kubectl apply -k (manifests/ through
#   the e2e overlay) → the rendered NetworkPolicy and a live sandbox → a Job
#   from the CronJob probes like a sandbox: green, each verdict attributed to
#   what enforced it → the regressions users suffer, each caught by the next Job (exit 1,
#   JUnit naming what answered, sandprobe_egress_unexpected_open > 0, drift
#   naming the object where a spec changed) and green again once undone:
#     1. an additive NetworkPolicy "for a minute" that allows 0.0.0.0/0,
#     2. the deny policy's podSelector stops matching (a label typo),
#     3. a "CNI upgrade": the engine restarted without enforcing, no spec
#        changed (only the probe can see it),
#     4. a sandbox pod started without the sandbox label
#   → the factory (hack/e2e/factory.sh: no proxy, nginx brokers, package
#     hosts reached directly): green; an allow-all, a broker's podSelector
#     typo, a node-address ipBlock, each caught; green once undone
#   → the admission policy refuses a sandbox pod without its runtime class →
#   the install lifecycle as a user lives it (kubectl delete -k leaves
#   nothing; then with Helm and with kustomize: install → a Job green →
#   upgrade to another image digest → a Job green → uninstall → nothing
#   left; hack/e2e/lifecycle.sh) → cluster down (engine, chains and ipsets
#   gone), lab down. The image is built as make image builds it (hack/image)
#   with the lab's CA in one more layer; the functions live in hack/e2e/lib.sh.
#
#   hack/e2e.sh                        # root; needs bin/sandprobe (make e2e builds it)
#   CNI=cilium hack/e2e.sh             # Cilium as the CNI and the engine: the CNP render writes,
#                                      # and its own story (hack/e2e/cilium.sh) instead of kube-router's
#   SANDPROBE_E2E_KEEP=1 hack/e2e.sh   # leave it all up (so does SANDPROBE_KEEP naming cluster or lab)
#
# Holds /run/sandprobe-cluster.test-lock, then /run/sandprobe-lab.test-lock
# (always in this order) for the whole run, and tears everything down on any
# exit, including Ctrl-C. Reports, logs and metrics go to $E2E_OUT (out/e2e).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) == 0 ]] || { echo "e2e: needs root (a cluster, network namespaces, nftables)" >&2; exit 1; }

out=${E2E_OUT:-out/e2e}
keep=${SANDPROBE_E2E_KEEP:-0}
# make's SANDPROBE_KEEP (hack/down.sh) naming the cluster or the lab keeps both.
case " ${SANDPROBE_KEEP:-} " in *" all "* | *cluster* | *lab*) keep=1 ;; esac
bin=bin/sandprobe
probe_bin=bin/sandprobe-probe
overlay=hack/e2e/overlay
ns=sandprobe-system
image=sandprobe.local/sandprobe:e2e
# The image the install lifecycle upgrades to (hack/e2e/lifecycle.sh).
image2=sandprobe.local/sandprobe:e2e-upgrade
go=${GO:-go}
# The Pushgateway listens on the node address: the one host address the
# cluster's firewall lets pods reach (hack/cluster/README.md). Must match
# SANDPROBE_PUSHGATEWAY in $overlay/cronjob.yaml.
node_ip=10.250.0.1
pushgateway=$node_ip:19091
lab=hack/lab/lab
netpol=hack/cluster/netpol.sh
# CNI=cilium: a real Cilium agent is the CNI and the policy engine
# (hack/e2e/cilium.sh picks the engine's variables when sourced).
cni=${CNI:-kube-router}
sandbox_ns=sandboxes
# Where the probe pods run (the e2e policy's spec.namespaces): the
# NetworkPolicies, and the regressions, go there.
probe_namespaces=("$sandbox_ns")
egress_np=sandprobe-e2e-sandbox-egress
# The witness: where the node saw each new connection of a pod towards the
# lab, before and after each filter (hack/e2e/enforcers).
witness_table=sandprobe_e2e_witness # (inet)
kubeconfig=${SANDPROBE_CLUSTER_DIR:-/run/sandprobe-cluster}/admin.kubeconfig
kubectl_bin="$(hack/k8s/build.sh --print-bin-dir)/kubectl"
kc() { "$kubectl_bin" --kubeconfig "$kubeconfig" "$@"; }
source hack/e2e/lib.sh
source hack/e2e/factory.sh
source hack/e2e/cilium.sh

# ---- locks and cleanup ----------------------------------------------------------
# Long-lived children (cluster components, lab daemons, the Pushgateway)
# must not inherit the lock descriptors, or the locks would outlive us:
# they are started with {cl}>&- {ll}>&-.
t_lock=$(now)
exec {cl}>/run/sandprobe-cluster.test-lock
if ! flock -n "$cl"; then
  echo "e2e: waiting for the test cluster (another test holds /run/sandprobe-cluster.test-lock)"
  flock "$cl"
fi
exec {ll}>/run/sandprobe-lab.test-lock
if ! flock -n "$ll"; then
  echo "e2e: waiting for the network lab (another test holds /run/sandprobe-lab.test-lock)"
  flock "$ll"
fi

timings+=("$(printf '%6ss  %s' "$(secs "$t_lock")" "waiting for the cluster and lab locks")")
pg_pid=''
observer_pid=''
trap cleanup EXIT
trap 'echo; echo "e2e: interrupted, tearing down"; exit 130' INT TERM

mkdir -p "$out"
rm -rf "${out:?}"/*
# The document work of the story (hack/e2e/e2etool), built once.
e2etool=$out/e2etool
"$go" build -o "$e2etool" ./hack/e2e/e2etool || fail "could not build hack/e2e/e2etool"
enforcers_bin=$out/enforcers
"$go" build -o "$enforcers_bin" ./hack/e2e/enforcers || fail "could not build hack/e2e/enforcers"
[[ -x $bin ]] || fail "$bin is missing: run make build (or make e2e)"
[[ -x $probe_bin ]] || fail "$probe_bin is missing: run make build (or make e2e)"
# The image holds nothing but the binary: it must be static.
for b in "$bin" "$probe_bin"; do if ldd "$b" >/dev/null 2>&1; then fail "$b is dynamically linked: build it with CGO_ENABLED=0 (make build)"; fi; done

# ---- the environment ---------------------------------------------------------------
step "cluster up" "etcd, kube-apiserver, controller-manager, scheduler, kubelet, containerd (runc + gVisor)"
hack/cluster/up.sh >"$out/cluster-up.log" 2>&1 {cl}>&- {ll}>&- || { tail -n 20 "$out/cluster-up.log" >&2; fail "hack/cluster/up.sh failed"; }
kc get nodes -o wide | quote
kc get runtimeclasses | quote

step "NetworkPolicy engine" "$engine_what"
"$netpol" up >"$out/netpol.log" 2>&1 {cl}>&- {ll}>&- || { tail -n 20 "$out/netpol.log" >&2; fail "$netpol up failed"; }
"$netpol" status | quote
tail -n 1 "$out/netpol.log" | quote

step "lab up, pod network attached" "the network lab is the internet; it only routes the cluster's pods (engine mode)"
"$lab" up >"$out/lab.log" 2>&1 {cl}>&- {ll}>&- || { tail -n 20 "$out/lab.log" >&2; fail "lab up failed"; }
"$lab" attach-cluster --engine 10.244.0.0/24 >>"$out/lab.log" 2>&1 || fail "lab attach-cluster failed"
cilium_lab # under Cilium the resolver forwards every name (hack/e2e/cilium.sh)
"$lab" status | grep -E '^(lab|cluster):' | quote
# The host's safety net stays: pods reach the lab and nothing else, engine or not.
hack/cluster/check-isolation.sh "${isolation_args[@]}" >"$out/isolation.log" 2>&1 || { tail -n 20 "$out/isolation.log" >&2; fail "hack/cluster/check-isolation.sh failed with the engine on"; }
ok "$(tail -n 1 "$out/isolation.log")"
install_witness

step "images" "$image as make image builds it (hack/image), the lab's CA baked in; $image2, one layer more, for the upgrade"
# The lab's CA (new on every lab up), where the e2e policy's caFile says: an
# organisation bakes its own CA into an image derived from the release's.
"$go" run ./hack/image build --out "$out/image" --name "$image" --created "$(git log -1 --format=%ct 2>/dev/null || echo 0)" \
  --platform "linux/$("$go" env GOARCH)=$(dirname "$bin")" --add "${SANDPROBE_LAB_DIR:-/run/sandprobe-lab}/ca.pem:/etc/sandprobe-lab/ca.pem" \
  >"$out/image.log" 2>&1 || { cat "$out/image.log" >&2; fail "could not build $image"; }
# The upgrade a user makes: the next release's image, another digest.
date +%s.%N >"$out/release-marker"
"$go" run ./hack/image derive --from "$out/image/oci" --out "$out/image2" --name "$image2" --add "$out/release-marker:/etc/sandprobe-e2e-release" \
  >>"$out/image.log" 2>&1 || { cat "$out/image.log" >&2; fail "could not derive $image2"; }
for a in "$out/image/image.tar" "$out/image2/image.tar"; do
  hack/cluster/import-image.sh --archive "$a" 2>&1 | quote
done

step "Pushgateway" "on the node address $pushgateway, where the CronJob pushes its metrics"
command -v prometheus-pushgateway >/dev/null || fail "prometheus-pushgateway is missing (make deps)"
prometheus-pushgateway --web.listen-address="$pushgateway" --persistence.file= >"$out/pushgateway.log" 2>&1 {cl}>&- {ll}>&- &
pg_pid=$!
for _ in $(seq 50); do curl -fsS "http://$pushgateway/-/ready" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fsS "http://$pushgateway/-/ready" >/dev/null || { cat "$out/pushgateway.log" >&2; fail "the Pushgateway did not start"; }
ok "ready"

# ---- the install ---------------------------------------------------------------------
step "kubectl apply -k $overlay" "manifests/ with the lab's policy and the imported image"
# The sandbox namespace exists before sandprobe is installed, as on a real
# cluster: the runner's rights there (components/sandbox-namespaces) go into it.
kc create namespace "$sandbox_ns" >/dev/null
# The base carries a PrometheusRule: the Prometheus Operator's CRD stands in.
kc apply -f hack/e2e/crds/ >/dev/null
kc wait --for=condition=Established crd/prometheusrules.monitoring.coreos.com --timeout=30s >/dev/null
kc apply -k "$overlay" 2>&1 | tee "$out/apply.txt" | quote
grep -qi warning "$out/apply.txt" && fail "kubectl apply warned (Pod Security?)"
# The probe pods use the namespace's default ServiceAccount (with no token);
# the controller-manager creates it a moment after the namespace.
for n in "$ns" "$sandbox_ns"; do
  for _ in $(seq 100); do kc -n "$n" get serviceaccount default >/dev/null 2>&1 && break; sleep 0.2; done
  kc -n "$n" get serviceaccount default >/dev/null || fail "no default ServiceAccount in $n"
done
# An admission policy takes effect a moment after it is stored.
vap_ready=''
for _ in $(seq 100); do
  if ! kc -n "$ns" run vap-ready --image="$image" --labels=sandbox=true --restart=Never --dry-run=server >/dev/null 2>&1; then
    vap_ready=1; break
  fi
  sleep 0.2
done
[[ -n $vap_ready ]] || fail "the admission policy does not refuse sandbox pods"
ok "namespace $ns (Pod Security: $(kc get ns "$ns" -o jsonpath='{.metadata.labels.pod-security\.kubernetes\.io/enforce}')), RBAC, CronJob, policy, admission policy in force"

[[ $cni != cilium ]] || cilium_e2e # hack/e2e/cilium.sh: its story, then exit (admission and lifecycle do not depend on the CNI)

step "the sandbox namespace" "the NetworkPolicy sandprobe render writes, applied with kubectl; a live sandbox for drift to compare"
# The probe pod, NetworkPolicy and policy ConfigMap render prints are
# drift-free by construction; the pod runs the cluster's built-in image
# (/probe pause: waits for SIGTERM) instead of the probe, so it stays Running
# like an agent would. No CiliumNetworkPolicy: the cluster has no Cilium.
"$bin" render --policy "$overlay/policy.yaml" --namespace "$sandbox_ns" --name agent-1 --egress networkpolicy | "$e2etool" sandbox >"$out/sandbox.yaml"
# render_netpol NS: the rendered NetworkPolicy alone, for namespace NS.
render_netpol() { "$bin" render --policy "$overlay/policy.yaml" --namespace "$1" --format egress --egress networkpolicy; }
kc apply -f "$out/sandbox.yaml" | quote
for n in "${probe_namespaces[@]}"; do
  [[ $n == "$sandbox_ns" ]] && continue
  render_netpol "$n" | kc apply -f - | quote
done
kc -n "$sandbox_ns" get networkpolicy "$egress_np" -o jsonpath='{.metadata.name}: podSelector {.spec.podSelector.matchLabels}, egress to {range .spec.egress[*]}{.to[*].ipBlock.cidr}:{.ports[*].port} {end}{"\n"}' | quote
kc -n "$sandbox_ns" wait --for=condition=Ready pod/agent-1 --timeout=120s >/dev/null || fail "the sandbox pod did not become Ready"
kc -n "$sandbox_ns" get pod agent-1 -o jsonpath='{.metadata.name}  labels: sandbox={.metadata.labels.sandbox}  runtimeClassName={.spec.runtimeClassName}  phase={.status.phase}{"\n"}' | quote
until_kr "$egress_np restricts the live sandbox agent-1" "$netpol" enforced "$sandbox_ns" agent-1
# (kube-router programs a policy only once it selects a pod: the sandbox
# namespace has one.)
until_kr "$egress_np in $sandbox_ns" "$netpol" has-policy "$sandbox_ns" "$egress_np"
ok "kube-router applies $("$netpol" policies "$sandbox_ns" agent-1 | paste -sd,) to the live sandbox's egress ($("$netpol" status | tail -n 1))"

step "healthy run" "a Job from the CronJob (kubectl create job --from=cronjob/sandprobe) probes like a sandbox"
expect_green sandprobe-healthy
neighbours_proved   # hack/e2e/factory.sh: the node's kubelet denied, and proven

# ---- 1. a rule widened "for a minute" ------------------------------------------------------
step "regression 1: an allow-all 'for a minute'" "an additive NetworkPolicy allowing 0.0.0.0/0 in the sandbox namespace"
for n in "${probe_namespaces[@]}"; do allow_all "$n" "debugging the model API, remove after"; done
until_kr "allow-egress-for-a-minute in $sandbox_ns" "$netpol" has-policy "$sandbox_ns" allow-egress-for-a-minute
say "${red}applied${reset} — NetworkPolicies add up: this one reopens everything the deny policy closed"
expect_caught sandprobe-widened blocked.lab.test networkpolicy/allow-egress-for-a-minute
for n in "${probe_namespaces[@]}"; do kc -n "$n" delete networkpolicy allow-egress-for-a-minute | quote; done
until_kr "allow-egress-for-a-minute gone from $sandbox_ns" not "$netpol" has-policy "$sandbox_ns" allow-egress-for-a-minute
step "undone" "the allow-all is deleted"
expect_green sandprobe-widened-undone

# ---- 2. the deny policy stops selecting ------------------------------------------------------
step "regression 2: a label typo" "the deny policy's podSelector becomes sandbox=ture"
for n in "${probe_namespaces[@]}"; do
  kc -n "$n" patch networkpolicy "$egress_np" --type=merge -p '{"spec":{"podSelector":{"matchLabels":{"sandbox":"ture"}}}}' | quote
done
until_kr "no policy restricts agent-1 any more" not "$netpol" enforced "$sandbox_ns" agent-1
say "${red}patched${reset} — the policy still exists and still looks right at a glance; it selects no pod"
expect_caught sandprobe-typo blocked.lab.test pod/$sandbox_ns/agent-1
for n in "${probe_namespaces[@]}"; do render_netpol "$n" | kc apply -f - | quote; done
until_kr "$egress_np restricts agent-1 again" "$netpol" enforced "$sandbox_ns" agent-1
step "undone" "the rendered NetworkPolicy is applied again"
expect_green sandprobe-typo-undone

# ---- 3. a "CNI upgrade" ------------------------------------------------------------------------
step "regression 3: a CNI upgrade" "the engine comes back without enforcing; no object changes"
"$netpol" down >>"$out/netpol.log" 2>&1 || fail "netpol.sh down failed"
"$netpol" status | quote
[[ -z $("$netpol" leftovers) ]] || fail "kube-router's rules are still there"
say "${red}not enforcing${reset} — every NetworkPolicy is still in the API, exactly as before"
expect_caught sandprobe-cni-upgrade 10.99.20.10 -
"$netpol" up >>"$out/netpol.log" 2>&1 {cl}>&- {ll}>&- || fail "netpol.sh up failed"
until_kr "$egress_np restricts agent-1 again" "$netpol" enforced "$sandbox_ns" agent-1
step "undone" "kube-router enforces again"
"$netpol" status | quote
expect_green sandprobe-cni-upgrade-undone

# ---- 4. a sandbox without its label ---------------------------------------------------------
step "regression 4: a sandbox without its label" "agent-2 starts in $sandbox_ns without sandbox=true: no NetworkPolicy selects it"
"$bin" render --policy "$overlay/policy.yaml" --namespace "$sandbox_ns" --name agent-2 --egress networkpolicy |
  "$e2etool" sandbox --only-pod --unlabel sandbox >"$out/unlabelled.yaml"
grep -q 'sandbox: "true"' "$out/unlabelled.yaml" && fail "the unlabelled sandbox still carries the label ($out/unlabelled.yaml)"
kc apply -f "$out/unlabelled.yaml" | quote
kc -n "$sandbox_ns" wait --for=condition=Ready pod/agent-2 --timeout=120s >/dev/null || fail "agent-2 did not become Ready"
kc -n "$sandbox_ns" get pod agent-2 -o jsonpath='{.metadata.name}  labels: {.metadata.labels}  phase={.status.phase}{"\n"}' | quote
# kube-router gives every local pod a firewall chain; agent-2's says no policy selects it.
has_fw() { [[ $(iptables -w -t filter -S) == *"POD name:$2 namespace: $1"* ]]; }
until_kr "a firewall chain for agent-2" has_fw "$sandbox_ns" agent-2
"$netpol" enforced "$sandbox_ns" agent-2 && fail "kube-router applies $("$netpol" policies "$sandbox_ns" agent-2) to agent-2: something selects it"
say "${red}started${reset} — no NetworkPolicy selects it: kube-router lets everything through for agent-2"
# The runner adds a probe where agent-2 stands (its labels, its node, egress
# only; reported as .../as/agent-2): what answered it is named too.
expect_caught sandprobe-unlabelled blocked.lab.test pod/$sandbox_ns/agent-2
grep -q 'testsuite name="namespace/[^"]*/as/agent-2"' "$out/sandprobe-unlabelled.xml" \
  || fail "no probe stood where agent-2 stands (no JUnit suite .../as/agent-2 in $out/sandprobe-unlabelled.xml)"
kc -n "$sandbox_ns" delete pod agent-2 --grace-period=1 --wait=true | quote
step "undone" "agent-2 is gone"
expect_green sandprobe-unlabelled-undone
factory_story   # hack/e2e/factory.sh: no proxy, in-cluster brokers; regressions 5-7
# How long the engine took to program each change (its own log, -v 1).
kr_log="${SANDPROBE_CLUSTER_DIR:-/run/sandprobe-cluster}/logs/kube-router.log"
if [[ -f $kr_log ]]; then
  say "kube-router since its last start: $(grep -o 'sync iptables took [0-9.]*[a-zµ]*' "$kr_log" | awk '{ d = $4; if (d ~ /ms$/) v = d + 0; else if (d ~ /µs$/) v = (d + 0) / 1000; else v = (d + 0) * 1000; print v }' | sort -n |
    awk '{ a[NR] = $1 } END { if (NR) printf "%d full syncs, median %.0f ms, max %.0f ms", NR, a[int((NR + 1) / 2)], a[NR]; else printf "no sync logged" }')"
fi

step "admission" "the admission policy refuses a sandbox pod without its runtime class"
try agent-no-runtime-class refused --labels=sandbox=true
try agent-under-runc refused --labels=sandbox=true --overrides='{"apiVersion":"v1","spec":{"runtimeClassName":"runc"}}'
try agent-under-gvisor admitted --labels=sandbox=true --overrides='{"apiVersion":"v1","spec":{"runtimeClassName":"gvisor"}}' --dry-run=server
try not-a-sandbox admitted --dry-run=server

# ---- the install lifecycle ------------------------------------------------------------------------
step "uninstall" "kubectl delete -k $overlay: nothing of sandprobe is left (the user's namespace and NetworkPolicies stay)"
kc delete -k "$overlay" --wait=true >"$out/uninstall.txt" 2>&1 || { quote <"$out/uninstall.txt"; fail "kubectl delete -k failed"; }
lifecycle_leftovers() { KUBECONFIG=$kubeconfig KUBECTL=$kubectl_bin SANDBOX_NS=$sandbox_ns hack/e2e/lifecycle.sh leftovers; }
for _ in $(seq 120); do left=$(lifecycle_leftovers); [[ -z $left ]] && break; sleep 1; done
[[ -z $left ]] || fail "left behind after kubectl delete -k: $(paste -sd ' ' <<<"$left")"
ok "nothing of sandprobe left"
for tool in helm kustomize; do
  step "install lifecycle: $tool" "install $image -> a Job green -> upgrade to $image2 -> a Job green -> uninstall -> nothing left"
  KUBECONFIG=$kubeconfig KUBECTL=$kubectl_bin IMAGE=$image IMAGE2=$image2 POLICY=$overlay/policy.yaml SANDBOX_NS=$sandbox_ns OUT=$out/lifecycle \
    hack/e2e/lifecycle.sh "$tool" 2>&1 | quote
  ((PIPESTATUS[0] == 0)) || fail "the $tool install lifecycle failed (logs in $out/lifecycle/$tool)"
done

end_step
printf '\n%se2e: passed%s — reports, logs and metrics in %s\n' "$green" "$reset" "$out"
