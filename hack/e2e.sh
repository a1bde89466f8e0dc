#!/usr/bin/env bash
# make e2e: sandprobe's headline story on a real single-node cluster.
#
#   cluster up (hack/cluster) → lab up + attach the pod network (hack/lab) →
#   import the sandprobe image → kubectl apply -k (manifests/ through the e2e
#   overlay) → a Job from the CronJob probes like a sandbox: green →
#   one egress rule flushed in the lab ("a CNI regression") → the next Job
#   fails the egress checks, exits 1, JUnit and metrics name what answered →
#   the admission policy refuses a sandbox pod without its runtime class →
#   cluster down, lab down.
#
#   hack/e2e.sh                     # root; needs bin/sandprobe (make e2e builds it)
#   SANDPROBE_E2E_KEEP=1 hack/e2e.sh   # leave cluster and lab up afterwards
#
# Holds /run/sandprobe-cluster.test-lock, then /run/sandprobe-lab.test-lock
# (always in this order) for the whole run, and tears everything down on any
# exit, including Ctrl-C. Reports, logs and metrics go to $E2E_OUT (out/e2e).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) == 0 ]] || { echo "e2e: needs root (a cluster, network namespaces, nftables)" >&2; exit 1; }

out=${E2E_OUT:-out/e2e}
keep=${SANDPROBE_E2E_KEEP:-0}
bin=bin/sandprobe
overlay=hack/e2e/overlay
ns=sandprobe-system
image=sandprobe.local/sandprobe:e2e
# The Pushgateway listens on the node address: the one host address the
# cluster's firewall lets pods reach (hack/cluster/README.md). Must match
# SANDPROBE_PUSHGATEWAY in $overlay/cronjob.yaml.
node_ip=10.250.0.1
pushgateway=$node_ip:19091
lab=hack/lab/lab
flushed_rule=default-deny
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
fail() {
  printf '  %s✘ %s%s\n' "$red" "$*" "$reset" >&2
  exit 1
}

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
    printf '\n%se2e failed (exit %d): state in %s/failure.txt, cluster logs in %s%s\n' \
      "$red" "$code" "$out" "${SANDPROBE_CLUSTER_DIR:-/run/sandprobe-cluster}/logs" "$reset" >&2
    tail -n 40 "$out/failure.txt" >&2 || true
  fi
  if [[ $keep == 1 ]]; then
    printf '\n%sSANDPROBE_E2E_KEEP=1: the cluster, the lab and the Pushgateway (pid %s) stay up; the locks are released%s\n' "$dim" "${pg_pid:-none}" "$reset"
  else
    local t; t=$(now)
    [[ -n $pg_pid ]] && { kill "$pg_pid" 2>/dev/null; wait "$pg_pid" 2>/dev/null; }
    hack/cluster/down.sh >/dev/null 2>&1 || { echo "e2e: hack/cluster/down.sh failed" >&2; code=1; }
    "$lab" down >/dev/null 2>&1 || { echo "e2e: lab down failed" >&2; code=1; }
    timings+=("$(printf '%6ss  %s' "$(secs "$t")" "cluster down, lab down")")
  fi
  printf '\n%stimings%s\n' "$bold" "$reset"
  printf '  %s\n' "${timings[@]}"
  printf '  %6ss  total\n' "$(secs "$t_all")"
  exit "$code"
}
trap cleanup EXIT
trap 'echo; echo "e2e: interrupted, tearing down"; exit 130' INT TERM

mkdir -p "$out"
rm -f "$out"/*
[[ -x $bin ]] || fail "$bin is missing: run make build (or make e2e)"
# The image holds nothing but the binary: it must be static.
if ldd "$bin" >/dev/null 2>&1; then fail "$bin is dynamically linked: build it with CGO_ENABLED=0 (make build)"; fi

# ---- the environment ---------------------------------------------------------------
step "cluster up" "etcd, kube-apiserver, controller-manager, scheduler, kubelet, containerd (runc + gVisor)"
hack/cluster/up.sh >"$out/cluster-up.log" 2>&1 {cl}>&- {ll}>&- || { tail -n 20 "$out/cluster-up.log" >&2; fail "hack/cluster/up.sh failed"; }
kc get nodes -o wide | quote
kc get runtimeclasses | quote

step "lab up, pod network attached" "the network lab; the cluster's pods reach it under the sandbox's egress rules"
"$lab" up >"$out/lab.log" 2>&1 {cl}>&- {ll}>&- || { tail -n 20 "$out/lab.log" >&2; fail "lab up failed"; }
"$lab" attach-cluster 10.244.0.0/24 >>"$out/lab.log" 2>&1 || fail "lab attach-cluster failed"
"$lab" status | sed -n 1,3p | quote

step "image import" "$image from $bin (there is no registry)"
rootfs=$(mktemp -d)
install -m 0755 "$bin" "$rootfs/sandprobe"
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
kc create namespace sandboxes >/dev/null
# The base carries a PrometheusRule: the Prometheus Operator's CRD stands in.
kc apply -f hack/e2e/crds/ >/dev/null
kc wait --for=condition=Established crd/prometheusrules.monitoring.coreos.com --timeout=30s >/dev/null
kc apply -k "$overlay" 2>&1 | tee "$out/apply.txt" | quote
grep -qi warning "$out/apply.txt" && fail "kubectl apply warned (Pod Security?)"
# The probe pods use the namespace's default ServiceAccount (with no token);
# the controller-manager creates it a moment after the namespace.
for n in "$ns" sandboxes; do
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

step "a live sandbox" "what sandprobe render makes of the policy, in namespace sandboxes, for drift to compare"
# The probe pod, NetworkPolicy and policy ConfigMap render prints are
# drift-free by construction; the pod runs the cluster's built-in image
# (/probe pause: waits for SIGTERM) instead of the probe, so it stays Running
# like an agent would. No CiliumNetworkPolicy: the cluster has no Cilium.
"$bin" render --policy "$overlay/policy.yaml" --namespace sandboxes --name agent-1 | python3 -c '
import re, sys
docs = [d for d in sys.stdin.read().split("---\n") if d.strip() and "\nkind: CiliumNetworkPolicy\n" not in d]
out = []
for d in docs:
    if "\nkind: Pod\n" in d:
        d = re.sub(r"(?m)^(\s+image: ).*$", r"\1sandprobe.local/probe:1", d)
        d, n = re.subn(r"  - args:\n(    - .*\n)+    command:\n    - /sandprobe\n", "  - args:\n    - pause\n    command:\n    - /probe\n", d)
        assert n == 1, "the rendered pod changed shape: " + d
    out.append(d)
print("---\n" + "---\n".join(out), end="")
' > "$out/sandbox.yaml"
kc apply -f "$out/sandbox.yaml" | quote
kc -n sandboxes wait --for=condition=Ready pod/agent-1 --timeout=120s >/dev/null || fail "the sandbox pod did not become Ready"
kc -n sandboxes get pod agent-1 -o jsonpath='{.metadata.name}  labels: sandbox={.metadata.labels.sandbox}  runtimeClassName={.spec.runtimeClassName}  phase={.status.phase}{"\n"}' | quote

# ---- the runs -----------------------------------------------------------------------------
# run_job NAME: a Job from the CronJob, as the schedule would start it; waits
# for it to end and leaves $out/NAME.{log,xml,prom,pods,exit}.
run_job() {
  local job=$1 state='' code
  kc -n "$ns" create job "$job" --from=cronjob/sandprobe | quote
  # Watch for the probe pod the runner starts, in the sandbox namespace (it
  # deletes it when done).
  (
    while :; do
      kc get pods -A -l app.kubernetes.io/name=sandprobe-probe,sandprobe.dev/run -o \
        jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}  labels: sandbox={.metadata.labels.sandbox}  runtimeClassName={.spec.runtimeClassName}  uid={.spec.securityContext.runAsUser}  phase={.status.phase}{"\n"}{end}' 2>/dev/null
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

step "healthy run" "a Job from the CronJob (kubectl create job --from=cronjob/sandprobe) probes like a sandbox"
run_job sandprobe-healthy
show_run sandprobe-healthy
check_probe_pod sandprobe-healthy
[[ $(cat "$out/sandprobe-healthy.exit") == 0 ]] || fail "the healthy run exited $(cat "$out/sandprobe-healthy.exit"), want 0 (see $out/sandprobe-healthy.log)"
[[ $(junit_attr failures "$out/sandprobe-healthy.xml") == 0 && $(junit_attr errors "$out/sandprobe-healthy.xml") == 0 ]] \
  || fail "the healthy run's JUnit has failures or errors ($out/sandprobe-healthy.xml)"
[[ $(metric sandprobe_up "$out/sandprobe-healthy.prom") == 1 && $(metric sandprobe_egress_unexpected_open "$out/sandprobe-healthy.prom") == 0 ]] \
  || fail "the healthy run's metrics are not sandprobe_up 1, egress_unexpected_open 0 ($out/sandprobe-healthy.prom)"
[[ $(metric sandprobe_sandboxes_scanned "$out/sandprobe-healthy.prom") -ge 1 ]] \
  || fail "drift scanned no sandbox (sandprobe_sandboxes_scanned in $out/sandprobe-healthy.prom)"
ok "${green}conformant${reset}: exit 0, no failure, every must-fail destination blocked, the live sandbox drift-free"

step "CNI regression" "the lab's nft rule '$flushed_rule' disappears (blocked.lab.test becomes reachable)"
"$lab" rules | grep -E "^$flushed_rule " | quote || true
"$lab" break flush-rule "$flushed_rule" >/dev/null 2>&1
say "${red}deleted${reset} — nothing fails loudly: sandboxes keep working"

step "regressed run" "the next Job catches it"
run_job sandprobe-regressed
show_run sandprobe-regressed
check_probe_pod sandprobe-regressed
[[ $(cat "$out/sandprobe-regressed.exit") == 1 ]] || fail "the regressed run exited $(cat "$out/sandprobe-regressed.exit"), want 1 (not conformant)"
[[ $(junit_attr failures "$out/sandprobe-regressed.xml") -gt 0 ]] || fail "the regressed run's JUnit has no failure"
open=$(metric sandprobe_egress_unexpected_open "$out/sandprobe-regressed.prom")
[[ $open != absent && $open -gt 0 ]] || fail "sandprobe_egress_unexpected_open is $open after the regression, want > 0"
say "what answered (JUnit failures):"
junit_failures "$out/sandprobe-regressed.xml" | quote
grep -q 'blocked.lab.test' "$out/sandprobe-regressed.xml" || fail "the JUnit does not name blocked.lab.test"
say "metrics that page (Pushgateway):"
grep -E '^sandprobe_(egress_unexpected_open|check_success\{[^}]*egress[^}]*\} 0)' "$out/sandprobe-regressed.prom" | quote
ok "${red}not conformant${reset}: exit 1, and the reports say which destination answered"
"$lab" heal >/dev/null 2>&1

step "admission" "the admission policy refuses a sandbox pod without its runtime class"
# try NAME WANT [kubectl run flags...]: WANT is refused or admitted.
try() {
  local name=$1 want=$2 msg; shift 2
  if msg=$(kc -n sandboxes run "$name" --image="$image" --image-pull-policy=Never --restart=Never "$@" 2>&1); then
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
