#!/usr/bin/env bash
# make e2e: sandprobe's headline story on a real single-node cluster with a
# real NetworkPolicy engine.
#
#   cluster up (hack/cluster) → kube-router's NetworkPolicy controller
#   (hack/cluster/netpol.sh) → lab up, pod network attached in engine mode
#   (the lab only routes; nothing but the NetworkPolicy keeps sandboxes in) →
#   import the sandprobe image → kubectl apply -k (manifests/ through the e2e
#   overlay) → the NetworkPolicy `sandprobe render` writes, applied in the
#   sandbox namespace, and a live sandbox → a Job from the CronJob probes like
#   a sandbox: green, each verdict attributed to what enforced it → the
#   regressions users really suffer, each caught by the next Job (exit 1,
#   JUnit naming what answered, sandprobe_egress_unexpected_open > 0, drift
#   naming the object where a spec changed) and green again once undone:
#     1. an additive NetworkPolicy "for a minute" that allows 0.0.0.0/0,
#     2. the deny policy's podSelector stops matching (a label typo),
#     3. a "CNI upgrade": the engine restarted without enforcing, no spec
#        changed (only the probe can see it),
#     4. a sandbox pod started without the sandbox label
#   → the admission policy refuses a sandbox pod without its runtime class →
#   cluster down (engine, chains and ipsets gone), lab down.
#
#   hack/e2e.sh                     # root; needs bin/sandprobe (make e2e builds it)
#   SANDPROBE_E2E_KEEP=1 hack/e2e.sh   # leave cluster, engine and lab up afterwards
#                                      (SANDPROBE_KEEP naming cluster or lab does too)
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
# The Pushgateway listens on the node address: the one host address the
# cluster's firewall lets pods reach (hack/cluster/README.md). Must match
# SANDPROBE_PUSHGATEWAY in $overlay/cronjob.yaml.
node_ip=10.250.0.1
pushgateway=$node_ip:19091
lab=hack/lab/lab
netpol=hack/cluster/netpol.sh
sandbox_ns=sandboxes
# Where the probe pods run (the e2e policy's spec.namespaces): the
# NetworkPolicies, and the regressions, go there.
probe_namespaces=("$sandbox_ns")
egress_np=sandprobe-e2e-sandbox-egress
# The witness: where the node saw each new connection of a pod towards the
# lab, before and after each filter (hack/e2e/enforcers.py).
witness="inet sandprobe_e2e_witness"
kubeconfig=${SANDPROBE_CLUSTER_DIR:-/run/sandprobe-cluster}/admin.kubeconfig
kubectl_bin="$(hack/k8s/build.sh --print-bin-dir)/kubectl"
kc() { "$kubectl_bin" --kubeconfig "$kubeconfig" "$@"; }

bold=$'\e[1m' dim=$'\e[2m' red=$'\e[31m' green=$'\e[32m' reset=$'\e[0m'
[[ -t 1 && -z ${NO_COLOR:-} ]] || bold='' dim='' red='' green='' reset=''
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
t_all=$(now)
timings=()
step_name='' t_step='' step_no=0
# step NAME [DETAIL]: a numbered chapter of the story, timed under NAME.
step() {
  end_step
  step_no=$((step_no + 1)) step_name=$1 t_step=$(now)
  printf '\n%s▶ %d. %s%s%s\n' "$bold" "$step_no" "$1" "${2:+: $2}" "$reset"
}
end_step() {
  if [[ -n $step_name ]]; then timings+=("$(printf '%6ss  %d. %s' "$(secs "$t_step")" "$step_no" "$step_name")"); fi
  step_name=''
}
say() { printf '  %s\n' "$*"; }
quote() { sed "s/^/  $dim/; s/\$/$reset/"; }
ok() { printf '  %s✔%s %s\n' "$green" "$reset" "$*"; }
fail_msg=''
fail() {
  fail_msg="step $step_no ($step_name): $*"
  printf '  %s✘ %s%s\n' "$red" "$*" "$reset" >&2
  exit 1
}

# until_kr WHAT CMD...: wait (≤ 30 s) until kube-router's rules say CMD: a
# change is in force only once the engine has programmed it.
until_kr() {
  local what=$1 t; shift
  t=$(now)
  for _ in $(seq 150); do "$@" && break; sleep 0.2; done
  "$@" || fail "kube-router never got there: $what"
  say "in force $(secs "$t") s later: $what"
}
not() { ! "$@"; }

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
cleanup() {
  local code=$?
  trap - EXIT INT TERM
  end_step
  [[ -n $observer_pid ]] && kill "$observer_pid" 2>/dev/null
  if ((code != 0)) && [[ -s $kubeconfig ]]; then
    {
      echo "== jobs, pods, events in $ns"
      kc -n "$ns" get jobs,pods -o wide 2>&1
      kc -n "$ns" get events --sort-by=.lastTimestamp 2>&1 | tail -n 30
      for j in $(kc -n "$ns" get jobs -o name 2>/dev/null); do
        echo "== logs of $j"
        kc -n "$ns" logs "$j" --tail=80 2>&1
      done
    } > "$out/failure.txt" 2>&1 || true
    # The cluster's logs (kube-router, apiserver, kubelet) go down with it.
    rm -rf "$out/cluster-logs"
    cp -r "${SANDPROBE_CLUSTER_DIR:-/run/sandprobe-cluster}/logs" "$out/cluster-logs" 2>/dev/null || true
    printf '\n%se2e failed (exit %d): state in %s/failure.txt, cluster logs in %s/cluster-logs%s\n' \
      "$red" "$code" "$out" "$out" "$reset" >&2
    tail -n 40 "$out/failure.txt" >&2 || true
  fi
  nft delete table $witness 2>/dev/null || true
  if [[ $keep == 1 ]]; then
    printf '\n%sSANDPROBE_E2E_KEEP=1: the cluster, the lab and the Pushgateway (pid %s) stay up; the locks are released%s\n' "$dim" "${pg_pid:-none}" "$reset"
  else
    local t; t=$(now)
    [[ -n $pg_pid ]] && { kill "$pg_pid" 2>/dev/null; wait "$pg_pid" 2>/dev/null; }
    hack/cluster/down.sh >/dev/null 2>&1 || { echo "e2e: hack/cluster/down.sh failed" >&2; code=1; }
    # Nothing of the engine may outlive the cluster: no chain, jump rule or ipset.
    if left=$("$netpol" leftovers 2>&1); [[ -n $left ]]; then
      echo "e2e: kube-router left behind after down: $left" >&2; code=1
    fi
    "$lab" down >/dev/null 2>&1 || { echo "e2e: lab down failed" >&2; code=1; }
    timings+=("$(printf '%6ss  %s' "$(secs "$t")" "cluster down, lab down")")
  fi
  printf '\n%stimings%s\n' "$bold" "$reset"
  printf '  %s\n' "${timings[@]}"
  printf '  %6ss  total\n' "$(secs "$t_all")"
  # Last, so that a log's tail (CI keeps only the end) says what failed.
  [[ -n $fail_msg ]] && printf '\n%se2e failed at %s%s\n' "$red" "$fail_msg" "$reset" >&2
  exit "$code"
}
trap cleanup EXIT
trap 'echo; echo "e2e: interrupted, tearing down"; exit 130' INT TERM

mkdir -p "$out"
rm -rf "$out"/*
[[ -x $bin ]] || fail "$bin is missing: run make build (or make e2e)"
[[ -x $probe_bin ]] || fail "$probe_bin is missing: run make build (or make e2e)"
# The image holds nothing but the binary: it must be static.
for b in "$bin" "$probe_bin"; do if ldd "$b" >/dev/null 2>&1; then fail "$b is dynamically linked: build it with CGO_ENABLED=0 (make build)"; fi; done

# ---- the environment ---------------------------------------------------------------
step "cluster up" "etcd, kube-apiserver, controller-manager, scheduler, kubelet, containerd (runc + gVisor)"
hack/cluster/up.sh >"$out/cluster-up.log" 2>&1 {cl}>&- {ll}>&- || { tail -n 20 "$out/cluster-up.log" >&2; fail "hack/cluster/up.sh failed"; }
kc get nodes -o wide | quote
kc get runtimeclasses | quote

step "NetworkPolicy engine" "kube-router's network-policy controller, firewall only, beside the bridge CNI"
"$netpol" up >"$out/netpol.log" 2>&1 {cl}>&- {ll}>&- || { tail -n 20 "$out/netpol.log" >&2; fail "hack/cluster/netpol.sh up failed"; }
"$netpol" status | quote
tail -n 1 "$out/netpol.log" | quote

step "lab up, pod network attached" "the network lab is the internet; it only routes the cluster's pods (engine mode)"
"$lab" up >"$out/lab.log" 2>&1 {cl}>&- {ll}>&- || { tail -n 20 "$out/lab.log" >&2; fail "lab up failed"; }
"$lab" attach-cluster --engine 10.244.0.0/24 >>"$out/lab.log" 2>&1 || fail "lab attach-cluster failed"
"$lab" status | grep -E '^(lab|cluster):' | quote
# The host's safety net stays: pods reach the lab and nothing else, engine or not.
hack/cluster/check-isolation.sh >"$out/isolation.log" 2>&1 || { tail -n 20 "$out/isolation.log" >&2; fail "hack/cluster/check-isolation.sh failed with the engine on"; }
ok "$(tail -n 1 "$out/isolation.log")"
# The witness, in the forward hook around the node's filters.
nft -f - <<NFT || fail "could not install the witness table"
table $witness {
  set pre { type ipv4_addr . ipv4_addr . inet_proto . inet_service; flags dynamic; size 65535; }
  set mid { type ipv4_addr . ipv4_addr . inet_proto . inet_service; flags dynamic; size 65535; }
  set post { type ipv4_addr . ipv4_addr . inet_proto . inet_service; flags dynamic; size 65535; }
  chain pre {
    type filter hook forward priority -30; policy accept;
    ip saddr 10.244.0.0/24 ip daddr 10.99.0.0/16 meta l4proto { tcp, udp } ct state new add @pre { ip saddr . ip daddr . meta l4proto . th dport }
  }
  chain mid {
    type filter hook forward priority -5; policy accept;
    ip saddr 10.244.0.0/24 ip daddr 10.99.0.0/16 meta l4proto { tcp, udp } ct state new add @mid { ip saddr . ip daddr . meta l4proto . th dport }
  }
  chain post {
    type filter hook forward priority 10; policy accept;
    ip saddr 10.244.0.0/24 ip daddr 10.99.0.0/16 meta l4proto { tcp, udp } ct state new add @post { ip saddr . ip daddr . meta l4proto . th dport }
  }
}
NFT

step "image import" "$image from $bin (there is no registry)"
rootfs=$(mktemp -d)
install -m 0755 "$bin" "$rootfs/sandprobe"
# The small probe every probe pod runs (and the init container copies).
install -m 0755 "$probe_bin" "$rootfs/sandprobe-probe"
# The lab's CA (new on every lab up), where the e2e policy's caFile says: a
# real sandbox image carries its organisation's CA the same way.
install -D -m 0644 "${SANDPROBE_LAB_DIR:-/run/sandprobe-lab}/ca.pem" "$rootfs/etc/sandprobe-lab/ca.pem"
mkdir -p "$rootfs/dev" "$rootfs/proc" "$rootfs/sys" "$rootfs/tmp"
touch "$rootfs/etc/hosts" "$rootfs/etc/resolv.conf" "$rootfs/etc/hostname"
chmod 1777 "$rootfs/tmp"
hack/cluster/import-image.sh "$image" "$rootfs" /sandprobe 2>&1 | quote
rm -rf "$rootfs"

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

step "the sandbox namespace" "the NetworkPolicy sandprobe render writes, applied with kubectl; a live sandbox for drift to compare"
# The probe pod, NetworkPolicy and policy ConfigMap render prints are
# drift-free by construction; the pod runs the cluster's built-in image
# (/probe pause: waits for SIGTERM) instead of the probe, so it stays Running
# like an agent would. No CiliumNetworkPolicy: the cluster has no Cilium.
"$bin" render --policy "$overlay/policy.yaml" --namespace "$sandbox_ns" --name agent-1 --egress networkpolicy | python3 -c '
import re, sys
docs = [d for d in sys.stdin.read().split("---\n") if d.strip()]
out = []
for d in docs:
    if "\nkind: Pod\n" in d:
        d = re.sub(r"(?m)^(\s+image: ).*$", r"\1sandprobe.local/probe:1", d)
        d, n = re.subn(r"  - args:\n(    - .*\n)+    command:\n    - /sandprobe(?:-probe)?\n", "  - args:\n    - pause\n    command:\n    - /probe\n", d)
        assert n == 1, "the rendered pod changed shape: " + d
        # A probe pod ends at the probe deadline; an agent runs until it is
        # done (the live sandbox must outlive every run of this test).
        d, n = re.subn(r"(?m)^  activeDeadlineSeconds: \d+\n", "", d)
        assert n == 1, "the rendered pod has no activeDeadlineSeconds: " + d
    out.append(d)
print("---\n" + "---\n".join(out), end="")
' > "$out/sandbox.yaml"
# render_netpol NS: the rendered NetworkPolicy alone, for namespace NS.
render_netpol() {
  "$bin" render --policy "$overlay/policy.yaml" --namespace "$1" --egress networkpolicy |
    python3 -c 'import sys; print("---\n" + "---\n".join(d for d in sys.stdin.read().split("---\n") if "\nkind: NetworkPolicy\n" in d), end="")'
}
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

# ---- the runs -----------------------------------------------------------------------------
# run_job NAME: a Job from the CronJob, as the schedule would start it; waits
# for it to end and leaves $out/NAME.{log,xml,prom,pods,exit}.
run_job() {
  local job=$1 state='' code
  for set in pre mid post; do nft flush set $witness $set; done
  kc -n "$ns" create job "$job" --from=cronjob/sandprobe | quote
  # Watch for the probe pod the runner starts, in the sandbox namespace (it
  # deletes it when done).
  (
    while :; do
      kc get pods -A -l app.kubernetes.io/name=sandprobe-probe,sandprobe.dev/run -o \
        jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}  labels: sandbox={.metadata.labels.sandbox}  runtimeClassName={.spec.runtimeClassName}  uid={.spec.securityContext.runAsUser}  ip={.status.podIP}  phase={.status.phase}{"\n"}{end}' 2>/dev/null
      sleep 0.3
    done
  ) > "$out/$job.pods.raw" &
  observer_pid=$!
  for _ in $(seq 600); do
    state=$(kc -n "$ns" get job "$job" -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type}{" "}{end}')
    [[ $state == *Complete* || $state == *Failed* ]] && break
    sleep 0.5
  done
  kill "$observer_pid" 2>/dev/null; wait "$observer_pid" 2>/dev/null || true
  observer_pid=''
  awk '!seen[$0]++' "$out/$job.pods.raw" > "$out/$job.pods"
  nft -j list table $witness > "$out/$job.witness.json"
  [[ $state == *Complete* || $state == *Failed* ]] || fail "job $job did not finish in 300 s"
  code=$(kc -n "$ns" get pods -l "batch.kubernetes.io/job-name=$job" \
    -o jsonpath='{.items[0].status.containerStatuses[0].state.terminated.exitCode}')
  echo "$code" > "$out/$job.exit"
  kc -n "$ns" logs "job/$job" > "$out/$job.log" 2>&1 || true
  # stdout is the JUnit report (SANDPROBE_OUTPUT=junit); stderr's log lines
  # share the stream.
  sed -n '/^<?xml/,/^<\/testsuites>/p' "$out/$job.log" > "$out/$job.xml"
  curl -fsS "http://$pushgateway/metrics" | grep -E '^sandprobe_' | grep 'cluster="e2e"' > "$out/$job.prom" || true
}

# junit_attr ATTR FILE: an attribute of <testsuites>.
junit_attr() { sed -n "s/.*<testsuites [^>]*$1=\"\\([0-9]*\\)\".*/\\1/p" "$2" | head -n 1; }
# junit_failures FILE: "suite / testcase: message" for each failure.
junit_failures() {
  python3 - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
for suite in ET.parse(sys.argv[1]).getroot().iter("testsuite"):
    for case in suite.iter("testcase"):
        for f in case.findall("failure"):
            print(f"{suite.get('name')} / {case.get('name')}: {f.get('message')}")
PY
}
# metric NAME FILE: the sum of a metric's samples.
metric() { awk -v m="$1" 'index($0, m"{") == 1 || index($0, m" ") == 1 { s += $NF; n++ } END { if (n) print s + 0; else print "absent" }' "$2"; }

show_run() {
  local job=$1
  say "probe pod seen while the runner waited:"
  if [[ -s $out/$job.pods ]]; then quote < "$out/$job.pods"; else say "  (none seen)"; fi
  say "runner exit code: $(cat "$out/$job.exit")"
  say "JUnit: tests=$(junit_attr tests "$out/$job.xml") failures=$(junit_attr failures "$out/$job.xml") errors=$(junit_attr errors "$out/$job.xml") skipped=$(junit_attr skipped "$out/$job.xml")"
  say "metrics (Pushgateway): sandprobe_up=$(metric sandprobe_up "$out/$job.prom") sandprobe_sandboxes_scanned=$(metric sandprobe_sandboxes_scanned "$out/$job.prom") sandprobe_egress_unexpected_open=$(metric sandprobe_egress_unexpected_open "$out/$job.prom") sandprobe_egress_allowed_unreachable=$(metric sandprobe_egress_allowed_unreachable "$out/$job.prom")"
}

# The probe pod must have run like a sandbox: in the sandbox namespace, with
# the selector's label and the policy's runtime class.
check_probe_pod() {
  local job=$1
  grep -q '^sandboxes/.*  labels: sandbox=true  runtimeClassName=gvisor' "$out/$job.pods" \
    || fail "no probe pod in namespace sandboxes with label sandbox=true and runtimeClassName=gvisor was seen (see $out/$job.pods)"
}

# probe_ips JOB: the addresses the probe pods of a run had.
probe_ips() { sed -n 's/.*  ip=\([0-9.][0-9.]*\)  .*/\1/p' "$out/$1.pods" | sort -u; }

# enforcers JOB [--expect healthy]: which component enforced each egress
# verdict of the run (hack/e2e/enforcers.py), printed and kept in JOB.enforcers.
enforcers() {
  local job=$1; shift
  local args=() ip
  for ip in $(probe_ips "$job"); do args+=(--probe-ip "$ip"); done
  ((${#args[@]})) || fail "no probe pod address was seen for $job (see $out/$job.pods)"
  python3 hack/e2e/enforcers.py --junit "$out/$job.xml" --witness "$out/$job.witness.json" \
    --lab-json "${SANDPROBE_LAB_DIR:-/run/sandprobe-lab}/lab.json" "${args[@]}" "$@" > "$out/$job.enforcers" 2>&1
}

# expect_green JOB: the run is conformant, every deny enforced by what this
# cluster promises (kube-router's NetworkPolicy, the proxy's deny, the resolver).
expect_green() {
  local job=$1
  run_job "$job"
  show_run "$job"
  check_probe_pod "$job"
  [[ $(cat "$out/$job.exit") == 0 ]] || { junit_failures "$out/$job.xml" | quote; fail "$job exited $(cat "$out/$job.exit"), want 0 (see $out/$job.log); failures: $(junit_failures "$out/$job.xml" | head -n 6 | paste -sd '|')"; }
  [[ $(junit_attr failures "$out/$job.xml") == 0 && $(junit_attr errors "$out/$job.xml") == 0 ]] \
    || fail "$job's JUnit has failures or errors ($out/$job.xml)"
  [[ $(metric sandprobe_up "$out/$job.prom") == 1 && $(metric sandprobe_egress_unexpected_open "$out/$job.prom") == 0 ]] \
    || fail "$job's metrics are not sandprobe_up 1, egress_unexpected_open 0 ($out/$job.prom)"
  [[ $(metric sandprobe_sandboxes_scanned "$out/$job.prom") -ge 1 ]] \
    || fail "drift scanned no sandbox (sandprobe_sandboxes_scanned in $out/$job.prom)"
  if ! enforcers "$job" --expect healthy; then cat "$out/$job.enforcers" | quote; fail "$job: a verdict was not enforced by what the e2e cluster promises: $(grep '^  ' "$out/$job.enforcers" | head -n 6 | paste -sd '|')"; fi
  say "who enforced each verdict:"
  quote < "$out/$job.enforcers"
  if grep -q 'not yet in force when this pod started' "$out/$job.xml"; then
    say "the probe pod ran before kube-router isolated it (v2.1 has no --netpol-default-deny): the denies that answered then were refused on the second dial"
  fi
  ok "${green}conformant${reset}: exit 0, no failure, every must-fail destination blocked — by kube-router's NetworkPolicy or the proxy's deny"
}

# expect_caught JOB DEST [DRIFT_OBJECT]: the run is not conformant, its JUnit
# names DEST as a destination that answered, sandprobe_egress_unexpected_open
# is > 0 with its node and namespace labels, and, when given, drift names
# DRIFT_OBJECT; with "-" for DRIFT_OBJECT, drift must find nothing (no spec
# changed: only the probe can see it). DEST "-": no egress verdict changes
# (only drift can see it).
expect_caught() {
  local job=$1 dest=$2 obj=${3:-} open samples
  run_job "$job"
  show_run "$job"
  check_probe_pod "$job"
  [[ $(cat "$out/$job.exit") == 1 ]] || fail "$job exited $(cat "$out/$job.exit"), want 1 (not conformant; see $out/$job.log)"
  [[ $(junit_attr failures "$out/$job.xml") -gt 0 ]] || fail "$job's JUnit has no failure"
  if [[ $dest != - ]]; then
  open=$(metric sandprobe_egress_unexpected_open "$out/$job.prom")
  [[ $open != absent && $open -gt 0 ]] || fail "sandprobe_egress_unexpected_open is $open in $job, want > 0"
  samples=$(grep -E '^sandprobe_egress_unexpected_open\{' "$out/$job.prom" | awk '$NF > 0')
  [[ $samples == *'node="'* && $samples == *"namespace=\"$sandbox_ns\""* ]] \
    || fail "sandprobe_egress_unexpected_open > 0 does not carry node and namespace=\"$sandbox_ns\" labels: $samples"
  say "what answered (JUnit failures):"
  junit_failures "$out/$job.xml" | quote
  junit_failures "$out/$job.xml" | grep "egress.* $dest" >/dev/null || fail "$job's JUnit does not name $dest as a destination that answered"
  say "the page (Pushgateway):"
  quote <<<"$samples"
  else
    say "JUnit failures:"
    junit_failures "$out/$job.xml" | quote
  fi
  case $obj in
    "") ;;
    -)
      local drift; drift=$(metric sandprobe_drift_findings "$out/$job.prom")
      [[ $drift == absent || $drift == 0 ]] || fail "$job: drift found $drift differences, but no spec changed"
      ok "drift: nothing changed in any spec — only the probe saw it" ;;
    *)
      grep -q "$obj" "$out/$job.xml" || fail "$job's drift does not name $obj"
      say "drift names it:"
      junit_failures "$out/$job.xml" | grep -F "$obj" | head -n 3 | quote ;;
  esac
  enforcers "$job" || true
  say "who enforced each verdict (or nobody):"
  grep -E 'FAIL|enforced by' "$out/$job.enforcers" | quote
  if [[ $dest == - ]]; then
    ok "${red}not conformant${reset}: exit 1, and drift names $obj (the probe pod carries the label, so its own egress is unchanged)"
  else
    ok "${red}not conformant${reset}: exit 1, and the reports say which destination answered"
  fi
}


step "healthy run" "a Job from the CronJob (kubectl create job --from=cronjob/sandprobe) probes like a sandbox"
expect_green sandprobe-healthy

# ---- 1. a rule widened "for a minute" ------------------------------------------------------
step "regression 1: an allow-all 'for a minute'" "an additive NetworkPolicy allowing 0.0.0.0/0 in the sandbox namespace"
for n in "${probe_namespaces[@]}"; do
  kc apply -f - <<YAML | quote
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-egress-for-a-minute, namespace: $n, annotations: {note: "debugging the model API, remove after"}}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress: [{to: [{ipBlock: {cidr: 0.0.0.0/0}}]}]
YAML
done
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
sed -e 's/^  name: agent-1$/  name: agent-2/' -e '/^    sandbox: "true"$/d' "$out/sandbox.yaml" |
  python3 -c 'import sys; print("---\n" + "---\n".join(d for d in sys.stdin.read().split("---\n") if "\nkind: Pod\n" in d), end="")' > "$out/unlabelled.yaml"
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

# How long the engine took to program each change (its own log, -v 1).
kr_log="${SANDPROBE_CLUSTER_DIR:-/run/sandprobe-cluster}/logs/kube-router.log"
if [[ -f $kr_log ]]; then
  say "kube-router since its last start: $(grep -o 'sync iptables took [0-9.]*[a-zµ]*' "$kr_log" | awk '{ d = $4; if (d ~ /ms$/) v = d + 0; else if (d ~ /µs$/) v = (d + 0) / 1000; else v = (d + 0) * 1000; print v }' | sort -n |
    awk '{ a[NR] = $1 } END { if (NR) printf "%d full syncs, median %.0f ms, max %.0f ms", NR, a[int((NR + 1) / 2)], a[NR]; else printf "no sync logged" }')"
fi

step "admission" "the admission policy refuses a sandbox pod without its runtime class"
# try NAME WANT [kubectl run flags...]: WANT is refused or admitted.
try() {
  local name=$1 want=$2 msg; shift 2
  if msg=$(kc -n "$sandbox_ns" run "$name" --image="$image" --image-pull-policy=Never --restart=Never "$@" 2>&1); then
    [[ $want == admitted ]] || fail "$name was admitted: $msg"
    ok "$name: admitted"
  else
    [[ $want == refused ]] || fail "$name was refused: $msg"
    [[ $msg == *"allows only gvisor"* ]] || fail "$name was refused, but not by the admission policy: $msg"
    ok "$name: refused"
    printf '%s\n' "$msg" | fold -s -w 110 | quote
  fi
}
try agent-no-runtime-class refused --labels=sandbox=true
try agent-under-runc refused --labels=sandbox=true --overrides='{"apiVersion":"v1","spec":{"runtimeClassName":"runc"}}'
try agent-under-gvisor admitted --labels=sandbox=true --overrides='{"apiVersion":"v1","spec":{"runtimeClassName":"gvisor"}}' --dry-run=server
try not-a-sandbox admitted --dry-run=server

end_step
printf '\n%se2e: passed%s — reports, logs and metrics in %s\n' "$green" "$reset" "$out"
